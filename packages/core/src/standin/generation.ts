/**
 * The stand-in engine's generation core: scripted outputs, the service model, aborts, and SGLang's
 * weight-update controls (pause / continue generation, update weights with a version). Requests held by
 * a pause or a pending update wait, as SGLang holds them; an abort ends a request with what it decoded.
 */
import type { EventEmitter } from 'eventemitter3';
import { newRequestId } from '../engine/request-id.js';
import type { ChatTokenizer } from '../engine/tokenizer/tokenizer.js';
import type { EngineFinishReason } from '../engine/types.js';
import { sleep } from '../utils/sleep.js';
import type { StandInEvents, StandInFault, StandInPolicy } from './engine.js';
import { type Job, Scheduler, type ServiceModel } from './scheduler.js';
import { type TokenFeed, tokenFeed } from './stream.js';

/** SGLang's `/pause_generation` modes: abort in-flight requests, or freeze them (`retract`, `in_place`). */
export type PauseMode = 'abort' | 'retract' | 'in_place';

export interface Generation {
  rid: string;
  outputIds: Int32Array;
  logprobs: Float32Array;
  finishReason: EngineFinishReason;
  promptTokens: number;
  latencyS: number;
  /** The weight version when the request finished (what SGLang reports in `meta_info`). */
  weightVersion: string;
}

export interface GenerateInput {
  path: string;
  inputIds: Int32Array;
  maxTokens: number;
  temperature: number | undefined;
  rid: string | undefined;
  routingKey: string | undefined;
  /** The request's sampling fields as they came over the wire (SGLang's `sampling_params`, vLLM's body). */
  sampling: Record<string, unknown>;
  /** Streamed requests: called as tokens are decoded (`total`: the request's scripted length). */
  onTokens?: ((ids: Int32Array, logprobs: Float32Array, total: number) => void) | undefined;
}

export interface WeightUpdate {
  modelPath: string;
  weightVersion: string | undefined;
  abortAllRequests: boolean;
}

export class HttpFailure extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export const LATENCY_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

interface Inflight {
  controller: AbortController;
  /** Submitted to the scheduler (not held by a pause or an update). */
  admitted: boolean;
}

/** Scripted outputs remembered by prompt, so a request that resumes a cut-off turn continues it. */
const SCRIPT_MEMORY = 4096;

export interface CoreOptions {
  tokenizer: ChatTokenizer;
  policy: StandInPolicy;
  service: ServiceModel | undefined;
  fault:
    | ((request: { rid: string; requestIndex: number; path: string }) => StandInFault | undefined)
    | undefined;
  weightVersion: string;
  modelPath: string;
  events: EventEmitter<StandInEvents>;
}

export class StandInCore {
  weightVersion: string;
  modelPath: string;
  healthy = true;
  readonly scheduler: Scheduler;
  readonly stats = {
    completed: 0,
    aborted: 0,
    failed: 0,
    promptTokens: 0,
    generationTokens: 0,
    peakRunning: 0,
    peakQueued: 0,
    weightUpdates: 0,
  };
  readonly latency = { buckets: LATENCY_BUCKETS.map(() => 0), sum: 0, count: 0 };
  /** Requests whose answer is cut off halfway (the `disconnect` fault). */
  readonly disconnectAfter = new Set<string>();
  readonly #options: CoreOptions;
  readonly #inflight = new Map<string, Inflight>();
  readonly #scripts = new Map<string, Int32Array>();
  #requestIndex = 0;
  #paused: PauseMode | undefined;
  /** A weight update waiting for the running requests to finish; new requests wait behind it. */
  #updating = false;
  #waiters = new Set<() => void>();
  #generationSuffixes: Int32Array[] | undefined;

  constructor(options: CoreOptions) {
    this.#options = options;
    this.weightVersion = options.weightVersion;
    this.modelPath = options.modelPath;
    this.scheduler = new Scheduler(options.service);
  }

