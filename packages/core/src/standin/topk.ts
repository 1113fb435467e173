/**
 * The stand-in's top-k log probs (score centering), on the engines' wires: for every output token a
 * deterministic head of k distinct ids with full-vocabulary log probs that sum to at most 1, most
 * likely first. The sampled id is in the head (with the log prob reported for it) unless its
 * probability is small enough for k others to outrank it, as a real sampler's draws sometimes are.
 * SGLang: `meta_info.output_top_logprobs`, k `[logprob, token_id, null]` per token. vLLM: per token a
 * `"token_id:<id>" -> logprob` map of the sampled token and the head (k or k + 1 entries).
 */

function mix(a: number, b: number): number {
  let h = Math.imul(a ^ 0x2545f491, 0x9e3779b1) ^ Math.imul(b + 0x27d4eb2f, 0x85ebca77);
  h ^= h >>> 13;
  h = Math.imul(h, 0x5bd1e995);
  return (h ^ (h >>> 15)) >>> 0;
}

/** The head of k of the token sampled at `position` (`sampled`, with log prob `logprob`), most likely first. */
export function standInHead(
  position: number,
  sampled: number,
  logprob: number,
  k: number,
  vocabSize: number,
): Array<[number, number]> {
  const h = mix(position, sampled);
  const p = Math.exp(logprob);
  // k others of equal-step mass (1 - p) * 2(k - j) / (k(k + 1)): the smallest outranks p when p is small.
  const outside = h % 3 === 0 && p < 2 / (k * (k + 1) + 2);
  const others = outside ? k : k - 1;
  const mass = outside ? 1 - p : (1 - p) * 0.9;
  const head: Array<[number, number]> = outside ? [] : [[sampled, logprob]];
  let id = (sampled + 1 + (h % 97)) % vocabSize;
  for (let j = 0; j < others; j++) {
    if (id === sampled) id = (id + 1) % vocabSize;
    const share = (mass * 2 * (others - j)) / (others * (others + 1));
    head.push([id, Math.fround(Math.log(Math.max(share, 1e-30)))]);
    id = (id + 1) % vocabSize;
  }
  return head.sort((a, b) => b[1] - a[1]);
}

/** SGLang's `output_top_logprobs` rows of output tokens starting at `position`. */
export function sglangTopRows(
  position: number,
  ids: Int32Array,
  logprobs: Float32Array,
  k: number,
  vocabSize: number,
): Array<Array<[number, number, null]>> {
  return Array.from(ids, (id, i) =>
    standInHead(position + i, id, logprobs[i]!, k, vocabSize).map(([t, lp]): [number, number, null] => [
      lp,
      t,
      null,
    ]),
  );
}

/** vLLM's `top_logprobs` maps (with `return_tokens_as_token_ids`) of output tokens starting at `position`. */
export function vllmTopMaps(
  position: number,
  ids: Int32Array,
  logprobs: Float32Array,
  k: number,
  vocabSize: number,
): Array<Record<string, number>> {
  return Array.from(ids, (id, i) => {
    const map: Record<string, number> = { [`token_id:${id}`]: logprobs[i]! };
    for (const [t, lp] of standInHead(position + i, id, logprobs[i]!, k, vocabSize))
      map[`token_id:${t}`] = lp;
    return map;
  });
}
