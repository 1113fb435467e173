/**
 * One turn's generation through the router: the same prompt ids go to whichever engine serves the
 * session, a failed request is retried on a healthy engine (no re-tokenisation: the ids were computed
 * once), and a turn the engine cut short (SGLang aborts in-flight requests to update its weights) is
 * continued from the tokens it already produced, or restarted. Every output token keeps the weight
 * version that produced it.
 */
import { concatNucleus, type NucleusReplay } from '../engine/nucleus.js';
import { concatRoutes, type RoutedExperts, type RoutingShape } from '../engine/routing.js';
import { concatTopLogprobs, type TopLogprobs } from '../engine/topk.js';
import type {
  Engine,
  EngineFinishReason,
  GenerateRequest,
  GenerateResult,
  Sampling,
  TokenChunk,
} from '../engine/types.js';
import { EngineError } from '../errors.js';
import { backoffDelay, isRetryableError } from '../utils/retry.js';
import { sleep } from '../utils/sleep.js';
import type { EngineRouter } from './router.js';

/** What a turn interrupted by a weight update does: resume from its tokens, or regenerate on the new weights. */
export type WeightUpdatePolicy = 'continue' | 'restart';

/** A run of consecutive output tokens produced by one weight version. */
export interface VersionRun {
  version: string | undefined;
  tokens: number;
}

export interface GeneratedTurn {
  outputIds: Int32Array;
  logprobs: Float32Array;
  finishReason: EngineFinishReason;
  /** Versions over `outputIds`, in order; their `tokens` sum to its length. */
  versionRuns: VersionRun[];
  /** The engines that produced the kept output, in order. */
  engines: string[];
  /** Engine-side aborts absorbed (weight updates). */
  interruptions: number;
  /** Failed requests retried. */
  failures: number;
  cachedTokens: number | undefined;
  /** The nucleus of every output token, when every generation of the turn reported one. */
  topP?: NucleusReplay | undefined;
  /** The top-k log probs of every output token, when every generation of the turn reported them. */
  topK?: TopLogprobs | undefined;
  /**
   * The routed experts of every forwarded position of the turn (prompt, then output), when every
   * generation reported them: a continuation's rows follow its predecessor's.
   */
  routes?: RoutedExperts | undefined;
  /** Speculative decoding's counts, when every generation of the turn reported them (see `Turn.spec`). */
  spec?: SpecCounts | undefined;
}

/** A turn's speculative-decoding counts: verification passes, and the draft tokens they accepted. */
export interface SpecCounts {
  verifyPasses: number;
  acceptedTokens: number;
}

/**
 * The counts of the kept generations, summed: each verification pass yields one token of its own (the
 * target model's) plus the draft tokens it accepted, so accepted = output tokens − passes. Absent when
 * any generation reported no count (speculation off, vLLM, a stream that broke before its last chunk):
 * a partial sum would understate the turn.
 */
export function turnSpec(results: readonly GenerateResult[]): SpecCounts | undefined {
  let verifyPasses = 0;
  let outputTokens = 0;
  for (const r of results) {
    if (r.specVerifyPasses === undefined) return undefined;
    verifyPasses += r.specVerifyPasses;
    outputTokens += r.outputIds.length;
  }
  if (results.length === 0) return undefined;
  return { verifyPasses, acceptedTokens: Math.max(0, outputTokens - verifyPasses) };
}

export interface TurnHooks {
  retry(event: { url: string; error: Error; failures: number }): void;
  interrupted(event: { url: string; outputTokens: number; policy: WeightUpdatePolicy }): void;
}

export interface TurnRequest {
  sessionId: string;
  promptIds: Int32Array;
  /** `maxTokens` must be set: the turn's budget, shared by every continuation. */
  sampling: Sampling & { maxTokens: number };
  rid: string;
  signal: AbortSignal;
  onWeightUpdate: WeightUpdatePolicy;
  /** Engine-side aborts absorbed before the turn gives up (default 8). */
  maxInterruptions?: number | undefined;
  /** Failed requests retried before the turn gives up (default 6). */
  maxFailures?: number | undefined;
  /**
   * Stream: called with output tokens as engines produce them. Sent tokens cannot be taken back, so an
   * engine that fails mid-stream, or aborts for a weight update even under `restart`, is continued from them.
   */
  onTokens?: ((chunk: TokenChunk) => void) | undefined;
  /** Routing replay (R3): ask every generation for its routed experts. */
  routedExperts?: RoutingShape | undefined;
}

