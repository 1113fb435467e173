/**
 * Token-exact stitching. A harness sends the whole history every turn; when that history is the
 * one the proxy already captured (its last request, then the answer it gave, then new messages),
 * the next prompt is the earlier prompt and output ids exactly as the engine saw and sampled them,
 * followed by the tokens of the new messages alone. Nothing captured is tokenized again, and
 * reasoning the client dropped from its copy of the history stays in the prompt.
 *
 * A session's requests form threads: a request that extends no thread and shares no opening with
 * one (a subagent, a conversation restarted from a compaction summary) starts a thread of its own,
 * recorded as its own trajectory and linked to the session by its lineage.
 */

import type { TemplateMessage, TemplateToolCall, ToolDefinition } from '../engine/tokenizer/template.js';
import type { ChatTokenizer, EncodeChatOptions } from '../engine/tokenizer/tokenizer.js';
import type { Sample } from '../sample.js';
import type { FinishOptions, TrajectoryManager } from './trajectory/manager.js';

/**
 * How a turn's prompt was made:
 * - `first`: a thread's first turn, rendered and tokenized whole;
 * - `reused`: the captured history's ids, then the new messages' tokens;
 * - `rerendered`: the history was unchanged but the template renders it differently now, so the
 *   whole prompt was tokenized again;
 * - `changed`: the client changed the history (an edited or dropped message), tokenized whole;
 * - `branch`: a new thread of the session (its opening matches no thread).
 */
export type StitchKind = 'first' | 'reused' | 'rerendered' | 'changed' | 'branch';

/** How a turn's prompt tokens were made, and how many came from where. */
export interface StitchInfo {
  kind: StitchKind;
  /** Thread index within the session (0 is the session's first thread). */
  thread: number;
  /** Prompt tokens taken from earlier turns' prompt and output ids. */
  reusedTokens: number;
  /** Prompt tokens that came from tokenizing text this turn. */
  renderedTokens: number;
  /** Of those, tokens standing for history already captured (0 when the history was reused). */
  retokenizedTokens: number;
}

/** The stitch counts of one thread, summed over its turns. */
export interface StitchTotals {
  reused_tokens: number;
  rendered_tokens: number;
  retokenized_tokens: number;
  turns: Record<StitchKind, number>;
}

export interface Thread {
  index: number;
  /** The trajectory this thread records into. */
  key: string;
  /** Index of the thread it branched from (undefined for thread 0). */
  parent: number | undefined;
  /** The last completed turn: its request messages, rendered prompt, ids and the answer given. */
  last:
    | {
        messages: readonly TemplateMessage[];
        tools: readonly ToolDefinition[];
        templateKwargs: Record<string, unknown> | undefined;
        promptText: string;
        promptIds: Int32Array;
        outputIds: Int32Array;
        reply: TemplateMessage;
      }
    | undefined;
  totals: StitchTotals;
}

export interface PromptPlan {
  thread: Thread;
  promptIds: Int32Array;
  promptText: string;
  stitch: StitchInfo;
}

export interface PlanRequest {
  messages: readonly TemplateMessage[];
  tools: readonly ToolDefinition[];
  templateKwargs: Record<string, unknown> | undefined;
  specialTokenText: EncodeChatOptions['specialTokenText'];
  signal: AbortSignal;
  /** Told the length of each text about to be tokenized; throws to refuse it (the session's budget). */
  charge?: ((chars: number) => void) | undefined;
}

export function emptyTotals(): StitchTotals {
  return {
    reused_tokens: 0,
    rendered_tokens: 0,
    retokenized_tokens: 0,
    turns: { first: 0, reused: 0, rerendered: 0, changed: 0, branch: 0 },
  };
}

/** Add one turn's stitch counts to its thread's totals. */
export function addStitch(totals: StitchTotals, stitch: StitchInfo): void {
  totals.reused_tokens += stitch.reusedTokens;
  totals.rendered_tokens += stitch.renderedTokens;
  totals.retokenized_tokens += stitch.retokenizedTokens;
  totals.turns[stitch.kind]++;
}

/** The threads of one capture session. */
export class SessionThreads {
  readonly list: Thread[] = [];

  constructor(
    readonly sessionId: string,
    private readonly tokenizer: ChatTokenizer,
  ) {}

