import { ValidationError } from '@vime/core';
import { tokenOffsets } from '../tokens/tokens.js';
import { allocate, type Dtype, type FloatArray, rounder } from './f32.js';
import { checkUnit } from './returns.js';

/** Advantages and returns from generalized advantage estimation. */
export interface GaeResult {
  advantages: FloatArray;
  returns: FloatArray;
}

/**
 * Generalized advantage estimation per response: `δ_t = r_t + γ·V_{t+1} − V_t`, `A_t = δ_t + γλ·A_{t+1}`,
 * returns `A + V`, with `V` after the last token = 0. With `observationMask`, tokens with mask 0 (tool
 * output) are skipped: they pass the next value and advantage through unchanged (verl).
 */
export function gae(input: {
  tokenRewards: ArrayLike<number>;
  values: ArrayLike<number>;
  responseLengths: ArrayLike<number>;
  gamma: number;
  lambda: number;
  observationMask?: ArrayLike<number> | undefined;
  dtype?: Dtype | undefined;
}): GaeResult {
  const { tokenRewards, values, gamma, lambda, observationMask, dtype = 'float32' } = input;
  checkUnit('gamma', gamma);
  checkUnit('lambda', lambda);
  const offsets = tokenOffsets(input.responseLengths);
  const total = offsets[offsets.length - 1]!;
  for (const [name, arr] of [
    ['tokenRewards', tokenRewards],
    ['values', values],
    ['observationMask', observationMask],
  ] as const) {
    if (arr && arr.length !== total) {
      throw new ValidationError(name, `has ${arr.length} values but the responses hold ${total} tokens`);
    }
  }
  const advantages = allocate(dtype, total);
  const returns = allocate(dtype, total);
  const round = rounder(dtype);
  for (let i = 0; i + 1 < offsets.length; i++) {
    let nextValue = 0;
    let last = 0;
    for (let t = offsets[i + 1]! - 1; t >= offsets[i]!; t--) {
      const v = values[t]!;
      const delta = tokenRewards[t]! + gamma * nextValue - v;
      const candidate = delta + gamma * lambda * last;
      if (!observationMask || observationMask[t]) {
        nextValue = v;
        last = candidate;
      }
      advantages[t] = last;
      returns[t] = round(round(last) + round(v));
    }
  }
  return { advantages, returns };
}