  get paused(): PauseMode | undefined {
    return this.#paused;
  }

  /** Requests held by a pause or a pending weight update. */
  get held(): number {
    let n = 0;
    for (const r of this.#inflight.values()) if (!r.admitted) n++;
    return n;
  }

  async generate(input: GenerateInput, closed: AbortSignal): Promise<Generation> {
    const { events } = this.#options;
    const { inputIds, maxTokens } = input;
    const rid = input.rid ?? newRequestId('standin');
    const index = this.#requestIndex++;
    const slot: Inflight = { controller: new AbortController(), admitted: false };
    this.#inflight.set(rid, slot);
    const signal = AbortSignal.any([slot.controller.signal, closed]);
    const started = performance.now();
    events.emit('request', {
      rid,
      path: input.path,
      inputIds,
      routingKey: input.routingKey,
      sampling: input.sampling,
    });
    let feed: TokenFeed | undefined;
    try {
      const fault = this.#options.fault?.({ rid, requestIndex: index, path: input.path });
      if (fault?.kind === 'disconnect') this.disconnectAfter.add(rid);
      if (fault?.kind === 'error') {
        this.stats.failed++;
        throw new HttpFailure(fault.status ?? 503, fault.message ?? 'injected fault');
      }
      if (fault?.kind === 'stall') await sleep(fault.ms, signal);
      let ids = await this.#script(inputIds, input, rid, index, signal);
      let finishReason = 'stop' as EngineFinishReason;
      if (ids.length > maxTokens) {
        ids = ids.slice(0, maxTokens);
        finishReason = 'length';
      }
      const job: Job = { tokens: ids.length, promptTokens: inputIds.length, done: 0, onDone: () => {} };
      try {
        await this.#admission(signal);
        slot.admitted = true;
        this.stats.promptTokens += inputIds.length;
        feed =
          input.onTokens && tokenFeed(this.scheduler, job, ids, inputIds.length, input.onTokens, fakeLogprob);
        await this.#run(job, signal);
      } catch (reason) {
        // `/abort_request` or a pause ends the request with what was decoded so far; a closed client drops it.
        if (!(slot.controller.signal.aborted && !closed.aborted)) throw reason;
        ids = ids.slice(0, Math.floor(job.done));
        finishReason = 'abort';
      }
      feed?.end(ids.length);
      const logprobs = new Float32Array(ids.length);
      for (let i = 0; i < ids.length; i++) logprobs[i] = fakeLogprob(inputIds.length + i, ids[i]!);
      this.stats.generationTokens += ids.length;
      const latencyS = (performance.now() - started) / 1000;
      if (finishReason === 'abort') this.stats.aborted++;
      else this.#observeLatency(latencyS);
      const weightVersion = this.weightVersion;
      events.emit('finish', { rid, finishReason, outputTokens: ids.length, outputIds: ids, weightVersion });
      return {
        rid,
        outputIds: ids,
        logprobs,
        finishReason,
        promptTokens: inputIds.length,
        latencyS,
        weightVersion,
      };
    } catch (error) {
      feed?.stop();
      if (closed.aborted) this.stats.aborted++;
      throw error;
    } finally {
      this.#inflight.delete(rid);
      this.#wake();
    }
  }

  abort(rid: string): void {
    this.#inflight.get(rid)?.controller.abort();
  }

  abortAll(): number {
    const n = this.#inflight.size;
    for (const r of this.#inflight.values()) r.controller.abort();
    return n;
  }

  /** `/pause_generation`: `abort` ends every request and holds new ones; the others freeze them in place. */
  pause(mode: PauseMode): void {
    this.#paused = mode;
    if (mode === 'abort') this.abortAll();
    else this.scheduler.freeze();
  }

  /** `/continue_generation`. */
  resume(): void {
    this.#paused = undefined;
    if (this.scheduler.frozen) this.scheduler.thaw();
    this.#wake();
  }

  /**
   * `/update_weights_from_disk`: applied at once while paused; otherwise new requests wait while the
   * running ones finish, then the version changes. `abortAllRequests` ends the in-flight ones first.
   */
  async updateWeights(update: WeightUpdate, signal: AbortSignal): Promise<{ paused: number }> {
    if (update.abortAllRequests) this.abortAll();
    const paused = this.#paused ? this.#inflight.size : 0;
    if (!this.#paused) {
      this.#updating = true;
      try {
        while ([...this.#inflight.values()].some((r) => r.admitted)) await this.#changed(signal);
      } finally {
        this.#updating = false;
      }
    }
    if (update.weightVersion !== undefined) this.weightVersion = update.weightVersion;
    this.modelPath = update.modelPath;
    this.stats.weightUpdates++;
    this.#wake();
    return { paused };
  }

  close(): void {
    this.scheduler.stop();
    this.abortAll();
  }

  /** The ids the policy scripts for this prompt; a prompt that ends inside a scripted turn gets its rest. */
  async #script(
    inputIds: Int32Array,
    input: GenerateInput,
    rid: string,
    requestIndex: number,
    signal: AbortSignal,
  ): Promise<Int32Array> {
    const splits = this.#continuationPoints(inputIds);
    for (const split of splits) {
      const ids = this.#scripts.get(scriptKey(inputIds.subarray(0, split)));
      if (ids) return continuing(ids, inputIds.subarray(split));
    }
    // not a turn this engine scripted: the policy reads the prompt up to the generation prompt
    const split = splits[splits.length - 1];
    const head = split === undefined ? inputIds : inputIds.subarray(0, split);
    const ids = await this.#policyIds(head, input, rid, requestIndex, signal);
    if (this.#scripts.size >= SCRIPT_MEMORY) this.#scripts.delete(this.#scripts.keys().next().value!);
    this.#scripts.set(scriptKey(head), ids);
    return split === undefined ? ids : continuing(ids, inputIds.subarray(split));
  }

  async #policyIds(
    inputIds: Int32Array,
    input: GenerateInput,
    rid: string,
    requestIndex: number,
    signal: AbortSignal,
  ): Promise<Int32Array> {
    const { tokenizer, policy } = this.#options;
    let prompt: string | undefined;
    const scripted = await policy({
      rid,
      requestIndex,
      inputIds,
      // decoded only when the policy reads it (decoding a long prompt costs more than the rest)
      get prompt() {
        prompt ??= tokenizer.decode(inputIds);
        return prompt;
      },
      maxTokens: input.maxTokens,
      temperature: input.temperature,
      signal,
    });
    if (typeof scripted !== 'string') return Int32Array.from(scripted.ids);
    const text = tokenizer.encode(scripted);
    const ids = new Int32Array(text.length + 1);
    ids.set(text);
    ids[text.length] = tokenizer.eosTokenId;
    return ids;
  }

  /**
   * Where a prompt that resumes an assistant turn may split into the rendered chat and the part of the
   * turn already generated: after the last generation prompt (`<|im_start|>assistant\n` for Qwen3, or
   * with the template's empty think block), when something follows it. Empty for an ordinary prompt.
   */
  #continuationPoints(ids: Int32Array): number[] {
    this.#generationSuffixes ??= generationSuffixes(this.#options.tokenizer);
    const suffixes = this.#generationSuffixes;
    const base = suffixes[0];
    if (!base || base.length === 0) return [];
    const at = lastIndexOf(ids, base);
    if (at < 0) return [];
    const points: number[] = [];
    for (const suffix of suffixes) {
      if (!startsAt(ids, suffix, at)) continue;
      const end = at + suffix.length;
      if (end === ids.length) return []; // the prompt ends with a generation prompt: an ordinary turn
      points.push(end);
    }
    return points;
  }

  #admission(signal: AbortSignal): Promise<void> {
    if (!this.#paused && !this.#updating) return Promise.resolve();
    return (async () => {
      while (this.#paused || this.#updating) await this.#changed(signal);
    })();
  }

  #run(job: Job, signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        this.scheduler.cancel(job);
        reject(signal.reason);
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      job.onDone = () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
      this.scheduler.submit(job);
      this.stats.peakRunning = Math.max(this.stats.peakRunning, this.scheduler.running.size);
      this.stats.peakQueued = Math.max(this.stats.peakQueued, this.scheduler.queue.length);
    });
  }

