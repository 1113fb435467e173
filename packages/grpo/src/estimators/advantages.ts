import { ValidationError } from '@vime/core';
import { allocate, type FloatArray, f32 } from './f32.js';
import { checkRewards, type Grouping, type GroupingOptions, resolveGroups } from './groups.js';
import { groupMoments } from './moments.js';
import { type ConventionOptions, type Conventions, resolveConventions } from './presets.js';

/** Options of `grpoAdvantages`: how samples are grouped and the trainer's conventions. */
export interface GrpoOptions extends GroupingOptions, ConventionOptions {}

/** Std of every reward in the batch (TRL `scale_rewards="batch"`: one 1-D `nanstd`). */
function batchStd(values: FloatArray, c: Conventions): number {
  const all = Int32Array.from({ length: values.length }, (_, i) => i);
  const correction = c.std === 'unbiased' ? 1 : 0;
  return groupMoments(values, all, 0, values.length, c.moments, c.dtype, { correction, groupsInCall: 1 }).std;
}

/**
 * GRPO advantages, one per sample: `(r − mean_g) / (std_g + ε)` (or `r − mean_g` without std
 * normalization), with the conventions of the chosen trainer `preset` (slime by default) and any
 * explicit option on top. Groups come from `groups` keys or `groupSize` blocks; uneven groups are an
 * error unless `allowUnevenGroups` is set.
 *
 * ```ts
 * grpoAdvantages([1, 0, 0, 0], { groupSize: 4 }) // Float32Array [1.4999970, -0.4999990, …]
 * ```
 */
export function grpoAdvantages(rewards: ArrayLike<number>, options: GrpoOptions): FloatArray {
  const c = resolveConventions(options);
  const raw = checkRewards(rewards);
  const grouping = resolveGroups(raw.length, options);
  return normalizeGroups(raw, grouping, c);
}

/**
 * Group normalization with resolved conventions (shared by the estimators and the trainer check).
 * A group whose rewards are all equal gets exactly 0. torch does not guarantee that in float32: the
 * mean of e.g. twelve 0.7s is not exactly 0.7, and slime then hands every sample +0.119. The trainer
 * check sets `trainerResidual` to reproduce that value.
 */
export function normalizeGroups(
  raw: ArrayLike<number>,
  grouping: Grouping,
  c: Conventions,
  options: { trainerResidual?: boolean | undefined } = {},
): FloatArray {
  const n = raw.length;
  const values = allocate(c.dtype, n);
  values.set(raw);
  const out = allocate(c.dtype, n);
  const round = c.dtype === 'float32' ? f32 : (x: number) => x;
  const eps = round(c.epsilon);
  const batchScale = c.scale === 'batch' ? batchStd(values, c) : Number.NaN;
  const { starts, members, keys } = grouping;
  const correction = c.std === 'unbiased' ? 1 : 0;
  // verl's std tensors are float32 whatever the scores' dtype: its singleton std (1) and the
  // vectorized group std, so their `std + ε` is a float32 sum.
  const oneEps = f32(1 + f32(c.epsilon));
  const f32Denominator = c.moments === 'verlVectorized' && c.scale === 'group';
  for (let g = 0; g < keys.length; g++) {
    const from = starts[g]!;
    const to = starts[g + 1]!;
    if (to - from === 1) {
      const i = members[from]!;
      switch (c.singleton) {
        case 'zero':
          out[i] = 0;
          break;
        case 'raw':
          // verl: a lone sample gets mean 0 and std 1.
          out[i] = c.scale === 'none' ? values[i]! : round(values[i]! / oneEps);
          break;
        case 'error':
          throw new ValidationError(
            `groups[${i}]`,
            `group ${JSON.stringify(keys[g])} has a single sample, so it has no baseline; sample more than one response per prompt or choose singleton: 'zero' | 'raw'`,
          );
      }
      continue;
    }
    if (!options.trainerResidual && isUniform(values, members, from, to)) {
      for (let j = from; j < to; j++) out[members[j]!] = 0;
      continue;
    }
    const { mean, std } = groupMoments(values, members, from, to, c.moments, c.dtype, {
      correction,
      groupsInCall: keys.length,
      varianceFloor: c.epsilon,
    });
    const scale = c.scale === 'group' ? std : batchScale;
    const denom = f32Denominator ? f32(scale + f32(c.epsilon)) : round(scale + eps);
    for (let j = from; j < to; j++) {
      const i = members[j]!;
      const centered = round(values[i]! - mean);
      out[i] = c.scale === 'none' ? centered : round(centered / denom);
    }
  }
  return out;
}

/** Whether `values` are equal at every index `members[from..to)`. */
export function isUniform(
  values: ArrayLike<number>,
  members: ArrayLike<number>,
  from: number,
  to: number,
): boolean {
  const first = values[members[from]!];
  for (let j = from + 1; j < to; j++) if (values[members[j]!] !== first) return false;
  return true;
}

/** One group of a batch: its key, members and reward statistics. */
export interface GroupReport {
  key: number | string;
  /** Sample indices in this group. */
  members: number[];
  size: number;
  mean: number;
  /** The trainer's std (unbiased unless `std: 'biased'`): NaN for a group of one, 1 under `verlVectorized`. */
  std: number;
  /** The group's rewards are (within `zeroVarianceTolerance`) all equal: every advantage is 0. */
  zeroVariance: boolean;
}

/** Per-group reward statistics of a batch, and its zero-variance groups. */
export interface GroupStatistics {
  groups: GroupReport[];
  /** Keys of the zero-variance groups: they carry no learning signal. */
  zeroVarianceGroups: Array<number | string>;
  /** Fraction of samples in zero-variance groups. */
  zeroVarianceFraction: number;
}

/**
 * Per-group statistics of a batch: sizes, means, stds, and which groups have (near) zero variance, i.e.
 * contribute no gradient under GRPO. `zeroVarianceTolerance` (default 1e-6) compares the std.
 */
export function groupStatistics(
  rewards: ArrayLike<number>,
  options: GrpoOptions & { zeroVarianceTolerance?: number | undefined },
): GroupStatistics {
  const c = resolveConventions(options);
  const raw = checkRewards(rewards);
  const grouping = resolveGroups(raw.length, options);
  const tolerance = options.zeroVarianceTolerance ?? 1e-6;
  const values = allocate(c.dtype, raw.length);
  values.set(raw);
  const groups: GroupReport[] = [];
  let zeroSamples = 0;
  for (let g = 0; g < grouping.keys.length; g++) {
    const from = grouping.starts[g]!;
    const to = grouping.starts[g + 1]!;
    const m = groupMoments(values, grouping.members, from, to, c.moments, c.dtype, {
      correction: c.std === 'unbiased' ? 1 : 0,
      groupsInCall: grouping.keys.length,
      varianceFloor: c.epsilon,
    });
    const size = to - from;
    const zeroVariance = size > 1 && m.std <= tolerance;
    if (zeroVariance) zeroSamples += size;
    groups.push({
      key: grouping.keys[g]!,
      members: Array.from(grouping.members.subarray(from, to)),
      size,
      mean: m.mean,
      std: m.std,
      zeroVariance,
    });
  }
  return {
    groups,
    zeroVarianceGroups: groups.filter((g) => g.zeroVariance).map((g) => g.key),
    zeroVarianceFraction: zeroSamples / raw.length,
  };
}
