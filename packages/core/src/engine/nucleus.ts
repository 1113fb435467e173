/**
 * Sampler replay data: the nucleus (top-p kept set) of every output token, as slime stores it
 * (`rollout_top_p_token_ids` / `rollout_top_p_token_offsets`: the kept ids of output token i are
 * `ids[offsets[i]:offsets[i + 1]]`), plus the log prob of every kept id where the engine reports it.
 *
 * On SGLang's wire (slime's top-p patch) the request sets `sampling_params.custom_params.
 * return_top_p_token_ids` and the finished answer carries `meta_info.top_p_token_ids` and
 * `meta_info.top_p_token_offsets`, each a base64 string of little-endian int32 (or a plain list).
 * `meta_info.top_p_token_logprobs` (base64 float32 or a list, one per kept id) is read when present.
 */
import { EngineError } from '../errors.js';
import type { Sampling } from './types.js';

/** The nucleus of every output token of one generation. */
export interface NucleusReplay {
  /** Kept token ids of every output token, concatenated. */
  ids: Int32Array;
  /** `outputTokens + 1` offsets into `ids`, starting at 0. */
  offsets: Int32Array;
  /** The log prob of every kept id (parallel to `ids`), when the engine reports them. */
  logprobs?: Float32Array | undefined;
}

/** Whether a turn sampled with `sampling` needs its nucleus recorded: top-p below 1 truncates the distribution. */
export function wantsNucleus(sampling: Pick<Sampling, 'topP'>): boolean {
  return sampling.topP !== undefined && sampling.topP < 1;
}

const ID_KEYS = ['top_p_token_ids', 'top_p_kept_token_ids'] as const;
const OFFSET_KEYS = ['top_p_token_offsets', 'top_p_kept_token_offsets'] as const;
const LOGPROB_KEY = 'top_p_token_logprobs';

/** Little-endian bytes of `values`, base64: SGLang's encoding of int32 and float32 arrays in `meta_info`. */
export function encodeBase64Array(values: Int32Array | Float32Array): string {
  const view = new DataView(values.buffer, values.byteOffset, values.byteLength);
  const bytes = new Uint8Array(values.length * 4);
  const out = new DataView(bytes.buffer);
  const float = values instanceof Float32Array;
  for (let i = 0; i < values.length; i++) {
    if (float) out.setFloat32(i * 4, view.getFloat32(i * 4, true), true);
    else out.setInt32(i * 4, view.getInt32(i * 4, true), true);
  }
  return Buffer.from(bytes).toString('base64');
}

function decodeArray(value: unknown, kind: 'int32' | 'float32', where: string): Int32Array | Float32Array {
  if (typeof value === 'string') {
    const bytes = Buffer.from(value, 'base64');
    if (bytes.length % 4 !== 0 || Buffer.from(bytes).toString('base64') !== value.replace(/\s/g, '')) {
      throw new Error(
        `${where}: expected base64 of ${kind} values, found a string of ${value.length} characters`,
      );
    }
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const n = bytes.length / 4;
    if (kind === 'int32') return Int32Array.from({ length: n }, (_, i) => view.getInt32(i * 4, true));
    return Float32Array.from({ length: n }, (_, i) => view.getFloat32(i * 4, true));
  }
  if (Array.isArray(value)) {
    const ok = kind === 'int32' ? Number.isInteger : (x: unknown) => typeof x === 'number';
    const bad = value.findIndex((x) => !ok(x));
    if (bad >= 0) throw new Error(`${where}[${bad}]: expected ${kind}, found ${JSON.stringify(value[bad])}`);
    return kind === 'int32' ? Int32Array.from(value) : Float32Array.from(value);
  }
  throw new Error(
    `${where}: expected a base64 string or a list, found ${JSON.stringify(value)?.slice(0, 60)}`,
  );
}

/**
 * The nucleus of an SGLang answer, checked against its `outputLength` tokens. Throws `EngineError`
 * (not retryable: the engine lacks slime's top-p patch or sent inconsistent data) naming the field.
 */
export function readSglangNucleus(
  meta: Record<string, unknown>,
  outputLength: number,
  url: string,
): NucleusReplay {
  const fail = (message: string) =>
    new EngineError(`${url}/generate: ${message}`, { url, isRetryable: false });
  const idKey = ID_KEYS.find((k) => meta[k] != null);
  const offsetKey = OFFSET_KEYS.find((k) => meta[k] != null);
  // The patch reports nothing for a generation that produced no token (aborted before its first).
  if (!idKey && !offsetKey && outputLength === 0)
    return { ids: new Int32Array(0), offsets: new Int32Array(1) };
  if (!idKey || !offsetKey) {
    throw fail(
      `top_p < 1 needs the nucleus of every output token, but meta_info has no ${idKey ? 'top_p_token_offsets' : 'top_p_token_ids'}; serve with an SGLang that has slime's top-p patch (custom_params.return_top_p_token_ids), or sample with top_p 1`,
    );
  }
  let nucleus: NucleusReplay;
  try {
    nucleus = {
      ids: decodeArray(meta[idKey], 'int32', `meta_info.${idKey}`) as Int32Array,
      offsets: decodeArray(meta[offsetKey], 'int32', `meta_info.${offsetKey}`) as Int32Array,
      logprobs:
        meta[LOGPROB_KEY] == null
          ? undefined
          : (decodeArray(meta[LOGPROB_KEY], 'float32', `meta_info.${LOGPROB_KEY}`) as Float32Array),
    };
  } catch (error) {
    throw fail((error as Error).message);
  }
  const problem = nucleusProblem(nucleus, { outputLength });
  if (problem) throw fail(`meta_info.${problem}`);
  return nucleus;
}

