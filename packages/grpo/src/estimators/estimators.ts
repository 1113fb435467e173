import { describeValue, ValidationError } from '@vime/core';
import { type GrpoOptions, grpoAdvantages } from './advantages.js';
import { allocate, type Dtype, type FloatArray, f32, rounder, sumF64, torchSumF32 } from './f32.js';
import { checkRewards, type GroupingOptions, resolveGroups } from './groups.js';
import { groupMoments } from './moments.js';

/**
 * The sequence-level estimators besides GRPO, as verl's `core_algos.py` computes them (float32 unless
 * `dtype: 'float64'`, each op rounded like the trainer's tensors). `verlAdvantages` spreads them over
 * tokens the way verl does.
 */

export interface EstimatorOptions extends GroupingOptions {
  dtype?: Dtype | undefined;
}

function setup(rewards: ArrayLike<number>, options: EstimatorOptions) {
  const raw = checkRewards(rewards);
  const grouping = resolveGroups(raw.length, options);
  const dtype = options.dtype ?? 'float32';
  const values = allocate(dtype, raw.length);
  values.set(raw);
  return { values, grouping, dtype, round: rounder(dtype), out: allocate(dtype, raw.length) };
}

/** The mean of a group as `torch.mean` of its stacked scores. */
function meanOf(values: FloatArray, members: Int32Array, from: number, to: number, dtype: Dtype): number {
  return groupMoments(values, members, from, to, 'verl', dtype).mean;
}

/**
 * RLOO: each sample's baseline is the mean of the *other* samples of its group, `A = r − mean_{j≠i}`.
 * verl's loop version (`rloo`) computes `r·n/(n−1) − mean·n/(n−1)` and leaves a group of one at its
 * raw reward; the vectorized one (`rloo_vectorized`, `vectorized: true`) computes
 * `(n·r − Σ_g r)/(n − 1)` from `bincount` sums and gives a group of one 0.
 */
export function rlooAdvantages(
  rewards: ArrayLike<number>,
  options: EstimatorOptions & { vectorized?: boolean | undefined },
): FloatArray {
  const { values, grouping, dtype, round, out } = setup(rewards, options);
  for (let g = 0; g < grouping.keys.length; g++) {
    const from = grouping.starts[g]!;
    const to = grouping.starts[g + 1]!;
    const n = to - from;
    if (options.vectorized) {
      // bincount(weights=scores): a sequential sum in the scores' dtype.
      let sum = 0;
      for (let j = from; j < to; j++) sum = round(sum + values[grouping.members[j]!]!);
      for (let j = from; j < to; j++) {
        const i = grouping.members[j]!;
        out[i] = n > 1 ? round(round(round(n * values[i]!) - sum) / (n - 1)) : 0;
      }
      continue;
    }
    if (n === 1) {
      out[grouping.members[from]!] = values[grouping.members[from]!]!;
      continue;
    }
    const mean = meanOf(values, grouping.members, from, to, dtype);
    const baseline = round(round(mean * n) / (n - 1));
    for (let j = from; j < to; j++) {
      const i = grouping.members[j]!;
      out[i] = round(round(round(values[i]! * n) / (n - 1)) - baseline);
    }
  }
  return out;
}

/**
 * REINFORCE++-baseline, sequence part: `A = r − mean_g` (never divided by the std). Whiten the token
 * values afterwards with `maskedWhiten`. A group of one gets 0 (slime: r − r) or its reward (verl: mean 0).
 */
export function reinforceBaselineAdvantages(
  rewards: ArrayLike<number>,
  options: EstimatorOptions & { singleton?: 'raw' | 'zero' | undefined },
): FloatArray {
  return grpoAdvantages(rewards, {
    ...options,
    preset: 'drGrpo',
    singleton: options.singleton ?? 'zero',
    dtype: options.dtype ?? 'float32',
  });
}

/** Dr.GRPO: GRPO without the std division (`r − mean_g`); pair it with `seq-mean-token-sum-norm`. */
export function drGrpoAdvantages(
  rewards: ArrayLike<number>,
  options: Omit<GrpoOptions, 'preset' | 'stdNormalization' | 'scale'>,
): FloatArray {
  return grpoAdvantages(rewards, { ...options, preset: 'drGrpo' });
}

/**
 * GRPO pass@k (verl `grpo_passk`): only the best sample of each group gets a non-zero advantage,
 * `r_max − r_second` (divided by `std_g + ε` with std normalization). When the top two tie the
 * advantage is 0, so which of them torch.topk names does not matter. Groups need at least two samples.
 */
