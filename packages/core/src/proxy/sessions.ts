/**
 * The capture proxy's open sessions, found by id (the caller's name) and by key (what a request
 * carries), and the keys of finished ones, so a late request gets a 409 that says why.
 */
import { randomBytes } from 'node:crypto';
import type { ChatTokenizer } from '../engine/tokenizer/tokenizer.js';
import type { ToolCallHealth } from '../engine/tokenizer/tool-health.js';
import { checkTopLogprobs } from '../engine/topk.js';
import type { Sampling } from '../engine/types.js';
import { ConfigError } from '../errors.js';
import type { Sample } from '../sample.js';
import type { CaptureSession, SessionOptions } from './api.js';
import { type BudgetLimits, SessionBudget } from './budget.js';
import { checkMaxTurns, FinishedSessions, TurnLedger } from './ledger.js';
import type { EngineRouter } from './router.js';
import { checkFinish, finishThreads, SessionThreads } from './stitch.js';
import type { FinishOptions, TrajectoryManager } from './trajectory/manager.js';
import type { SpecCounts } from './turn.js';

export interface SessionState {
  id: string;
  /** What `openSession` returned; a request names the session by its `apiKey`. */
  handle: CaptureSession;
  sampling: Sampling;
  maxContextTokens: number | undefined;
  templateKwargs: Record<string, unknown> | undefined;
  truncated: boolean;
  inflight: Set<AbortController>;
  /** Raw argument text of tool calls this session produced, by call id, to re-render them exactly. */
  toolArgs: Map<string, string>;
  /** The session's conversations and the captured history each next prompt reuses. */
  threads: SessionThreads;
  /** Answers kept for retries, and the turns recorded (see `TurnLedger`). */
  ledger: TurnLedger;
  /** What the session may hold and spend at once (requests, body bytes, tokenizer characters). */
  budget: SessionBudget;
  /** The tool-call health of its recorded turns, summed (absent: no turn was read for it). */
  toolCalls?: ToolCallHealth | undefined;
  /** Speculative decoding over its recorded turns that reported it, summed (absent: none did). */
  spec?: SpecCounts | undefined;
}

/** Check a session's id and options (the sharded proxy checks them before a shard sees them). */
export function checkSession(id: string, options: SessionOptions): void {
  if (typeof id !== 'string' || id === '' || /[\s/]/.test(id)) {
    throw new ConfigError(
      `session id must be a non-empty string without spaces or '/', found ${JSON.stringify(id)}`,
    );
  }
  const { maxContextTokens } = options;
  if (maxContextTokens !== undefined && !(Number.isInteger(maxContextTokens) && maxContextTokens > 0)) {
    throw new ConfigError(`maxContextTokens must be a positive integer, found ${maxContextTokens}`);
  }
  checkMaxTurns(options.maxTurns, 'maxTurns');
}

/** Refuse a session whose top-k capture asks for more than an engine or the vocabulary can give. */
function checkSessionTopLogprobs(
  sampling: Sampling,
  router: EngineRouter,
  vocabSize: number | undefined,
): void {
  const low = router.topLogprobsLimit();
  checkTopLogprobs(sampling.topLogprobs, low?.limit, `the engine ${low?.url}`);
  // SGLang refuses a top_logprobs_num above the vocabulary size.
  checkTopLogprobs(sampling.topLogprobs, vocabSize, 'the vocabulary (its size)', '');
}

export interface SessionRegistryOptions {
  trajectories: TrajectoryManager;
  router: EngineRouter;
  tokenizer: ChatTokenizer;
  defaultSampling: Sampling | undefined;
  defaultMaxTurns: number | undefined;
  /** A request with an unknown key opens a session under it (`CaptureProxyOptions.autoOpenSessions`). */
  autoOpen: boolean;
  /** The handle a session is given: its URL and in-process `fetch` belong to the proxy. */
  handle(id: string, key: string): CaptureSession;
  /** Each session's caps (see `SessionBudget`). */
  limits: BudgetLimits;
}

export class SessionRegistry {
  readonly #options: SessionRegistryOptions;
  readonly #byId = new Map<string, SessionState>();
  readonly #byKey = new Map<string, SessionState>();
  readonly #finished = new FinishedSessions();

  constructor(options: SessionRegistryOptions) {
    this.#options = options;
  }

  get size(): number {
    return this.#byId.size;
  }

  get(id: string): SessionState | undefined {
    return this.#byId.get(id);
  }