  /** Resolve at the next state change (a request finished, a pause ended, an update applied). */
  #changed(signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const wake = () => {
        signal.removeEventListener('abort', onAbort);
        this.#waiters.delete(wake);
        resolve();
      };
      const onAbort = () => {
        this.#waiters.delete(wake);
        reject(signal.reason);
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      this.#waiters.add(wake);
    });
  }

  #wake(): void {
    for (const w of [...this.#waiters]) w();
  }

  #observeLatency(latencyS: number): void {
    this.stats.completed++;
    this.latency.sum += latencyS;
    this.latency.count++;
    LATENCY_BUCKETS.forEach((b, i) => {
      if (latencyS <= b) this.latency.buckets[i]!++;
    });
  }
}

/** The generation prompt's ids, then longer variants the template renders (Qwen3's empty think block). */
function generationSuffixes(tokenizer: ChatTokenizer): Int32Array[] {
  const messages = [{ role: 'user', content: 'x' }];
  const suffix = (kwargs?: Record<string, unknown>) => {
    try {
      const opts = kwargs ? { templateKwargs: kwargs } : {};
      const bare = tokenizer.render(messages, { ...opts, addGenerationPrompt: false });
      const full = tokenizer.render(messages, { ...opts, addGenerationPrompt: true });
      return full.startsWith(bare) ? tokenizer.encode(full.slice(bare.length)) : undefined;
    } catch {
      return undefined;
    }
  };
  const base = suffix();
  if (!base) return [];
  const out = [base];
  const noThink = suffix({ enable_thinking: false });
  if (noThink && noThink.length > base.length && startsAt(noThink, base, 0)) out.push(noThink);
  return out;
}

