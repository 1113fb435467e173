import { type Dtype, f32, torchStdAllF32, torchStdWelfordF32, torchSumF32 } from './f32.js';

/**
 * How each trainer computes a group's mean and std. They differ in the last float32 bits (and more
 * for large offsets or tiny spreads), so each is reproduced as the trainer's own torch calls do it:
 * - `slime`: `R - R.mean(-1)` in float32, then `torch.std` of the centred values;
 * - `verl`: `torch.mean` / `torch.std` of each group's 1-D tensor (the float32 mean, then `Σ(x − mean)²` in float64);
 * - `verlVectorized`: `verl/utils/groupwise.py` one-pass float32 sums (`index_add_`), variance floored at ε;
 * - `trl`: `nanmean` and TRL's two-pass float32 `nanstd` (NaN entries skipped);
 * - `openrlhf`: `rewards.mean(-1)` / `rewards.std(-1)` of the `[prompts, n]` matrix (float64 Welford).
 */
export type MomentsKind = 'slime' | 'verl' | 'verlVectorized' | 'trl' | 'openrlhf';
/** Every way of computing a group's mean and std that a trainer uses. */
export const MOMENTS_KINDS = [
  'slime',
  'verl',
  'verlVectorized',
  'trl',
  'openrlhf',
] as const satisfies readonly MomentsKind[];

/** A group's mean and std. */
export interface Moments {
  mean: number;
  /** `NaN` where the trainer's std is undefined (one value with Bessel's correction). */
  std: number;
}

/** Options of computing a group's moments. */
export interface MomentsOptions {
  /** Bessel's correction: 1 (unbiased, every trainer) or 0. */
  correction?: number | undefined;
  /** How many groups the trainer reduces in the same call: torch takes another kernel for a single output. */
  groupsInCall?: number | undefined;
  /** `verlVectorized`: the variance floor (verl passes its ε, 1e-6). */
  varianceFloor?: number | undefined;
}

let scratch = new Float32Array(64);

/** The group's values gathered into a float32 scratch buffer (reused: groups are small). */
function gather(values: ArrayLike<number>, members: ArrayLike<number>, from: number, to: number) {
  const n = to - from;
  if (scratch.length < n) scratch = new Float32Array(n * 2);
  for (let j = 0; j < n; j++) scratch[j] = values[members[from + j]!]!;
  return scratch;
}

/** Mean and std of `values[members[from..to)]` as the trainer `kind` computes them in `dtype`. */
export function groupMoments(
  values: ArrayLike<number>,
  members: ArrayLike<number>,
  from: number,
  to: number,
  kind: MomentsKind,
  dtype: Dtype,
  options: MomentsOptions = {},
): Moments {
  const { correction = 1, groupsInCall = 2, varianceFloor = 1e-6 } = options;
  const n = to - from;
  // groupwise.py casts to float32 whatever the scores' dtype.
  if (kind === 'verlVectorized') return onePass(values, members, from, to, varianceFloor, correction);
  if (dtype === 'float64') return float64Moments(values, members, from, to, kind, correction);
  const x = gather(values, members, from, to);
  if (kind === 'trl') return nanMoments(x, n, correction);
  const mean = f32(torchSumF32(x, 0, n) / n);
  if (kind === 'verl') return { mean, std: torchStdAllF32(x, 0, n, correction, mean) };
  if (kind === 'openrlhf') {
    const std =
      groupsInCall === 1
        ? torchStdAllF32(x, 0, n, correction)
        : torchStdWelfordF32((j) => x[j]!, n, correction);
    return { mean, std };
  }
  // slime: the std of the centred float32 values.
  for (let j = 0; j < n; j++) x[j] = f32(x[j]! - mean);
  const std =
    groupsInCall === 1
      ? torchStdAllF32(x, 0, n, correction)
      : torchStdWelfordF32((j) => x[j]!, n, correction);
  return { mean, std };
}

/** verl `group_mean_std`: float32 `index_add_` sums (in sample order), `sqrt(max(var, floor))`; one sample: mean 0, std 1. */
function onePass(
  values: ArrayLike<number>,
  members: ArrayLike<number>,
  from: number,
  to: number,
  floor: number,
  correction: number,
): Moments {
  const count = to - from;
  if (count <= 1) return { mean: 0, std: 1 };
  let s1 = 0;
  let s2 = 0;
  for (let j = from; j < to; j++) {
    const v = f32(values[members[j]!]!);
    s1 = f32(s1 + v);
    s2 = f32(s2 + f32(v * v));
  }
  const mean = f32(s1 / count);
  const varNum = f32(s2 - f32(f32(s1 * s1) / count));
  const variance = f32(varNum / Math.max(count - correction, 1));
  return { mean, std: f32(Math.sqrt(Math.max(variance, f32(floor)))) };
}

/** TRL: `torch.nanmean`, then `nanstd` = sqrt(nanmean((x − mean)²) · count/(count − 1)), all float32. */
function nanMoments(x: Float32Array, n: number, correction: number): Moments {
  let count = 0;
  for (let j = 0; j < n; j++) if (!Number.isNaN(x[j]!)) count++;
  const sum = torchSumF32(
    nanToZero(x, n, (v) => v),
    0,
    n,
  );
  const mean = f32(sum / count);
  const squares = nanToZero(x, n, (v) => {
    const d = f32(v - mean);
    return f32(d * d);
  });
  const variance = f32(torchSumF32(squares, 0, n) / count);
  const factor = count > correction ? f32(count / (count - correction)) : Number.NaN;
  return { mean, std: f32(Math.sqrt(f32(variance * factor))) };
}

let nanScratch = new Float32Array(64);

function nanToZero(x: Float32Array, n: number, map: (v: number) => number): Float32Array {
  if (nanScratch.length < n) nanScratch = new Float32Array(n * 2);
  for (let j = 0; j < n; j++) nanScratch[j] = Number.isNaN(x[j]!) ? 0 : map(x[j]!);
  return nanScratch;
}

/** Plain float64 moments (NaN entries skipped for TRL); the slime kind takes the std of the centred values. */
function float64Moments(
  values: ArrayLike<number>,
  members: ArrayLike<number>,
  from: number,
  to: number,
  kind: MomentsKind,
  correction: number,
): Moments {
  let sum = 0;
  let count = 0;
  for (let j = from; j < to; j++) {
    const v = values[members[j]!]!;
    if (Number.isNaN(v)) continue;
    sum += v;
    count++;
  }
  const mean = sum / count;
  let ss = 0;
  for (let j = from; j < to; j++) {
    const v = values[members[j]!]!;
    if (Number.isNaN(v)) continue;
    ss += (v - mean) ** 2;
  }
  const std = count > correction ? Math.sqrt(ss / (count - correction)) : Number.NaN;
  return { mean, std: kind === 'trl' && count <= 1 ? Number.NaN : std };
}
