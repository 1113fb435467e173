/**
 * Top-k log probs of a packed row (score centering): the turns' heads laid over the response region as
 * the reference framework's trainer reads them (`rollout_topk_token_ids` / `rollout_topk_log_probs`, one
 * row of k per response token; vllm-project/vime vime/utils/types.py at 2b83ea2), with its uniform filler
 * (ids 0..k-1, log prob -log k each) on every token that was not sampled (observations, realigned text).
 */
import { fillerTopLogprobs } from '../../engine/topk.js';
import type { Turn } from '../../rollout.js';

/** A row's top-k heads: `responseTokens * k` ids and log probs, row-major. */
export interface RowTopK {
  k: number;
  ids: Int32Array;
  logprobs: Float32Array;
  /** Why the row has no top-k data although some of its turns have it. */
  error?: string | undefined;
}

/**
 * The heads of a row whose response token j was sampled at output position `sourcePos[j]` of turn
 * `sourceTurn[j]` (-1: not sampled). Undefined when none of the row's turns carries top-k data.
 */
export function rowTopK(
  turns: readonly Turn[],
  rowTurns: readonly number[],
  sourceTurn: readonly number[],
  sourcePos: readonly number[],
): RowTopK | undefined {
  const withTopK = rowTurns.filter((t) => turns[t]!.topK !== undefined);
  if (withTopK.length === 0) return undefined;
  const k = turns[withTopK[0]!]!.topK!.k;
  const broken = (error: string): RowTopK => ({
    k,
    ids: new Int32Array(0),
    logprobs: new Float32Array(0),
    error,
  });
  const missing = rowTurns.find((t) => turns[t]!.topK === undefined);
  if (missing !== undefined) {
    return broken(
      `turn ${missing} has no top-k log probs while turn ${withTopK[0]} has: every turn of a trajectory must sample with the same topLogprobs`,
    );
  }
  const other = rowTurns.find((t) => turns[t]!.topK!.k !== k);
  if (other !== undefined) {
    return broken(
      `turn ${other} has top-${turns[other]!.topK!.k} log probs while turn ${withTopK[0]} has top-${k}`,
    );
  }
  const filler = fillerTopLogprobs(k);
  const ids = new Int32Array(sourceTurn.length * k);
  const logprobs = new Float32Array(sourceTurn.length * k);
  for (let j = 0; j < sourceTurn.length; j++) {
    if (sourceTurn[j]! < 0) {
      ids.set(filler.ids, j * k);
      logprobs.set(filler.logprobs, j * k);
      continue;
    }
    const top = turns[sourceTurn[j]!]!.topK!;
    const from = sourcePos[j]! * k;
    ids.set(top.ids.subarray(from, from + k), j * k);
    logprobs.set(top.logprobs.subarray(from, from + k), j * k);
  }
  return { k, ids, logprobs };
}

/** A row's heads as the trainer's fields: one list of k per response token. */
export function topKFields(top: RowTopK): {
  rollout_topk_token_ids: number[][];
  rollout_topk_log_probs: number[][];
} {
  const n = top.ids.length / top.k;
  return {
    rollout_topk_token_ids: Array.from({ length: n }, (_, j) =>
      Array.from(top.ids.subarray(j * top.k, (j + 1) * top.k)),
    ),
    rollout_topk_log_probs: Array.from({ length: n }, (_, j) =>
      Array.from(top.logprobs.subarray(j * top.k, (j + 1) * top.k)),
    ),
  };
}
