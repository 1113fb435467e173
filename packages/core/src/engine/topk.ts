/**
 * Top-k log probs of every output token, for score centering: the sampler's k most likely ids at each
 * sampled position and their log probs (full-vocabulary normalised), as the reference framework's
 * trainer reads them (`rollout_topk_token_ids` / `rollout_topk_log_probs`, one row of k per response
 * token; vllm-project/vime vime/utils/types.py and vime/utils/score_centering.py at 2b83ea2).
 *
 * The wires, read from the engines' sources:
 * - SGLang `/generate`: `top_logprobs_num: k` beside `return_logprob` in the request; the answer's
 *   `meta_info.output_top_logprobs` holds, per output token, k entries `[logprob, token_id, text]`.
 *   Streamed chunks carry it beside `output_token_logprobs`, all rows so far or (with
 *   `--incremental-streaming-output`) only the new ones, sliced alike (sgl-project/sglang
 *   python/sglang/srt/managers/tokenizer_manager.py at 001067f, `_INCREMENTAL_STREAMING_META_INFO_KEYS`).
 *   SGLang refuses a k outside [0, vocabulary size].
 * - vLLM `/v1/completions`: `logprobs: k` with `return_tokens_as_token_ids: true`; each token's
 *   `logprobs.top_logprobs` entry is a map `"token_id:<id>" -> logprob` holding the sampled token and
 *   the k most likely (k or k + 1 entries), log probs floored at -9999
 *   (vllm-project/vllm vllm/entrypoints/openai/completion/serving.py `_create_completion_logprobs`
 *   at 030ea52). vLLM refuses a k above its `--max-logprobs` (`ModelConfig.max_logprobs`, default 20).
 */
import { ConfigError, EngineError } from '../errors.js';
import type { Sampling } from './types.js';

/** The top-k head of every output token of one generation: `k` ids and log probs per token, row-major. */
export interface TopLogprobs {
  k: number;
  /** `outputTokens * k` ids: token i's head is `ids[i * k .. (i + 1) * k]`, most likely first. */
  ids: Int32Array;
  /** The log prob of every id (parallel to `ids`). */
  logprobs: Float32Array;
}

/** vLLM's default `--max-logprobs`: the most top log probs a vLLM engine returns unless started with more. */
export const VLLM_DEFAULT_MAX_LOGPROBS = 20;

/** Whether a turn sampled with `sampling` asks for its top-k log probs. */
export function wantsTopLogprobs(sampling: Pick<Sampling, 'topLogprobs'>): boolean {
  return sampling.topLogprobs !== undefined && sampling.topLogprobs > 0;
}

/**
 * Refuse a `topLogprobs` that is not a positive integer or is above `limit` (the engine's), naming the
 * option, the value and the fix.
 */
export function checkTopLogprobs(
  k: number | undefined,
  limit: number | undefined,
  engine: string,
  raise = `or raise the engine's limit (vLLM: start it with --max-logprobs ${k} and pass maxLogprobs: ${k} to vllmEngine)`,
): void {
  if (k === undefined) return;
  if (!Number.isInteger(k) || k < 1) {
    throw new ConfigError(
      `sampling.topLogprobs must be a positive integer (the k of the top-k log probs captured per token), found ${k}; leave it unset to capture none`,
    );
  }
  if (limit !== undefined && k > limit) {
    throw new ConfigError(
      `sampling.topLogprobs ${k} is above the limit of ${engine} (${limit}); lower topLogprobs to at most ${limit}${raise ? `, ${raise}` : ''}`,
    );
  }
}

function fail(url: string, message: string): EngineError {
  return new EngineError(`${url}: top-k log probs: ${message}`, { url, isRetryable: false });
}

/** SGLang's `meta_info.output_top_logprobs` (one list of `[logprob, token_id, text]` per token) as a head of k. */
export function readSglangTopLogprobs(
  entries: unknown,
  outputLength: number,
  k: number,
  url: string,
): TopLogprobs {
  // A generation aborted before its first token may report no rows at all.
  if (entries == null && outputLength === 0)
    return { k, ids: new Int32Array(0), logprobs: new Float32Array(0) };
  if (!Array.isArray(entries)) {
    throw fail(
      url,
      `sampling.topLogprobs ${k} needs meta_info.output_top_logprobs, found ${JSON.stringify(entries)?.slice(0, 60)}; serve with an SGLang that honours top_logprobs_num`,
    );
  }
  if (entries.length !== outputLength) {
    throw fail(
      url,
      `meta_info.output_top_logprobs: expected ${outputLength} rows (one per output token), found ${entries.length}`,
    );
  }
  const top: TopLogprobs = {
    k,
    ids: new Int32Array(outputLength * k),
    logprobs: new Float32Array(outputLength * k),
  };
  for (let i = 0; i < outputLength; i++) {
    const row = entries[i];
    if (!Array.isArray(row) || row.length !== k) {
      throw fail(
        url,
        `meta_info.output_top_logprobs[${i}]: expected ${k} entries, found ${JSON.stringify(row)?.slice(0, 80)}`,
      );
    }
    for (let j = 0; j < k; j++) {
      const e = row[j] as unknown;
      const lp = Array.isArray(e) ? e[0] : undefined;
      const id = Array.isArray(e) ? e[1] : undefined;
      if (typeof lp !== 'number' || !Number.isInteger(id)) {
        throw fail(
          url,
          `meta_info.output_top_logprobs[${i}][${j}]: expected [logprob, token_id, text], found ${JSON.stringify(e)}`,
        );
      }
      top.ids[i * k + j] = id as number;
      top.logprobs[i * k + j] = lp;
    }
  }
  return top;
}

