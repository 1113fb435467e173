import { describeValue, ValidationError } from '@vime/core';
import { type GrpoOptions, groupMoments, grpoAdvantages, normalizeGroups } from './advantages.js';
import { allocate, type Dtype, type FloatArray, rounder } from './f32.js';
import { checkRewards, type GroupingOptions, resolveGroups } from './groups.js';
import { resolveConventions } from './presets.js';

/** The sequence-level estimators besides GRPO, as verl defines them unless noted. */

export interface EstimatorOptions extends GroupingOptions {
  dtype?: Dtype;
}

function setup(rewards: ArrayLike<number>, options: EstimatorOptions) {
  const raw = checkRewards(rewards);
  const grouping = resolveGroups(raw.length, options);
  const dtype = options.dtype ?? 'float32';
  const values = allocate(dtype, raw.length);
  values.set(raw);
  return { values, grouping, dtype, round: rounder(dtype), out: allocate(dtype, raw.length) };
}

/**
 * RLOO: each sample's baseline is the mean of the *other* samples of its group, `A = r − mean_{j≠i}`
 * (verl: `r·n/(n−1) − mean·n/(n−1)`). A group of one keeps its raw reward (`singleton: 'raw'`, verl's
 * loop version) or gets 0 (`'zero'`, verl's vectorized version).
 */
export function rlooAdvantages(
  rewards: ArrayLike<number>,
  options: EstimatorOptions & { singleton?: 'raw' | 'zero' },
): FloatArray {
  const { values, grouping, dtype, round, out } = setup(rewards, options);
  const singleton = options.singleton ?? 'raw';
  for (let g = 0; g < grouping.keys.length; g++) {
    const from = grouping.starts[g]!;
    const to = grouping.starts[g + 1]!;
    const n = to - from;
    if (n === 1) {
      const i = grouping.members[from]!;
      out[i] = singleton === 'raw' ? values[i]! : 0;
      continue;
    }
    const { mean } = groupMoments(values, grouping.members, from, to, dtype);
    const k = round(n / (n - 1));
    for (let j = from; j < to; j++) {
      const i = grouping.members[j]!;
      out[i] = round(round(values[i]! * k) - round(mean * k));
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
  options: EstimatorOptions & { singleton?: 'raw' | 'zero' },
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
 * `r_max − r_second` (divided by `std_g + ε` with std normalization). Ties go to the first sample.
 * Groups need at least two samples.
 */
export function grpoPassKAdvantages(
  rewards: ArrayLike<number>,
  options: EstimatorOptions & { stdNormalization?: boolean; epsilon?: number },
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
      const { std } = groupMoments(values, grouping.members, from, to, dtype);
      advantage = round(advantage / round(std + eps));
    }
    out[best] = advantage;
  }
  return out;
}

/**
 * OPO (verl): the baseline is the length-weighted mean reward of the group, `Σ len·r / Σ len`, with
 * `len` the number of loss tokens of each response. A group of one has baseline 0.
 */
export function opoAdvantages(
  rewards: ArrayLike<number>,
  lengths: ArrayLike<number>,
  options: EstimatorOptions,
): FloatArray {
  const { values, grouping, round, out } = setup(rewards, options);
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
    let weighted = 0;
    let total = 0;
    for (let j = from; j < to; j++) {
      const i = grouping.members[j]!;
      weighted += lengths[i]! * values[i]!;
      total += lengths[i]!;
    }
    const baseline = to - from === 1 ? 0 : total > 0 ? round(weighted / total) : 0;
    for (let j = from; j < to; j++) {
      const i = grouping.members[j]!;
      out[i] = round(values[i]! - baseline);
    }
  }
  return out;
}

/**
 * GPG (verl): `A = α·(r − mean_g) / fNorm` with `α = B / max(#non-zero rewards, 1)` over the batch,
 * which rescales the gradient when most rewards are zero. A group of one has mean 0.
 */
