/**
 * One turn of a capture session: its prompt planned on the session's captured history, its sampling
 * resolved, its tokens generated through the router, its answer parsed; and the recording of the turn,
 * which waits until the answer was handed to the client (see `TurnLedger`).
 */
import type { EventEmitter } from 'eventemitter3';
import { turnNucleus } from '../engine/nucleus.js';
import { newRequestId } from '../engine/request-id.js';
import { type RoutingShape, turnRoutes } from '../engine/routing.js';
import type { ChatTokenizer, SpecialTokenText } from '../engine/tokenizer/tokenizer.js';
import { addToolCallHealth, type ToolCallHealth, toolCallHealth } from '../engine/tokenizer/tool-health.js';
import { turnTopLogprobs } from '../engine/topk.js';
import type { Sampling } from '../engine/types.js';
import { type ChatRequest, type Dialect, RequestError, type TurnReply } from './dialects.js';
import type { ProxyEvents } from './events.js';
import type { LiveTurn } from './live.js';
import type { EngineRouter } from './router.js';
import { resolveSampling } from './sampling.js';
import type { SessionRegistry, SessionState } from './sessions.js';
import { type PlanRequest, type PromptPlan, replyMessage } from './stitch.js';
import type { TrajectoryManager } from './trajectory/manager.js';
import { type GeneratedTurn, generateTurn, type SpecCounts, type WeightUpdatePolicy } from './turn.js';

/** A turn's answer, and how to record it once the client has it (false: nothing was recorded). */
export type RecordableReply = TurnReply & { record: () => boolean };

export interface TurnRunnerOptions {
  tokenizer: ChatTokenizer;
  router: EngineRouter;
  events: EventEmitter<ProxyEvents>;
  trajectories: TrajectoryManager;
  sessions: SessionRegistry;
  modelName: string;
  specialTokenText: SpecialTokenText;
  defaultMaxTokens: number | undefined;
  onWeightUpdate: WeightUpdatePolicy;
  /** Routing replay (R3): the routing every turn asks for and must get (fail closed). */
  routingReplay?: RoutingShape | undefined;
}

/** The head every answer of the turn carries. */
interface ReplyBase {
  id: string;
  model: string;
  promptTokens: number;
}

/** A generated turn, with what its recording needs. */
interface Generated {
  state: SessionState;
  dialect: Dialect;
  planReq: PlanRequest;
  planned: PromptPlan;
  result: GeneratedTurn;
  topP: ReturnType<typeof turnNucleus>;
  topK: ReturnType<typeof turnTopLogprobs>;
  routes: ReturnType<typeof turnRoutes>;
  parsed: TurnReply['parsed'];
  toolCallIds: string[];
  toolCalls: ToolCallHealth | undefined;
  startedAt: number;
  endedAt: number;
}

export class TurnRunner {
  readonly #o: TurnRunnerOptions;

  constructor(options: TurnRunnerOptions) {
    this.#o = options;
  }