/** What a nucleus is checked against: the output's length and, optionally, the vocabulary size. */
export interface NucleusCheck {
  outputLength: number;
  /** Ids must be below this (the tokenizer's vocabulary size). */
  vocabSize?: number | undefined;
}

/**
 * What is wrong with a nucleus, as `field: problem` (field names relative to the wire's `top_p_token_*`),
 * or undefined when it is consistent: offsets start at 0, never decrease, one per output token plus one,
 * end at the id count; ids within the vocabulary; log probs (when present) one per id and finite.
 */
export function nucleusProblem(nucleus: NucleusReplay, check: NucleusCheck): string | undefined {
  const { ids, offsets, logprobs } = nucleus;
  if (offsets.length !== check.outputLength + 1) {
    return `top_p_token_offsets: expected ${check.outputLength + 1} offsets (one per output token plus one), found ${offsets.length}`;
  }
  if (offsets[0] !== 0) return `top_p_token_offsets[0]: expected 0, found ${offsets[0]}`;
  for (let i = 1; i < offsets.length; i++) {
    if (offsets[i]! < offsets[i - 1]!) {
      return `top_p_token_offsets[${i}]: ${offsets[i]} is below offsets[${i - 1}] = ${offsets[i - 1]}; offsets never decrease`;
    }
  }
  if (offsets[offsets.length - 1] !== ids.length) {
    return `top_p_token_offsets[${offsets.length - 1}]: the last offset ${offsets[offsets.length - 1]} must equal the ${ids.length} kept ids`;
  }
  const vocab = check.vocabSize ?? 2 ** 31;
  for (let i = 0; i < ids.length; i++) {
    if (ids[i]! < 0 || ids[i]! >= vocab) {
      return `top_p_token_ids[${i}]: ${ids[i]} is outside the vocabulary [0, ${vocab})`;
    }
  }
  if (logprobs) {
    if (logprobs.length !== ids.length) {
      return `top_p_token_logprobs: expected one per kept id (${ids.length}), found ${logprobs.length}`;
    }
    for (let i = 0; i < logprobs.length; i++) {
      if (!Number.isFinite(logprobs[i]!)) {
        return `top_p_token_logprobs[${i}]: expected a finite log prob, found ${logprobs[i]}`;
      }
    }
  }
  return undefined;
}

/**
 * The checked nucleus a turn sampled with `sampling` records: undefined when top-p is 1, else the
 * engine's, which must be present and consistent with the output (an `EngineError` otherwise).
 */
export function turnNucleus(
  sampling: Pick<Sampling, 'topP'>,
  result: { outputIds: Int32Array; topP?: NucleusReplay | undefined; engines: readonly string[] },
  vocabSize: number | undefined,
): NucleusReplay | undefined {
  if (!wantsNucleus(sampling)) return undefined;
  const url = result.engines[result.engines.length - 1] ?? 'engine';
  if (!result.topP) {
    throw new EngineError(
      `${url}: top_p ${sampling.topP} needs the nucleus of every output token, but the engine returned none; use an SGLang engine with slime's top-p patch, or sample with top_p 1`,
      { url, isRetryable: false },
    );
  }
  const problem = nucleusProblem(result.topP, { outputLength: result.outputIds.length, vocabSize });
  if (problem) throw new EngineError(`${url}: sampler replay data: ${problem}`, { url, isRetryable: false });
  return result.topP;
}

/** The nucleus of consecutive generations (a turn continued after an engine-side abort), in order. */
export function concatNucleus(parts: readonly NucleusReplay[]): NucleusReplay {
  let ids = 0;
  let tokens = 0;
  for (const p of parts) {
    ids += p.ids.length;
    tokens += p.offsets.length - 1;
  }
  const withLogprobs = parts.every((p) => p.logprobs !== undefined);
  const out: NucleusReplay = {
    ids: new Int32Array(ids),
    offsets: new Int32Array(tokens + 1),
    logprobs: withLogprobs ? new Float32Array(ids) : undefined,
  };
  let at = 0;
  let t = 0;
  for (const p of parts) {
    out.ids.set(p.ids, at);
    out.logprobs?.set(p.logprobs!, at);
    for (let i = 1; i < p.offsets.length; i++) out.offsets[++t] = at + p.offsets[i]!;
    at += p.ids.length;
  }
  return out;
}