export function gpgAdvantages(
  rewards: ArrayLike<number>,
  options: EstimatorOptions & { fNorm?: number },
): FloatArray {
  const { values, grouping, dtype, round, out } = setup(rewards, options);
  const fNorm = options.fNorm ?? 1;
  if (!(fNorm > 0)) throw new ValidationError('fNorm', `must be positive, found ${describeValue(fNorm)}`);
  let nonzero = 0;
  for (let i = 0; i < values.length; i++) if (values[i] !== 0) nonzero++;
  const alpha = round(values.length / Math.max(nonzero, 1));
  for (let g = 0; g < grouping.keys.length; g++) {
    const from = grouping.starts[g]!;
    const to = grouping.starts[g + 1]!;
    const mean = to - from === 1 ? 0 : groupMoments(values, grouping.members, from, to, dtype).mean;
    for (let j = from; j < to; j++) {
      const i = grouping.members[j]!;
      out[i] = round(round(alpha * round(values[i]! - mean)) / fNorm);
    }
  }
  return out;
}

export interface MultiRewardOptions extends GrpoOptions {
  /** One weight per reward function (default all 1). */
  weights?: ArrayLike<number>;
}

/** Validate `[F][B]` rewards (NaN = that function does not score that sample) and weights. */
function checkMulti(
  rewardsPerFunc: ReadonlyArray<ArrayLike<number>>,
  weights: ArrayLike<number> | undefined,
) {
  if (!Array.isArray(rewardsPerFunc) || rewardsPerFunc.length === 0) {
    throw new ValidationError(
      'rewardsPerFunc',
      `expected one reward array per reward function, found ${describeValue(rewardsPerFunc)}`,
    );
  }
  const B = rewardsPerFunc[0]!.length;
  rewardsPerFunc.forEach((r, f) => {
    if (r.length !== B) {
      throw new ValidationError(
        `rewardsPerFunc[${f}]`,
        `has ${r.length} rewards but rewardsPerFunc[0] has ${B}; every function scores every sample (NaN for none)`,
      );
    }
  });
  const w = weights ?? Array.from({ length: rewardsPerFunc.length }, () => 1);
  if (w.length !== rewardsPerFunc.length) {
    throw new ValidationError(
      'weights',
      `has ${w.length} entries for ${rewardsPerFunc.length} reward functions`,
    );
  }
  return { B, w };
}

/**
 * Multi-reward, TRL's default `sum_then_normalize`: the weighted sum of the reward functions (NaN
 * entries skipped) per sample, then GRPO group normalization of that sum.
 */
export function sumThenNormalize(
  rewardsPerFunc: ReadonlyArray<ArrayLike<number>>,
  options: MultiRewardOptions,
): FloatArray {
  const { B, w } = checkMulti(rewardsPerFunc, options.weights);
  const total = new Float64Array(B);
  for (let i = 0; i < B; i++) {
    let any = false;
    for (let f = 0; f < rewardsPerFunc.length; f++) {
      const r = rewardsPerFunc[f]![i]!;
      if (Number.isNaN(r)) continue;
      total[i] = total[i]! + w[f]! * r;
      any = true;
    }
    if (!any)
      throw new ValidationError(
        `rewardsPerFunc[*][${i}]`,
        'no reward function scored this sample (all NaN); drop the sample',
      );
  }
  const { weights: _, ...rest } = options;
  return grpoAdvantages(total, { preset: 'trl', ...rest });
}

/**
 * Multi-reward, TRL's `normalize_then_sum` (GDPO): normalize each reward function within its groups,
 * take the weighted sum, then normalize that over the whole batch: `(x − mean)/(std + ε)`. Every
 * function must score every sample here (no NaN).
 */
export function normalizeThenSum(
  rewardsPerFunc: ReadonlyArray<ArrayLike<number>>,
  options: MultiRewardOptions,
): FloatArray {
  const { B, w } = checkMulti(rewardsPerFunc, options.weights);
  const { weights: _, ...rest } = options;
  const c = resolveConventions({ preset: 'trl', ...rest });
  const grouping = resolveGroups(B, rest);
  const sum = new Float64Array(B);
  rewardsPerFunc.forEach((r, f) => {
    const normalized = normalizeGroups(checkRewards(r, `rewardsPerFunc[${f}]`), grouping, c);
    for (let i = 0; i < B; i++) sum[i] = sum[i]! + w[f]! * normalized[i]!;
  });
  const all = { groupSize: B };
  return normalizeGroups(sum, resolveGroups(B, all), { ...c, scale: 'group', stdNormalization: true });
}