  withKey(key: string): SessionState | undefined {
    return this.#byKey.get(key);
  }

  /** Whether `state` is still the open session of its id (not finished, nor replaced by a new one). */
  isOpen(state: SessionState): boolean {
    return this.#byId.get(state.id) === state;
  }

  /** Why a key no open session holds was finished, if it was. */
  goneReason(key: string): string | undefined {
    return this.#byKey.has(key) ? undefined : this.#finished.reason(key);
  }

  open(
    id: string,
    options: SessionOptions = {},
    key = `${id}.${randomBytes(16).toString('base64url')}`,
  ): CaptureSession {
    checkSession(id, options);
    if (this.#byId.has(id)) throw new ConfigError(`session ${JSON.stringify(id)} is already open`);
    const { trajectories, router, tokenizer } = this.#options;
    const sampling = options.sampling ?? this.#options.defaultSampling ?? {};
    checkSessionTopLogprobs(sampling, router, tokenizer.vocabSize);
    trajectories.open(id);
    if (options.engine) router.place(id, options.engine.url);
    const handle = this.#options.handle(id, key);
    const state: SessionState = {
      id,
      handle,
      sampling,
      maxContextTokens: options.maxContextTokens,
      templateKwargs: options.templateKwargs,
      truncated: false,
      inflight: new Set(),
      toolArgs: new Map(),
      threads: new SessionThreads(id, tokenizer),
      ledger: new TurnLedger(options.maxTurns ?? this.#options.defaultMaxTurns),
      budget: new SessionBudget(this.#options.limits),
    };
    this.#byId.set(id, state);
    this.#byKey.set(key, state);
    return handle;
  }

  /** Under `autoOpenSessions`, the session a request's unknown key opens (its id and key are the key). */
  autoOpen(key: string): SessionState | undefined {
    if (!this.#options.autoOpen || this.#byId.has(key)) return undefined;
    this.open(key, {}, key);
    return this.#byKey.get(key);
  }

  /** Close a session and return its slime-wire training rows (see `CaptureProxy.finishSession`). */
  finish(id: string, finish: FinishOptions = {}): Sample[] {
    const { trajectories } = this.#options;
    const open = this.#byId.get(id);
    const status = finish.status ?? (open?.truncated ? 'truncated' : undefined);
    const options = { ...finish, status };
    // bad options end nothing: the call can be made again with the rows intact
    if (open) checkFinish(trajectories, open.threads, options);
    const state = this.#end(id, 'finishSession');
    const rows = finishThreads(trajectories, state.threads, options);
    // The rollout's tool-call health on each of its rows (a rollout's rows share one session).
    if (state.toolCalls)
      for (const row of rows) row.metadata = { ...row.metadata, tool_calls: { ...state.toolCalls } };
    // Likewise the rollout's speculative decoding (SGLang's spec_verify_ct, summed over its turns).
    if (state.spec) {
      const spec_decode = {
        verify_passes: state.spec.verifyPasses,
        accepted_tokens: state.spec.acceptedTokens,
      };
      for (const row of rows) row.metadata = { ...row.metadata, spec_decode: { ...spec_decode } };
    }
    return rows;
  }

  /** End a session and forget its turns (a shard's: its main thread keeps them). */
  discard(id: string): void {
    const { trajectories } = this.#options;
    const state = this.#end(id, 'discard');
    for (const thread of state.threads.list) trajectories.discard(thread.key);
    trajectories.discard(id);
  }

  /** Close every session (the proxy closes). */
  closeAll(reason: string): void {
    for (const state of [...this.#byId.values()]) this.#close(state, reason);
  }

  #end(id: string, where: string): SessionState {
    const state = this.#byId.get(id);
    if (!state) throw new ConfigError(`${where}: no open session ${JSON.stringify(id)}`);
    this.#close(state, 'session finished');
    const reason = `session ${JSON.stringify(id)} is finished (finishSession); open a new session for a new rollout`;
    this.#finished.add(state.handle.apiKey, reason);
    // auto-open takes a bare id as a key: it must not bring a finished session back
    if (this.#options.autoOpen) this.#finished.add(id, reason);
    // A rollout completed: check the engines now, so a dead one is gone before its sessions' next turn.
    void this.#options.router.checkNow('completion');
    return state;
  }

  #close(state: SessionState, reason: string): void {
    for (const c of state.inflight) c.abort(new Error(reason));
    this.#byId.delete(state.id);
    this.#byKey.delete(state.handle.apiKey);
    this.#options.router.release(state.id);
  }
}