export function grpoPassKAdvantages(
  rewards: ArrayLike<number>,
  options: EstimatorOptions & { stdNormalization?: boolean | undefined; epsilon?: number | undefined },
): FloatArray {
  const { values, grouping, dtype, round, out } = setup(rewards, options);
  const eps = round(options.epsilon ?? 1e-6);
  for (let g = 0; g < grouping.keys.length; g++) {
    const from = grouping.starts[g]!;
    const to = grouping.starts[g + 1]!;
    if (to - from < 2) {
      throw new ValidationError(
        'groups',
        `pass@k advantages need at least 2 samples per group; group ${JSON.stringify(grouping.keys[g])} has ${to - from}`,
      );
    }
    let best = -1;
    let second = -1;
    for (let j = from; j < to; j++) {
      const i = grouping.members[j]!;
      if (best < 0 || values[i]! > values[best]!) {
        second = best;
        best = i;
      } else if (second < 0 || values[i]! > values[second]!) {
        second = i;
      }
    }
    let advantage = round(values[best]! - values[second]!);
    if (options.stdNormalization ?? true) {
      const { std } = groupMoments(values, grouping.members, from, to, 'verl', dtype);
      advantage = round(advantage / round(std + eps));
    }
    out[best] = advantage;
  }
  return out;
}

/**
 * OPO (verl): the baseline is the length-weighted mean reward of the group, `Σ len·r / Σ len`, with
 * `len` the number of loss tokens of each response. A group of one has baseline 0; a group whose
 * responses are all empty divides 0 by 0, as verl does (NaN).
 */
export function opoAdvantages(
  rewards: ArrayLike<number>,
  lengths: ArrayLike<number>,
  options: EstimatorOptions,
): FloatArray {
  const { values, grouping, dtype, round, out } = setup(rewards, options);
  if (lengths.length !== values.length) {
    throw new ValidationError(
      'lengths',
      `has ${lengths.length} entries but there are ${values.length} rewards`,
    );
  }
  for (let i = 0; i < lengths.length; i++) {
    if (!(Number.isInteger(lengths[i]) && lengths[i]! >= 0)) {
      throw new ValidationError(
        `lengths[${i}]`,
        `must be a non-negative integer, found ${describeValue(lengths[i])}`,
      );
    }
  }
  for (let g = 0; g < grouping.keys.length; g++) {
    const from = grouping.starts[g]!;
    const to = grouping.starts[g + 1]!;
    const weighted = allocate(dtype, to - from);
    let total = 0;
    for (let j = from; j < to; j++) {
      const i = grouping.members[j]!;
      weighted[j - from] = round(lengths[i]! * values[i]!);
      total += lengths[i]!;
    }
    const sum = dtype === 'float32' ? torchSumF32(weighted) : sumF64(weighted);
    const baseline = to - from === 1 ? 0 : round(sum / total);
    for (let j = from; j < to; j++) {
      const i = grouping.members[j]!;
      out[i] = round(values[i]! - baseline);
    }
  }
  return out;
}

/**
 * GPG (verl): `A = α·(r − mean_g) / fNorm` with `α = B / max(#non-zero rewards, 1)` over the batch,
 * which rescales the gradient when most rewards are zero. A group of one has mean 0. verl computes α
 * as a float32 tensor even for float64 scores (and ignores its own `alpha` argument).
 */
export function gpgAdvantages(
  rewards: ArrayLike<number>,
  options: EstimatorOptions & { fNorm?: number | undefined },
): FloatArray {
  const { values, grouping, dtype, round, out } = setup(rewards, options);
  const fNorm = options.fNorm ?? 1;
  if (!(fNorm > 0)) throw new ValidationError('fNorm', `must be positive, found ${describeValue(fNorm)}`);
  let nonzero = 0;
  for (let i = 0; i < values.length; i++) if (values[i] !== 0) nonzero++;
  const alpha = f32(values.length / Math.max(nonzero, 1));
  for (let g = 0; g < grouping.keys.length; g++) {
    const from = grouping.starts[g]!;
    const to = grouping.starts[g + 1]!;
    const mean = to - from === 1 ? 0 : meanOf(values, grouping.members, from, to, dtype);
    for (let j = from; j < to; j++) {
      const i = grouping.members[j]!;
      out[i] = round(round(alpha * round(values[i]! - mean)) / fNorm);
    }
  }
  return out;
}
