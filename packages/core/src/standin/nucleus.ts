/**
 * The stand-in's sampler replay data, on the wire of SGLang with slime's top-p patch: for every output
 * token a small deterministic nucleus that contains the sampled id and whose renormalised log probs
 * sum to 1 (the sampled id keeps the log prob reported for it). `meta_info.top_p_token_ids` and
 * `top_p_token_offsets` are base64 int32 as the patch sends them; `top_p_token_logprobs` (base64
 * float32, one per kept id) is the stand-in's, read by the engine client where an engine reports it.
 */
import { encodeBase64Array } from '../engine/nucleus.js';

function mix(a: number, b: number): number {
  let h = Math.imul(a ^ 0x7f4a7c15, 0x9e3779b1) ^ Math.imul(b + 0x165667b1, 0x85ebca77);
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d);
  return (h ^ (h >>> 12)) >>> 0;
}

/** The `meta_info` fields of the nucleus of every output token (`position`: the first output token's). */
export function standInNucleusMeta(
  position: number,
  outputIds: Int32Array,
  logprobs: Float32Array,
  vocabSize: number,
): Record<string, string> {
  const ids: number[] = [];
  const lps: number[] = [];
  const offsets = [0];
  for (let i = 0; i < outputIds.length; i++) {
    const sampled = outputIds[i]!;
    const h = mix(position + i, sampled);
    const size = Math.min(2 + (h % 3), vocabSize);
    const at = (h >>> 8) % size;
    // The rest of the mass, split evenly over the other kept ids (never exactly 0: log 0 is -inf).
    const rest = Math.fround(Math.log(Math.max(1 - Math.exp(logprobs[i]!), 1e-7) / Math.max(size - 1, 1)));
    let other = (sampled + 1 + (h % 97)) % vocabSize;
    for (let k = 0; k < size; k++) {
      if (k === at) {
        ids.push(sampled);
        lps.push(logprobs[i]!);
        continue;
      }
      if (other === sampled) other = (other + 1) % vocabSize;
      ids.push(other);
      lps.push(rest);
      other = (other + 1) % vocabSize;
    }
    offsets.push(ids.length);
  }
  return {
    top_p_token_ids: encodeBase64Array(Int32Array.from(ids)),
    top_p_token_offsets: encodeBase64Array(Int32Array.from(offsets)),
    top_p_token_logprobs: encodeBase64Array(Float32Array.from(lps)),
  };
}