export async function generateTurn(
  router: EngineRouter,
  request: TurnRequest,
  hooks: TurnHooks,
): Promise<GeneratedTurn> {
  const { sessionId, promptIds, sampling, signal } = request;
  const maxInterruptions = request.maxInterruptions ?? 8;
  const maxFailures = request.maxFailures ?? 6;
  const kept: Kept[] = [];
  let produced = 0;
  let interruptions = 0;
  let failures = 0;
  for (let attempt = 0; ; attempt++) {
    const lease = await router.acquire(sessionId, { signal });
    const { engine } = lease;
    let result: GenerateResult;
    const sent: TokenChunk[] = [];
    // The version in force when the generation was sent (an aborted answer's, when its engine names none).
    const atSend = router.weightLog.current(engine.url);
    try {
      const generate = {
        inputIds: produced === 0 ? promptIds : withOutput(promptIds, kept),
        sampling: { ...sampling, maxTokens: sampling.maxTokens - produced },
        rid: attempt === 0 ? request.rid : `${request.rid}.${attempt}`,
        routingKey: sessionId,
        ...(request.routedExperts ? { routedExperts: request.routedExperts } : {}),
      };
      result = request.onTokens
        ? await streamed(engine, generate, signal, (chunk) => {
            // An engine that reports no version (vLLM): the chunk takes the one the log has in force now.
            const stamped =
              chunk.weightVersion === undefined
                ? { ...chunk, weightVersion: router.weightLog.current(engine.url) }
                : chunk;
            sent.push(stamped);
            request.onTokens!(stamped);
          })
        : await engine.generate(generate, { signal });
    } catch (error) {
      lease.release();
      if (signal.aborted || !isRetryableError(error) || ++failures > maxFailures) throw error;
      hooks.retry({ url: engine.url, error: error as Error, failures });
      if (sent.length > 0) {
        // the client has these tokens: the turn goes on from them on a healthy engine
        const part = partialResult(sent, request.rid);
        kept.push({ result: part, url: engine.url, runs: chunkRuns(sent) });
        produced += part.outputIds.length;
        if (produced >= sampling.maxTokens) return combine(kept, 'length', interruptions, failures);
      }
      const stillHealthy = await router.reportFailure(engine, error);
      // A healthy engine that failed (overloaded, a transient 5xx) gets a pause before the next try.
      if (stillHealthy)
        await sleep(backoffDelay(failures, { initialDelayMs: 100, maxDelayMs: 2_000 }), signal);
      continue;
    }
    lease.release();
    router.noteVersion(engine, result.weightVersion);
    const runs = generationRuns(
      result,
      request.onTokens ? sent : undefined,
      result.finishReason === 'abort' ? atSend : router.weightLog.current(engine.url),
    );
    if (result.finishReason !== 'abort' || signal.aborted) {
      kept.push({ result, url: engine.url, runs });
      return combine(kept, result.finishReason, interruptions, failures);
    }
    // The engine cut the turn short (a weight update's pause or abort_all): absorb it.
    if (++interruptions > maxInterruptions) {
      throw new EngineError(
        `the engine aborted turn ${request.rid} ${interruptions} times (${engine.url}); retry the turn`,
        { isRetryable: true, url: engine.url },
      );
    }
    hooks.interrupted({
      url: engine.url,
      outputTokens: result.outputIds.length,
      policy:
        request.onWeightUpdate === 'restart' && request.onTokens && produced + result.outputIds.length > 0
          ? 'continue'
          : request.onWeightUpdate,
    });
    const restart =
      request.onWeightUpdate === 'restart' && !(request.onTokens && produced + result.outputIds.length > 0);
    if (restart) {
      kept.length = 0;
      produced = 0;
      continue;
    }
    kept.push({ result, url: engine.url, runs });
    produced += result.outputIds.length;
    if (produced >= sampling.maxTokens) return combine(kept, 'length', interruptions, failures);
  }
}

/** One generation kept for the turn: its result, engine, and the versions of its tokens in runs. */
interface Kept {
  result: GenerateResult;
  url: string;
  runs: VersionRun[];
}

/** Runs of equal versions over streamed chunks, in order. */
function chunkRuns(chunks: readonly TokenChunk[]): VersionRun[] {
  const runs: VersionRun[] = [];
  for (const c of chunks) addRun(runs, c.weightVersion, c.outputIds.length);
  return runs;
}

function addRun(runs: VersionRun[], version: string | undefined, tokens: number): void {
  if (tokens === 0) return;
  const last = runs[runs.length - 1];
  if (last && last.version === version) last.tokens += tokens;
  else runs.push({ version, tokens });
}