  /** Pick the request's thread and compute its prompt ids. */
  async plan(req: PlanRequest): Promise<PromptPlan> {
    const { tokenizer } = this;
    const options: EncodeChatOptions = {
      tools: req.tools,
      templateKwargs: req.templateKwargs,
      specialTokenText: req.specialTokenText,
    };
    const text = tokenizer.renderChat(req.messages, options);
    // rendering a long chat took a while, and splitting it will too: let other sessions' work run
    if (text.length > LONG_RENDER_CHARS) await new Promise((resolve) => setImmediate(resolve));
    const encode = (t: string) => {
      req.charge?.(t.length);
      return tokenizer.encodeRenderedAsync(t, { specialTokenText: req.specialTokenText, signal: req.signal });
    };
    const extended = this.list.find((t) => extends_(t, req));
    if (extended) {
      const last = extended.last!;
      const suffix = this.#suffix(last, text, req, options);
      const history = last.promptIds.length + last.outputIds.length;
      if (suffix !== undefined) {
        const tail = await encode(suffix);
        const promptIds = new Int32Array(history + tail.length);
        promptIds.set(last.promptIds);
        promptIds.set(last.outputIds, last.promptIds.length);
        promptIds.set(tail, history);
        return plan(extended, promptIds, text, 'reused', history, tail.length, 0);
      }
      const ids = await encode(text);
      return plan(extended, ids, text, 'rerendered', 0, ids.length, Math.min(history, ids.length));
    }
    const ids = await encode(text);
    const same = this.list.find((t) => t.last && sameOpening(t.last.messages, req.messages));
    if (same) {
      const history = same.last!.promptIds.length + same.last!.outputIds.length;
      return plan(same, ids, text, 'changed', 0, ids.length, Math.min(history, ids.length));
    }
    // A thread whose turns were never answered (a dropped first turn) takes the request.
    const thread = this.list.find((t) => !t.last) ?? this.#open(this.list.length === 0 ? undefined : 0);
    return plan(thread, ids, text, thread.index === 0 ? 'first' : 'branch', 0, ids.length, 0);
  }

  /** Record the answer given for a planned turn: the next request that extends it reuses its ids. */
  done(p: PromptPlan, req: PlanRequest, outputIds: Int32Array, reply: TemplateMessage): void {
    const { thread, stitch } = p;
    thread.last = {
      messages: req.messages,
      tools: req.tools,
      templateKwargs: req.templateKwargs,
      promptText: p.promptText,
      promptIds: p.promptIds,
      outputIds,
      reply,
    };
    addStitch(thread.totals, stitch);
  }

  #open(parent: number | undefined): Thread {
    const index = this.list.length;
    const thread: Thread = {
      index,
      key: index === 0 ? this.sessionId : `${this.sessionId}/${index}`,
      parent,
      last: undefined,
      totals: emptyTotals(),
    };
    this.list.push(thread);
    return thread;
  }

  /**
   * The text after the last answer's sampled tokens, or undefined when the template does not render
   * the history as a prefix of this request. The answer ends where the template closes the assistant
   * message (its end-of-turn token): a sampled end-of-turn token is already among the output ids.
   */
  #suffix(
    last: NonNullable<Thread['last']>,
    text: string,
    req: PlanRequest,
    options: EncodeChatOptions,
  ): string | undefined {
    const eos = this.tokenizer.eosToken;
    const sampledEos = last.outputIds[last.outputIds.length - 1] === this.tokenizer.eosTokenId;
    // Usual case: the render extends the last prompt; the answer ends at the next end of turn.
    if (text.startsWith(last.promptText)) {
      const end = text.indexOf(eos, last.promptText.length);
      if (end >= 0) return text.slice(end + (sampledEos ? eos.length : 0));
    }
    // The template renders the history differently once new messages come (Qwen3 drops the
    // reasoning of turns before the latest user message). Render the new messages after a stand-in
    // exchange: where that text ends this request's render, right after an end of turn, it is the part
    // of the prompt the history does not hold.
    const fresh = req.messages.slice(last.messages.length + 1);
    const probe = this.tokenizer.renderChat(
      [{ role: 'user', content: PROBE }, { role: 'assistant', content: PROBE }, ...fresh],
      { templateKwargs: options.templateKwargs, specialTokenText: options.specialTokenText },
    );
    const close = probe.indexOf(eos, probe.lastIndexOf(PROBE));
    if (close < 0) return undefined;
    const tail = probe.slice(close + eos.length);
    const cut = text.length - tail.length - eos.length;
    if (cut < 0 || !text.endsWith(tail) || !text.startsWith(eos, cut)) return undefined;
    return text.slice(cut + (sampledEos ? eos.length : 0));
  }
}

/** A rendered prompt this long yields to other work before it is tokenized. */
const LONG_RENDER_CHARS = 1 << 20;

/** Content of the stand-in exchange that the new messages are rendered after. */
const PROBE = 'vime-stitch-probe';

function plan(
  thread: Thread,
  promptIds: Int32Array,
  promptText: string,
  kind: StitchKind,
  reusedTokens: number,
  renderedTokens: number,
  retokenizedTokens: number,
): PromptPlan {
  return {
    thread,
    promptIds,
    promptText,
    stitch: { kind, thread: thread.index, reusedTokens, renderedTokens, retokenizedTokens },
  };
}

type SessionThreadList = {
  sessionId: string;
  list: readonly Pick<Thread, 'index' | 'key' | 'parent' | 'totals'>[];
};

/**
 * The threads that hold a trajectory: the first always, a branch once a turn of it was answered (a
 * branch whose first turn was dropped, by a fault or by its client, has nothing to finish).
 */