/** The rest of a scripted turn after the part already generated, or the whole turn if it diverged. */
function continuing(scripted: Int32Array, partial: Int32Array): Int32Array {
  if (partial.length > scripted.length) return scripted;
  for (let i = 0; i < partial.length; i++) if (scripted[i] !== partial[i]) return scripted;
  return scripted.slice(partial.length);
}

/** Whether `ids` holds `pattern` starting at `at`. */
function startsAt(ids: Int32Array, pattern: Int32Array, at: number): boolean {
  if (at + pattern.length > ids.length) return false;
  for (let i = 0; i < pattern.length; i++) if (ids[at + i] !== pattern[i]) return false;
  return true;
}

function lastIndexOf(ids: Int32Array, pattern: Int32Array): number {
  for (let at = ids.length - pattern.length; at >= 0; at--) if (startsAt(ids, pattern, at)) return at;
  return -1;
}

/** A key for a prompt's ids (FNV-1a over the ids, plus the length). */
function scriptKey(ids: Int32Array): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < ids.length; i++) h = Math.imul(h ^ ids[i]!, 0x01000193);
  return `${ids.length}:${(h >>> 0).toString(36)}`;
}

/** A deterministic log prob in (-4, 0] for a (position, token) pair, exactly representable in float32. */
export function fakeLogprob(position: number, id: number): number {
  let h = Math.imul(position ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(id, 0xc2b2ae35);
  h ^= h >>> 13;
  h = Math.imul(h, 0x27d4eb2f);
  h ^= h >>> 16;
  return Math.fround(-((h >>> 0) / 2 ** 32) * 4);
}