  async run(
    state: SessionState,
    dialect: Dialect,
    req: ChatRequest,
    signal: AbortSignal,
    live?: LiveTurn,
  ): Promise<RecordableReply> {
    const { events, tokenizer } = this.#o;
    const startedAt = performance.now();
    const templateKwargs =
      state.templateKwargs || req.templateKwargs
        ? { ...req.templateKwargs, ...state.templateKwargs }
        : undefined;
    // The captured history's ids are reused; new text is tokenized (long uncached input on a worker
    // thread, which the turn's signal stops on a disconnect).
    const { specialTokenText } = this.#o;
    const planReq = {
      messages: req.messages,
      tools: req.tools,
      templateKwargs,
      specialTokenText,
      signal,
      charge: (chars: number) => state.budget.tokenize(chars),
    };
    const planned = await state.threads.plan(planReq);
    const { promptIds } = planned;
    const resolved = resolveSampling(state, req, promptIds.length, this.#o.defaultMaxTokens);
    const { sampling, overridden } = resolved;
    if (Object.keys(overridden).length > 0)
      events.emit('sampling:override', { sessionId: state.id, fields: overridden });
    const rid = newRequestId('turn');
    const base = {
      id: `chatcmpl-${rid}`,
      model: req.model ?? this.#o.modelName,
      promptTokens: promptIds.length,
    };
    live?.begin({ rid, id: base.id, model: base.model, promptIds });
    if (sampling.maxTokens! <= 0) return this.#outOfBudget(state, base);
    const result = await this.#generate(state, promptIds, sampling, rid, signal, live);
    const endedAt = performance.now();
    if (!this.#o.sessions.isOpen(state))
      throw new RequestError(409, `session ${state.id} was finished during the turn`);
    let topP: ReturnType<typeof turnNucleus>;
    let topK: ReturnType<typeof turnTopLogprobs>;
    let routes: ReturnType<typeof turnRoutes>;
    try {
      topP = turnNucleus(sampling, result, tokenizer.vocabSize);
      topK = turnTopLogprobs(sampling, result, tokenizer.vocabSize);
      routes = turnRoutes(this.#o.routingReplay, result, promptIds.length);
    } catch (error) {
      events.emit('turn:error', { sessionId: state.id, error: error as Error });
      throw error;
    }
    const text = tokenizer.decode(stripStop(result.outputIds, tokenizer.eosTokenId));
    const parsed = tokenizer.parseResponse(text);
    const toolCalls = turnToolHealth(tokenizer, text, planReq.tools);
    const toolCallIds = parsed.toolCalls.map((call, i) => {
      const id = `${dialect === 'anthropic' ? 'toolu' : 'call'}_${rid}_${i}`;
      state.toolArgs.set(id, call.arguments);
      return id;
    });
    const generated = {
      state,
      dialect,
      planReq,
      planned,
      result,
      topP,
      topK,
      routes,
      parsed,
      toolCallIds,
      toolCalls,
      startedAt,
      endedAt,
    };
    return {
      ...base,
      parsed,
      toolCallIds,
      finishReason: result.finishReason,
      outputTokens: result.outputIds.length,
      record: () => this.#record(generated),
    };
  }

  /** The session's token budget is spent: a truncated answer, no engine call, nothing to record. */
  #outOfBudget(state: SessionState, base: ReplyBase): RecordableReply {
    state.truncated = true;
    this.#o.events.emit('budget:exhausted', {
      sessionId: state.id,
      promptTokens: base.promptTokens,
      maxContextTokens: state.maxContextTokens!,
    });
    return {
      ...base,
      parsed: { content: '', reasoning: undefined, toolCalls: [] },
      toolCallIds: [],
      finishReason: 'length',
      outputTokens: 0,
      record: () => false,
    };
  }