function recorded(trajectories: TrajectoryManager, threads: SessionThreadList) {
  return threads.list.filter((t) => t.index === 0 || trajectories.has(t.key));
}

/**
 * Throw what `finishThreads` would throw for these options, changing nothing: a proxy checks them
 * before it ends the session, so a call with a missing or bad reward can be made again, rows intact.
 */
export function checkFinish(
  trajectories: TrajectoryManager,
  threads: SessionThreadList,
  finish: FinishOptions,
): void {
  const list = recorded(trajectories, threads);
  if (list.length === 0) trajectories.check(threads.sessionId, finish);
  for (const thread of list) trajectories.check(thread.key, finish);
}

/**
 * Finish every thread of a session: one trajectory each, sharing the rollout id; every row's
 * `metadata.lineage` names the session, its thread, the thread it branched from and its stitch counts.
 * Every thread's options are checked before any is finished.
 */
export function finishThreads(
  trajectories: TrajectoryManager,
  threads: SessionThreadList,
  finish: FinishOptions,
): Sample[] {
  checkFinish(trajectories, threads, finish);
  const base = finish.baseSample ?? {};
  let rolloutId = base.rollout_id;
  const rows: Sample[] = [];
  const list = recorded(trajectories, threads);
  if (list.length === 0) return trajectories.finish(threads.sessionId, finish);
  for (const thread of list) {
    const lineage = {
      id: threads.sessionId,
      thread: thread.index,
      parent: thread.parent ?? null,
      threads: list.length,
      stitch: thread.totals,
    };
    const part = trajectories.finish(thread.key, {
      ...finish,
      baseSample: {
        ...base,
        ...(rolloutId !== undefined ? { rollout_id: rolloutId } : {}),
        metadata: { ...base.metadata, lineage },
      },
    });
    rolloutId ??= part[0]?.rollout_id;
    rows.push(...part);
  }
  return rows;
}

/** The assistant message a harness echoes back for an answer the proxy gave. */
export function replyMessage(
  parsed: {
    content: string;
    reasoning: string | undefined;
    toolCalls: Array<{ name: string; arguments: string }>;
  },
  toolCallIds: readonly string[],
): TemplateMessage {
  const msg: TemplateMessage = { role: 'assistant', content: parsed.content };
  if (parsed.reasoning !== undefined) msg.reasoning_content = parsed.reasoning;
  if (parsed.toolCalls.length > 0) {
    msg.tool_calls = parsed.toolCalls.map((c, i) => ({
      id: toolCallIds[i]!,
      type: 'function',
      function: { name: c.name, arguments: c.arguments },
    }));
  }
  return msg;
}

/** Whether the request is the thread's last request, then its answer, then at least one new message. */
function extends_(thread: Thread, req: PlanRequest): boolean {
  const last = thread.last;
  if (!last) return false;
  const n = last.messages.length;
  if (req.messages.length < n + 2) return false;
  if (!sameJson(req.tools, last.tools) || !sameJson(req.templateKwargs, last.templateKwargs)) return false;
  for (let i = 0; i < n; i++) if (!sameJson(req.messages[i], last.messages[i])) return false;
  return echoes(req.messages[n]!, last.reply);
}

/** Whether a client's assistant message is the answer given: same text and tool calls; reasoning may be dropped. */
function echoes(msg: TemplateMessage, reply: TemplateMessage): boolean {
  if (msg.role !== 'assistant' || msg.content.trim() !== reply.content.trim()) return false;
  if (msg.reasoning_content && msg.reasoning_content.trim() !== (reply.reasoning_content ?? '').trim()) {
    return false;
  }
  const calls = msg.tool_calls ?? [];
  const given = reply.tool_calls ?? [];
  if (calls.length !== given.length) return false;
  return calls.every((c, i) => sameCall(c, given[i]!));
}

function sameCall(a: TemplateToolCall, b: TemplateToolCall): boolean {
  if (a.function.name !== b.function.name || (a.id !== undefined && a.id !== b.id)) return false;
  const x = a.function.arguments;
  const y = b.function.arguments;
  if (x === y) return true;
  try {
    return sameJson(typeof x === 'string' ? JSON.parse(x) : x, typeof y === 'string' ? JSON.parse(y) : y);
  } catch {
    return false;
  }
}

/** Same system prompt and first message: the same conversation, whatever happened after. */
function sameOpening(a: readonly TemplateMessage[], b: readonly TemplateMessage[]): boolean {
  const n = Math.min(2, a.length, b.length);
  for (let i = 0; i < n; i++) if (!sameJson(a[i], b[i])) return false;
  return n > 0;
}

/** Structural equality of JSON-shaped values (undefined members count as absent). */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameJson(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const x = a as Record<string, unknown>;
  const y = b as Record<string, unknown>;
  let defined = 0;
  for (const k in x) {
    if (x[k] === undefined) continue;
    defined++;
    if (!sameJson(x[k], y[k])) return false;
  }
  for (const k in y) if (y[k] !== undefined) defined--;
  return defined === 0;
}