/**
 * The versions of one generation's tokens. Streamed: each chunk's (the engine's field, else the log's
 * version in force when the chunk arrived), so an update that lands while a vLLM stream runs splits
 * it. Not streamed: the engine's reported version, else the log's when the answer arrived; an answer the
 * engine aborted (an update's pause cut it) the one in force when it was sent. Under the update protocol
 * (pause with abort, wait for the cut answers, load, log, resume) both are exact. SGLang builds every
 * chunk's `meta_info.weight_version` from the version it serves at that moment
 * (sgl-project/sglang python/sglang/srt/managers/tokenizer_manager.py, `_handle_batch_output`, c60799d),
 * so a generation frozen across an update splits there too.
 */
function generationRuns(
  result: GenerateResult,
  chunks: readonly TokenChunk[] | undefined,
  logged: string | undefined,
): VersionRun[] {
  const n = result.outputIds.length;
  if (chunks) {
    const runs = chunkRuns(chunks);
    const covered = runs.reduce((k, r) => k + r.tokens, 0);
    // A stream's chunks are its output; should they fall short, the rest is the answer's version.
    if (covered === n) return runs;
  }
  const runs: VersionRun[] = [];
  addRun(runs, result.weightVersion ?? logged, n);
  return runs;
}

/** The prompt followed by every output kept so far: what a continuation is sent. */
function withOutput(promptIds: Int32Array, kept: readonly Kept[]): Int32Array {
  let n = promptIds.length;
  for (const k of kept) n += k.result.outputIds.length;
  const ids = new Int32Array(n);
  ids.set(promptIds);
  let at = promptIds.length;
  for (const k of kept) {
    ids.set(k.result.outputIds, at);
    at += k.result.outputIds.length;
  }
  return ids;
}

function combine(
  kept: readonly Kept[],
  finishReason: EngineFinishReason,
  interruptions: number,
  failures: number,
): GeneratedTurn {
  if (kept.length === 1) {
    const { result, url, runs } = kept[0]!;
    return {
      outputIds: result.outputIds,
      logprobs: result.logprobs,
      finishReason,
      versionRuns: runs.map((r) => ({ ...r })),
      engines: [url],
      interruptions,
      failures,
      cachedTokens: result.cachedTokens,
      topP: result.topP,
      topK: result.topK,
      routes: result.routes,
      spec: turnSpec([result]),
    };
  }
  let n = 0;
  for (const k of kept) n += k.result.outputIds.length;
  const outputIds = new Int32Array(n);
  const logprobs = new Float32Array(n);
  const versionRuns: VersionRun[] = [];
  const engines: string[] = [];
  let at = 0;
  for (const { result, url, runs } of kept) {
    outputIds.set(result.outputIds, at);
    logprobs.set(result.logprobs, at);
    at += result.outputIds.length;
    for (const r of runs) addRun(versionRuns, r.version, r.tokens);
    if (engines[engines.length - 1] !== url) engines.push(url);
  }
  return {
    outputIds,
    logprobs,
    finishReason,
    versionRuns: versionRuns.filter((r) => r.tokens > 0),
    engines,
    interruptions,
    failures,
    cachedTokens: kept[0]!.result.cachedTokens,
    topP: kept.every((k) => k.result.topP) ? concatNucleus(kept.map((k) => k.result.topP!)) : undefined,
    topK: kept.every((k) => k.result.topK) ? concatTopLogprobs(kept.map((k) => k.result.topK!)) : undefined,
    routes: concatRoutes(kept.map((k) => k.result.routes)),
    spec: turnSpec(kept.map((k) => k.result)),
  };
}

/** One streamed request; an engine without a streaming client hands its whole output over at the end. */
async function streamed(
  engine: Engine,
  request: GenerateRequest,
  signal: AbortSignal,
  onTokens: (chunk: TokenChunk) => void,
): Promise<GenerateResult> {
  if (engine.generateStream) return engine.generateStream(request, { signal, onTokens });
  const result = await engine.generate(request, { signal });
  if (result.outputIds.length > 0) {
    onTokens({ outputIds: result.outputIds, logprobs: result.logprobs, weightVersion: result.weightVersion });
  }
  return result;
}

/** The tokens a failed stream delivered, as the output of an aborted request. */
function partialResult(chunks: TokenChunk[], rid: string): GenerateResult {
  let n = 0;
  for (const c of chunks) n += c.outputIds.length;
  const outputIds = new Int32Array(n);
  const logprobs = new Float32Array(n);
  let at = 0;
  for (const c of chunks) {
    outputIds.set(c.outputIds, at);
    logprobs.set(c.logprobs, at);
    at += c.outputIds.length;
  }
  const version = chunks[chunks.length - 1]!.weightVersion;
  return {
    rid,
    outputIds,
    logprobs,
    finishReason: 'abort',
    text: '',
    promptTokens: 0,
    weightVersion: version,
  };
}