const TOKEN_ID = /^token_id:(\d+)$/;

/**
 * vLLM's `logprobs.top_logprobs` (one `"token_id:<id>" -> logprob` map per token, the sampled token and
 * the k most likely) as a head of k: the k highest log probs, most likely first.
 */
export function readVllmTopLogprobs(
  rows: unknown,
  outputLength: number,
  k: number,
  url: string,
): TopLogprobs {
  if (!Array.isArray(rows) || rows.length !== outputLength) {
    throw fail(
      url,
      `sampling.topLogprobs ${k} needs logprobs.top_logprobs with one map per output token (${outputLength}), found ${JSON.stringify(rows)?.slice(0, 60)}`,
    );
  }
  const top: TopLogprobs = {
    k,
    ids: new Int32Array(outputLength * k),
    logprobs: new Float32Array(outputLength * k),
  };
  for (let i = 0; i < outputLength; i++) {
    const row = rows[i] as unknown;
    if (row === null || typeof row !== 'object' || Array.isArray(row)) {
      throw fail(
        url,
        `logprobs.top_logprobs[${i}]: expected a map of "token_id:<id>" to log prob, found ${JSON.stringify(row)}`,
      );
    }
    const entries: Array<[number, number]> = [];
    for (const [token, lp] of Object.entries(row)) {
      const m = TOKEN_ID.exec(token);
      if (!m || typeof lp !== 'number') {
        throw fail(
          url,
          `logprobs.top_logprobs[${i}]: expected "token_id:<id>": logprob entries (request return_tokens_as_token_ids), found ${JSON.stringify(token)}: ${JSON.stringify(lp)}`,
        );
      }
      entries.push([Number(m[1]), lp]);
    }
    if (entries.length < k) {
      throw fail(url, `logprobs.top_logprobs[${i}]: expected at least ${k} entries, found ${entries.length}`);
    }
    entries.sort((a, b) => b[1] - a[1]);
    for (let j = 0; j < k; j++) {
      top.ids[i * k + j] = entries[j]![0];
      top.logprobs[i * k + j] = entries[j]![1];
    }
  }
  return top;
}

/**
 * What is wrong with a head, or undefined: `outputLength` rows of exactly `k`, ids distinct within a row
 * and inside the vocabulary, log probs finite and at most 0 (the reference trainer's checks).
 */
export function topLogprobsProblem(
  top: TopLogprobs,
  check: { outputLength: number; k: number; vocabSize?: number | undefined },
): string | undefined {
  const { k, outputLength } = check;
  if (top.k !== k) return `expected k = ${k}, found ${top.k}`;
  if (top.ids.length !== outputLength * k || top.logprobs.length !== outputLength * k) {
    return `expected ${outputLength} rows of ${k} (one per output token), found ${top.ids.length} ids and ${top.logprobs.length} log probs`;
  }
  const vocab = check.vocabSize ?? 2 ** 31;
  for (let i = 0; i < outputLength; i++) {
    const row = top.ids.subarray(i * k, (i + 1) * k);
    if (new Set(row).size !== k) return `row ${i}: ids must be distinct, found ${Array.from(row).join(',')}`;
    for (let j = 0; j < k; j++) {
      const id = row[j]!;
      const lp = top.logprobs[i * k + j]!;
      if (id < 0 || id >= vocab) return `row ${i}: id ${id} is outside the vocabulary [0, ${vocab})`;
      if (!Number.isFinite(lp) || lp > 0) return `row ${i}: expected a finite log prob <= 0, found ${lp}`;
    }
  }
  return undefined;
}

/**
 * The checked head a turn sampled with `sampling` records: undefined when it asked for none, else the
 * engine's, which must be present and consistent with the output (an `EngineError` otherwise).
 */
export function turnTopLogprobs(
  sampling: Pick<Sampling, 'topLogprobs'>,
  result: { outputIds: Int32Array; topK?: TopLogprobs | undefined; engines: readonly string[] },
  vocabSize: number | undefined,
): TopLogprobs | undefined {
  if (!wantsTopLogprobs(sampling)) return undefined;
  const url = result.engines[result.engines.length - 1] ?? 'engine';
  if (!result.topK) {
    throw fail(
      url,
      `sampling.topLogprobs ${sampling.topLogprobs} needs the top-k log probs of every output token, but the engine returned none`,
    );
  }
  const problem = topLogprobsProblem(result.topK, {
    outputLength: result.outputIds.length,
    k: sampling.topLogprobs!,
    vocabSize,
  });
  if (problem) throw fail(url, problem);
  return result.topK;
}

/** The heads of consecutive generations (a turn continued after an engine-side abort), in order. */
export function concatTopLogprobs(parts: readonly TopLogprobs[]): TopLogprobs {
  const k = parts[0]?.k ?? 0;
  const n = parts.reduce((s, p) => s + p.ids.length, 0);
  const out: TopLogprobs = { k, ids: new Int32Array(n), logprobs: new Float32Array(n) };
  let at = 0;
  for (const p of parts) {
    if (p.k !== k) throw new Error(`top-k log probs of one turn with k ${k} and ${p.k}`);
    out.ids.set(p.ids, at);
    out.logprobs.set(p.logprobs, at);
    at += p.ids.length;
  }
  return out;
}

/** The uniform filler of a position that was not sampled: ids 0..k-1, each log prob -log k (the reference trainer's). */
export function fillerTopLogprobs(k: number): { ids: Int32Array; logprobs: Float32Array } {
  return {
    ids: Int32Array.from({ length: k }, (_, j) => j),
    logprobs: new Float32Array(k).fill(-Math.log(k)),
  };
}
