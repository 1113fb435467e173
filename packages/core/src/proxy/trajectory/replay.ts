/**
 * Sampler replay data of a packed row: the turns' nuclei concatenated over the response region as
 * slime stores them (`rollout_top_p_token_offsets` has one entry per response token plus one), with
 * an empty span on every token that was not sampled (observations, re-tokenised realigned text).
 */
import type { Turn } from '../../rollout.js';

/**
 * A row's sampler replay data: the kept ids of every response token's nucleus, their offsets and log probs.
 */
export interface RowReplay {
  ids: Int32Array;
  offsets: Int32Array;
  /** Log prob of every kept id, when every turn of the row has them. */
  logprobs: Float32Array | undefined;
  /** Why the row has no replay data although some of its turns have it. */
  error?: string | undefined;
}

/**
 * The replay data of a row whose response token k was sampled at output position `sourcePos[k]` of
 * turn `sourceTurn[k]` (-1: not sampled). Undefined when none of the row's turns carries a nucleus.
 */
export function rowReplay(
  turns: readonly Turn[],
  rowTurns: readonly number[],
  sourceTurn: readonly number[],
  sourcePos: readonly number[],
): RowReplay | undefined {
  const withTopP = rowTurns.filter((t) => turns[t]!.topP !== undefined);
  if (withTopP.length === 0) return undefined;
  const empty = { ids: new Int32Array(0), offsets: new Int32Array(1), logprobs: undefined };
  if (withTopP.length !== rowTurns.length) {
    const missing = rowTurns.find((t) => turns[t]!.topP === undefined)!;
    return {
      ...empty,
      error: `turn ${missing} has no sampler replay data (top_p) while turn ${withTopP[0]} has: every turn of a trajectory must sample with the same top_p`,
    };
  }
  const withLogprobs = rowTurns.every((t) => turns[t]!.topP!.logprobs !== undefined);
  let total = 0;
  for (let k = 0; k < sourceTurn.length; k++) {
    if (sourceTurn[k]! < 0) continue;
    const o = turns[sourceTurn[k]!]!.topP!.offsets;
    total += o[sourcePos[k]! + 1]! - o[sourcePos[k]!]!;
  }
  const ids = new Int32Array(total);
  const logprobs = withLogprobs ? new Float32Array(total) : undefined;
  const offsets = new Int32Array(sourceTurn.length + 1);
  let at = 0;
  for (let k = 0; k < sourceTurn.length; k++) {
    if (sourceTurn[k]! >= 0) {
      const top = turns[sourceTurn[k]!]!.topP!;
      const from = top.offsets[sourcePos[k]!]!;
      const to = top.offsets[sourcePos[k]! + 1]!;
      ids.set(top.ids.subarray(from, to), at);
      logprobs?.set(top.logprobs!.subarray(from, to), at);
      at += to - from;
    }
    offsets[k + 1] = at;
  }
  return { ids, offsets, logprobs };
}