  /** Generate through the router; the request's signal and the session's close both cancel it. */
  async #generate(
    state: SessionState,
    promptIds: Int32Array,
    sampling: Sampling,
    rid: string,
    signal: AbortSignal,
    live: LiveTurn | undefined,
  ): Promise<GeneratedTurn> {
    const { events } = this.#o;
    const sessionId = state.id;
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    state.inflight.add(controller);
    try {
      return await generateTurn(
        this.#o.router,
        {
          sessionId,
          promptIds,
          sampling: sampling as Sampling & { maxTokens: number },
          rid,
          signal: controller.signal,
          onWeightUpdate: this.#o.onWeightUpdate,
          onTokens: live && ((chunk) => live.tokens(chunk)),
          routedExperts: this.#o.routingReplay,
        },
        {
          retry: (e) => events.emit('turn:retry', { sessionId, ...e }),
          interrupted: (e) => events.emit('turn:interrupted', { sessionId, ...e }),
        },
      );
    } catch (error) {
      if (controller.signal.aborted) {
        events.emit('turn:abort', { sessionId, rid, reason: String(controller.signal.reason) });
      } else events.emit('turn:error', { sessionId, error: error as Error });
      throw error;
    } finally {
      signal.removeEventListener('abort', onAbort);
      state.inflight.delete(controller);
    }
  }

  /**
   * Record a turn whose answer was handed over: a turn the client never got is no part of its
   * trajectory, and the next request does not stitch onto it.
   */
  #record(g: Generated): boolean {
    const { state, result, planned } = g;
    if (!this.#o.sessions.isOpen(state)) return false;
    // Tokens of no known version next to versioned ones (a vLLM engine's first version logged mid-turn):
    // the turn records none rather than give them a version they were not sampled with.
    const known = result.versionRuns.every((r) => r.version !== undefined);
    const versions = result.versionRuns.filter(
      (r): r is { version: string; tokens: number } => known && r.version !== undefined,
    );
    const last = versions[versions.length - 1]?.version;
    const { promptIds } = planned;
    const turn = this.#o.trajectories.record(planned.thread.key, {
      promptIds,
      outputIds: result.outputIds,
      logprobs: result.logprobs,
      finishReason: result.finishReason,
      policyVersion: last,
      ...(versions.length > 1 ? { versionRuns: versions } : {}),
      engines: result.engines,
      topP: g.topP,
      ...(g.topK ? { topK: g.topK } : {}),
      ...(g.routes ? { routes: g.routes } : {}),
      spec: result.spec,
      startedAt: g.startedAt,
      endedAt: g.endedAt,
    });
    if (result.finishReason === 'length') state.truncated = true;
    state.threads.done(planned, g.planReq, result.outputIds, replyMessage(g.parsed, g.toolCallIds));
    if (g.toolCalls) state.toolCalls = addToolCallHealth(state.toolCalls ?? emptyHealth(), g.toolCalls);
    if (result.spec) state.spec = addSpec(state.spec, result.spec);
    this.#o.events.emit('turn', {
      sessionId: state.id,
      trajectoryId: planned.thread.key,
      dialect: g.dialect,
      turn,
      promptTokens: promptIds.length,
      outputTokens: result.outputIds.length,
      durationMs: g.endedAt - g.startedAt,
      engines: result.engines,
      stitch: planned.stitch,
      toolCalls: g.toolCalls,
    });
    return true;
  }
}

/** Output ids without the final stop token (it is markup, not text for the harness). */
function stripStop(ids: Int32Array, eos: number): Int32Array {
  return ids.length > 0 && ids[ids.length - 1] === eos ? ids.subarray(0, ids.length - 1) : ids;
}

/** The session's speculative-decoding counts with a turn's added (turns that reported none add nothing). */
function addSpec(sum: SpecCounts | undefined, turn: SpecCounts): SpecCounts {
  return {
    verifyPasses: (sum?.verifyPasses ?? 0) + turn.verifyPasses,
    acceptedTokens: (sum?.acceptedTokens ?? 0) + turn.acceptedTokens,
  };
}

const emptyHealth = (): ToolCallHealth => ({
  emitted: 0,
  parsed: 0,
  malformed: 0,
  unknownTool: 0,
  badArguments: 0,
});

/**
 * The turn's tool-call health, read by the parser that made its tool calls (the built-in Qwen3 / Hermes
 * one; undefined under another parser, whose markup these counts do not know). A call in a turn that
 * declared no tools names an unknown tool.
 */
function turnToolHealth(
  tokenizer: ChatTokenizer,
  text: string,
  tools: PlanRequest['tools'],
): ToolCallHealth | undefined {
  if (tokenizer.toolParser?.name !== 'hermes') return undefined;
  const content = tokenizer.reasoningParser ? tokenizer.reasoningParser.parse(text).content : text;
  // A turn that offered no tools and got no call (a text protocol such as mini-swe-agent's) has no health to report.
  if (tools.length === 0 && !content.includes('<tool_call>')) return undefined;
  return toolCallHealth(
    content,
    tools.map((t) => t.function.name),
  );
}
