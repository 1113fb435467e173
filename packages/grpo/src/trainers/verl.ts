import { ConfigError, describeValue, ValidationError } from '@vime/core';
import { normalizeGroups } from '../estimators/advantages.js';
import {
  gpgAdvantages,
  grpoPassKAdvantages,
  opoAdvantages,
  rlooAdvantages,
} from '../estimators/estimators.js';
import {
  allocate,
  type Dtype,
  type FloatArray,
  f32,
  rounder,
  sumF64,
  torchOuterSumF32,
} from '../estimators/f32.js';
import { type Grouping, resolveGroups } from '../estimators/groups.js';
import { resolveConventions } from '../estimators/presets.js';
import {
  maskCounts,
  type PaddedLayout,
  pad,
  paddedLayout,
  padMask,
  rowSums,
  torchSum,
  unpad,
} from '../tokens/padded.js';
import type { LossMasks } from '../tokens/tokens.js';

/**
 * volcengine/verl's advantage estimators (`verl/trainer/ppo/core_algos.py`, every registered one) on
 * verl's right-padded `[B, T]` layout, in float32 or float64 like the trainer's tensors, and the
 * dispatch of `ray_trainer.compute_advantage` (which arguments each estimator really receives).
 */

export type VerlEstimator =
  | 'gae'
  | 'grpo'
  | 'grpo_vectorized'
  | 'grpo_passk'
  | 'reinforce_plus_plus'
  | 'reinforce_plus_plus_baseline'
  | 'remax'
  | 'rloo'
  | 'rloo_vectorized'
  | 'opo'
  | 'gpg'
  | 'optimal_token_baseline'
  | 'tir_optimal_token_baseline';
/** Every verl advantage estimator reproduced here. */
export const VERL_ESTIMATORS = [
  'gae',
  'grpo',
  'grpo_vectorized',
  'grpo_passk',
  'reinforce_plus_plus',
  'reinforce_plus_plus_baseline',
  'remax',
  'rloo',
  'rloo_vectorized',
  'opo',
  'gpg',
  'optimal_token_baseline',
  'tir_optimal_token_baseline',
] as const satisfies readonly VerlEstimator[];

/** What verl's advantage computation takes: token-level rewards or scores, masks and group ids. */
export interface VerlAdvantageInput {
  /** `token_level_rewards`, flat over the responses. Or pass `scores`. */
  tokenLevelRewards?: ArrayLike<number> | undefined;
  /** One score per response, placed on its last token (verl's reward manager). */
  scores?: ArrayLike<number> | undefined;
  responseLengths: ArrayLike<number>;
  /** `response_mask` (0 on observation tokens and after EOS). */
  lossMasks: LossMasks;
  /** `uid` per response: responses with the same uid form a group. */
  index?: ArrayLike<number | string> | undefined;
  /** Critic values (`gae`). */
  values?: ArrayLike<number> | undefined;
  /** Greedy-rollout rewards, one per response (`remax`). */
  rewardBaselines?: ArrayLike<number> | undefined;
  /** Old-policy log-probs and `Σπ²` per token (optimal token baselines). */
  oldLogProbs?: ArrayLike<number> | undefined;
  sumPiSquared?: ArrayLike<number> | undefined;
  rolloutIsWeights?: ArrayLike<number> | undefined;
  /** The trainer's response dimension T (default: the longest response). */
  paddedLength?: number | undefined;
  dtype?: Dtype | undefined;
}

/** Options of `verlAdvantages`: the estimator and verl's settings. */
export interface VerlAdvantageOptions {
  estimator: VerlEstimator;
  /** `algorithm.gamma` / `algorithm.lam` (default 1). */
  gamma?: number | undefined;
  lam?: number | undefined;
  /** `algorithm.norm_adv_by_std_in_grpo` (default true). */
  normAdvByStdInGrpo?: boolean | undefined;
  /** The estimators' ε (default 1e-6; 1e-8 for the optimal token baselines). Not reachable from verl's config. */
  epsilon?: number | undefined;
  /** GPG's `f_norm` (default 1). */
  fNorm?: number | undefined;
  /** Optimal token baselines: zero the tail of a group's single longest response. */
  handleZeroTail?: boolean | undefined;
  /**
   * `'trainer'` (default): pass what `ray_trainer.compute_advantage` passes. It hands
   * `norm_adv_by_std_in_grpo` only to `grpo` (and `grpo_passk` reads it from the config), so
   * `grpo_vectorized` always divides by the std; `gamma` reaches `gae` and `reinforce_plus_plus` only;
   * and the optimal token baselines fail (they receive `config` and no `old_log_probs`).
   * `'function'`: call the estimator with every option given.
   */
  call?: 'trainer' | 'function' | undefined;
}

/** Per-token advantages and returns, as verl computes them. */
export interface VerlAdvantages {
  /** Flat per-token advantages (use `splitTokens` for per-response views). */
  advantages: FloatArray;
  returns: FloatArray;
}

/** Advantages and returns exactly as verl's `compute_advantage` computes them. */
export function verlAdvantages(input: VerlAdvantageInput, options: VerlAdvantageOptions): VerlAdvantages {
  const { estimator, call = 'trainer' } = options;
  if (!VERL_ESTIMATORS.includes(estimator)) {
    throw new ConfigError(
      `estimator: unknown ${JSON.stringify(estimator)}; use one of ${VERL_ESTIMATORS.join(', ')}`,
    );
  }
  if (call !== 'trainer' && call !== 'function') {
    throw new ConfigError(`call: must be 'trainer' or 'function', found ${JSON.stringify(call)}`);
  }
  const trainer = call === 'trainer';
  if (trainer && estimator.endsWith('optimal_token_baseline')) {
    throw new ConfigError(
      `estimator: verl's ray_trainer.compute_advantage calls ${estimator} with config= and without old_log_probs, which raises TypeError at this verl version; pass call: 'function' to compute it`,
    );
  }
  const n = input.scores?.length ?? input.index?.length ?? input.responseLengths.length;
  const dtype = input.dtype ?? 'float32';
  const layout = paddedLayout(input.responseLengths, input.lossMasks, {
    paddedLength: input.paddedLength,
    dtype,
    count: n,
  });
  const rewards = tokenRewards(input, layout);
  const mask = padMask(layout);
  const norm =
    trainer && !['grpo', 'grpo_passk'].includes(estimator) ? true : (options.normAdvByStdInGrpo ?? true);
  const gamma = trainer && !['gae', 'reinforce_plus_plus'].includes(estimator) ? 1 : (options.gamma ?? 1);
  const epsilon = trainer ? undefined : options.epsilon;
  const r = rounder(dtype);
  const perSample = (values: ArrayLike<number>) => broadcast(layout, values);
  const scores = () => rowSums(layout, rewards);
  const groups = () => grouping(input.index, n);
  switch (estimator) {
    case 'gae':
      return verlGae(
        layout,
        rewards,
        pad(layout, required(input.values, 'values'), 'values'),
        mask,
        gamma,
        options.lam ?? 1,
      );
    case 'grpo':
    case 'grpo_vectorized': {
      const preset = estimator === 'grpo' ? 'verl' : 'verlVectorized';
      const c = resolveConventions({
        preset,
        stdNormalization: norm,
        dtype,
        epsilon,
      });
      const g = estimator === 'grpo' ? groups() : vectorizedGrouping(required(input.index, 'index'));
      return sameAsReturns(perSample(normalizeGroups(scores(), g, c, { trainerResidual: true })));
    }
    case 'grpo_passk':
      return sameAsReturns(
        perSample(
          grpoPassKAdvantages(scores(), {
            ...groupOptions(input.index),
            stdNormalization: norm,
            dtype,
            epsilon,
          }),
        ),
      );
    case 'rloo':
    case 'rloo_vectorized':
      return sameAsReturns(
        perSample(
          rlooAdvantages(scores(), {
            ...groupOptions(input.index),
            dtype,
            vectorized: estimator === 'rloo_vectorized',
          }),
        ),
      );
    case 'opo':
      return sameAsReturns(
        perSample(opoAdvantages(scores(), maskCounts(layout), { ...groupOptions(input.index), dtype })),
      );
    case 'gpg':
      return sameAsReturns(
        perSample(
          gpgAdvantages(scores(), {
            ...groupOptions(input.index),
            dtype,
            fNorm: trainer ? 1 : (options.fNorm ?? 1),
          }),
        ),
      );
    case 'reinforce_plus_plus_baseline': {
      const c = resolveConventions({ preset: 'verl', stdNormalization: false, dtype });
      // Tiled over the whole padded row, times the mask, whitened over the batch, times the mask.
      const centred = pad(
        layout,
        perSample(normalizeGroups(scores(), groups(), c, { trainerResidual: true })),
        'scores',
      );
      const whitened = verlMaskedWhiten(centred, mask, dtype).map((v, k) => r(v * mask[k]!));
      return sameAsReturns(whitened, layout);
    }
    case 'reinforce_plus_plus': {
      const returns = allocate(dtype, rewards.length);
      const g = r(gamma);
      for (let i = 0; i < layout.rows; i++) {
        let running = 0;
        for (let t = layout.width - 1; t >= 0; t--) {
          const k = i * layout.width + t;
          running = r(rewards[k]! + r(g * running));
          returns[k] = running;
          running = r(running * mask[k]!);
        }
      }
      const advantages = verlMaskedWhiten(returns, mask, dtype).map((v, k) => r(v * mask[k]!));
      return { advantages: unpad(layout, advantages), returns: unpad(layout, returns) };
    }
    case 'remax': {
      const baselines = required(input.rewardBaselines, 'rewardBaselines');
      if (baselines.length !== layout.rows) {
        throw new ValidationError(
          'rewardBaselines',
          `has ${baselines.length} entries for ${layout.rows} responses`,
        );
      }
      const returns = reverseCumsum(
        layout,
        rewards.map((v, k) => r(v * mask[k]!)),
      );
      const advantages = returns.map((v, k) =>
        r(v - r(r(baselines[Math.floor(k / layout.width)]!) * mask[k]!)),
      );
      return { advantages: unpad(layout, advantages), returns: unpad(layout, returns) };
    }
    default:
      return optimalTokenBaseline(input, options, layout, rewards, mask);
  }
}

/** The estimators whose returns are their advantages (back on the flat layout when given a padded one). */
function sameAsReturns(advantages: FloatArray, layout?: PaddedLayout): VerlAdvantages {
  const flat = layout ? unpad(layout, advantages) : advantages;
  return { advantages: flat, returns: flat };
}

/** Padded token rewards: the given ones, or each score on its response's last token. */
function tokenRewards(input: VerlAdvantageInput, layout: PaddedLayout): FloatArray {
  if (input.tokenLevelRewards) return pad(layout, input.tokenLevelRewards, 'tokenLevelRewards');
  const scores = required(input.scores, 'scores');
  if (scores.length !== layout.rows) {
    throw new ValidationError('scores', `has ${scores.length} entries for ${layout.rows} responses`);
  }
  const out = allocate(layout.dtype, layout.rows * layout.width);
  for (let i = 0; i < layout.rows; i++) {
    const len = layout.offsets[i + 1]! - layout.offsets[i]!;
    if (len === 0)
      throw new ValidationError(`responseLengths[${i}]`, 'is 0: there is no token to put the score on');
    out[i * layout.width + len - 1] = scores[i]!;
  }
  return out;
}

/** `scalar.unsqueeze(-1) * response_mask`, back on the flat layout (−0 kept where verl makes it). */
function broadcast(layout: PaddedLayout, perSample: ArrayLike<number>): FloatArray {
  const r = rounder(layout.dtype);
  const out = allocate(layout.dtype, layout.offsets[layout.rows]!);
  for (let i = 0; i < layout.rows; i++) {
    for (let t = layout.offsets[i]!; t < layout.offsets[i + 1]!; t++)
      out[t] = r(perSample[i]! * layout.mask[t]!);
  }
  return out;
}

function groupOptions(index: ArrayLike<number | string> | undefined) {
  return { groups: required(index, 'index'), allowUnevenGroups: true };
}

function grouping(index: ArrayLike<number | string> | undefined, n: number): Grouping {
  return resolveGroups(n, groupOptions(index), 'responses');
}

/**
 * verl `as_torch_index`: group labels to ids 0..G−1: integers as they are, floats within 1e-6 of an
 * integer rounded, numeric strings parsed, anything else numbered in sorted order. So `grpo_vectorized`
 * groups `2.0` with `2.0000001` and `"01"` with `"1"`, where the loop estimators compare labels exactly.
 */
export function asTorchIndex(index: ArrayLike<number | string>): Int32Array {
  const labels = Array.from(index);
  const n = labels.length;
  if (labels.every((v) => typeof v === 'number')) {
    const nums = labels as number[];
    if (nums.every(Number.isInteger)) return checkIds(Int32Array.from(nums));
    if (nums.every((v) => Math.abs(v - roundHalfEven(v)) <= 1e-6))
      return checkIds(Int32Array.from(nums, roundHalfEven));
    return sortedIds(nums, (a, b) => a - b);
  }
  if (labels.every((v) => typeof v === 'string' && /^\s*[+-]?\d+\s*$/.test(v))) {
    return checkIds(Int32Array.from(labels as string[], (s) => Number.parseInt(s, 10)));
  }
  const text = labels.map(String);
  const ids = sortedIds(text, (a, b) => (a < b ? -1 : a > b ? 1 : 0));
  if (ids.length !== n) throw new ValidationError('index', 'could not number the group labels');
  return ids;
}

function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

function checkIds(ids: Int32Array): Int32Array {
  ids.forEach((id, i) => {
    if (id < 0) throw new ValidationError(`index[${i}]`, `is ${id}; verl's index_add_ needs group ids ≥ 0`);
  });
  return ids;
}

function sortedIds<T>(labels: T[], compare: (a: T, b: T) => number): Int32Array {
  const unique = [...new Set(labels)].sort(compare);
  const id = new Map(unique.map((u, k) => [u, k]));
  return Int32Array.from(labels, (l) => id.get(l)!);
}

function vectorizedGrouping(index: ArrayLike<number | string>): Grouping {
  const ids = asTorchIndex(index);
  return resolveGroups(ids.length, { groups: ids, allowUnevenGroups: true }, 'responses');
}

/** Per-group statistics of verl's vectorized estimators. */
export interface VerlGroupStats {
  /** Group id of each response (`as_torch_index`). */
  gidx: Int32Array;
  mean: Float32Array;
  std: Float32Array;
  count: Float32Array;
}

/** verl `group_mean_std` (`verl/utils/groupwise.py`): per group id 0..G−1 (empty ids get mean 0, std 1). */
export function verlGroupMeanStd(
  scores: ArrayLike<number>,
  index: ArrayLike<number | string>,
  options: { eps?: number | undefined } = {},
): VerlGroupStats {
  const gidx = asTorchIndex(index);
  if (gidx.length !== scores.length) {
    throw new ValidationError('index', `has ${gidx.length} labels for ${scores.length} scores`);
  }
  const G = gidx.length ? Math.max(...gidx) + 1 : 0;
  const count = new Float32Array(G);
  const s1 = new Float32Array(G);
  const s2 = new Float32Array(G);
  for (let i = 0; i < gidx.length; i++) {
    const v = f32(scores[i]!);
    count[gidx[i]!]! += 1;
    s1[gidx[i]!] = f32(s1[gidx[i]!]! + v);
    s2[gidx[i]!] = f32(s2[gidx[i]!]! + f32(v * v));
  }
  const eps = f32(options.eps ?? 1e-6);
  const mean = new Float32Array(G);
  const std = new Float32Array(G);
  for (let g = 0; g < G; g++) {
    const c = Math.max(count[g]!, 1);
    const varNum = f32(s2[g]! - f32(f32(s1[g]! * s1[g]!) / c));
    const variance = f32(varNum / Math.max(count[g]! - 1, 1));
    const single = count[g]! <= 1;
    mean[g] = single ? 0 : f32(s1[g]! / c);
    std[g] = single ? 1 : f32(Math.sqrt(Math.max(variance, eps)));
  }
  return { gidx, mean, std, count };
}

/**
 * verl `masked_whiten` on a padded batch: `masked_mean` divides by `Σm + 1e-8`, `masked_var` is the
 * two-pass variance with Bessel's correction (fewer than two tokens is an error), and every position
 * gets `(x − mean)·rsqrt(var + 1e-8)`.
 */
export function verlMaskedWhiten(
  input: ArrayLike<number>,
  mask: ArrayLike<number>,
  dtype: Dtype = 'float32',
  options: { shiftMean?: boolean | undefined } = {},
): FloatArray {
  if (mask.length !== input.length) {
    throw new ValidationError('mask', `has ${mask.length} entries but there are ${input.length} values`);
  }
  const r = rounder(dtype);
  const values = allocate(dtype, input.length);
  values.set(input);
  const masked = allocate(dtype, values.length);
  let count = 0;
  for (let k = 0; k < values.length; k++) {
    masked[k] = mask[k] ? r(values[k]! * mask[k]!) : 0;
    count += mask[k] ? 1 : 0;
  }
  if (count < 2) {
    throw new ValidationError(
      'lossMasks',
      count === 0
        ? 'every token is masked: verl masked_var needs at least one token with mask 1'
        : 'one token has mask 1: verl masked_var would divide by zero (use a larger batch)',
    );
  }
  // `mask.sum() + 1e-8` is a float32 tensor (integer mask) whatever the values' dtype.
  const denominator = f32(count + 1e-8);
  const mean = r(torchSum(masked, dtype) / denominator);
  const squares = allocate(dtype, values.length);
  for (let k = 0; k < values.length; k++) {
    const d = r(values[k]! - mean);
    squares[k] = mask[k] ? r(r(d * d) * mask[k]!) : 0;
  }
  let variance = r(torchSum(squares, dtype) / denominator);
  // Bessel's factor: an integer tensor divided by one, float32.
  variance = r(variance * f32(count / (count - 1)));
  const rstd = r(1 / r(Math.sqrt(r(variance + r(1e-8)))));
  const out = allocate(dtype, values.length);
  for (let k = 0; k < values.length; k++) {
    const w = r(r(values[k]! - mean) * rstd);
    out[k] = options.shiftMean === false ? r(w + mean) : w;
  }
  return out;
}

/** verl GAE: observation tokens (mask 0) pass the next value and advantage through; then `masked_whiten`. */
function verlGae(
  layout: PaddedLayout,
  rewards: FloatArray,
  values: FloatArray,
  mask: FloatArray,
  gamma: number,
  lam: number,
): VerlAdvantages {
  const { dtype, rows, width } = layout;
  const r = rounder(dtype);
  const g = r(gamma);
  const gl = r(gamma * lam);
  const raw = allocate(dtype, rows * width);
  for (let i = 0; i < rows; i++) {
    let next = 0;
    let last = 0;
    for (let t = width - 1; t >= 0; t--) {
      const k = i * width + t;
      const m = mask[k]!;
      const delta = r(r(rewards[k]! + r(g * next)) - values[k]!);
      const candidate = r(delta + r(gl * last));
      next = r(r(values[k]! * m) + r((1 - m) * next));
      last = r(r(candidate * m) + r((1 - m) * last));
      raw[k] = last;
    }
  }
  const returns = raw.map((a, k) => r(a + values[k]!));
  return { advantages: unpad(layout, verlMaskedWhiten(raw, mask, dtype)), returns: unpad(layout, returns) };
}

/** `x.flip(-1).cumsum(-1).flip(-1)` per row: torch's CPU cumsum accumulates in float64. */
function reverseCumsum(layout: PaddedLayout, x: FloatArray): FloatArray {
  const r = rounder(layout.dtype);
  const out = allocate(layout.dtype, x.length);
  for (let i = 0; i < layout.rows; i++) {
    let acc = 0;
    for (let t = layout.width - 1; t >= 0; t--) {
      acc += x[i * layout.width + t]!;
      out[i * layout.width + t] = r(acc);
    }
  }
  return out;
}

/** The optimal token baselines (`optimal_token_baseline`, `tir_optimal_token_baseline`). */
function optimalTokenBaseline(
  input: VerlAdvantageInput,
  options: VerlAdvantageOptions,
  layout: PaddedLayout,
  rewards: FloatArray,
  mask: FloatArray,
): VerlAdvantages {
  const { dtype, rows, width } = layout;
  const r = rounder(dtype);
  const tir = options.estimator === 'tir_optimal_token_baseline';
  const zeroTail = options.handleZeroTail ?? tir;
  const eps = options.epsilon ?? 1e-8;
  const returns = reverseCumsum(
    layout,
    rewards.map((v, k) => r(v * mask[k]!)),
  );
  const old = pad(layout, required(input.oldLogProbs, 'oldLogProbs'), 'oldLogProbs');
  const spp = pad(layout, required(input.sumPiSquared, 'sumPiSquared'), 'sumPiSquared');
  const isw = input.rolloutIsWeights ? pad(layout, input.rolloutIsWeights, 'rolloutIsWeights') : null;
  const w = old.map((o, k) => {
    let v = r(r(1 - r(2 * r(Math.exp(o)))) + spp[k]!);
    if (isw) v = r(v * r(isw[k]! * isw[k]!));
    return r(v * mask[k]!);
  });
  // cumsum along the row (float64 accumulator, like the reverse one).
  const wCum = allocate(dtype, w.length);
  for (let i = 0; i < rows; i++) {
    let acc = 0;
    for (let t = 0; t < width; t++) {
      acc += w[i * width + t]!;
      wCum[i * width + t] = r(acc);
    }
  }
  const index = required(input.index, 'index');
  const counts = maskCounts(layout);
  const members = new Map<number | string, number[]>();
  for (let i = 0; i < rows; i++) {
    if (tir && counts[i] === 0) continue;
    const list = members.get(index[i]!) ?? [];
    list.push(i);
    members.set(index[i]!, list);
  }
  // TIR works on each response's mask-1 tokens, compacted to the left of a [B, L_max] matrix.
  const cols = tir ? Math.max(0, ...counts) : width;
  const at = (i: number, c: number) => i * cols + c;
  const R = tir ? compact(layout, returns, cols) : returns;
  const W = tir ? compact(layout, wCum, cols) : wCum;
  const M = tir ? null : mask;
  const baselines = allocate(dtype, rows * cols);
  const sum = (get: (row: number) => number, n: number, c: number) =>
    dtype === 'float32'
      ? torchOuterSumF32(get, n, c, cols)
      : sumF64(Float64Array.from({ length: n }, (_, j) => get(j)));
  for (const group of members.values()) {
    const N = group.length;
    if (N === 1) continue;
    for (let c = 0; c < cols; c++) {
      const m = (j: number) => (M ? M[at(group[j]!, c)]! : 1);
      const num = sum((j) => r(r(R[at(group[j]!, c)]! * W[at(group[j]!, c)]!) * m(j)), N, c);
      const den = r(sum((j) => r(W[at(group[j]!, c)]! * m(j)), N, c) + r(eps));
      const b = r(num / den);
      for (const i of group) baselines[at(i, c)] = b;
    }
    if (zeroTail) {
      const lengths = group.map((i) => counts[i]!);
      const sorted = [...lengths].sort((a, b) => a - b);
      const max = sorted[N - 1]!;
      const second = sorted[N - 2]!;
      const longest = group.filter((_, j) => lengths[j] === max);
      if (longest.length === 1 && max > second)
        for (let c = second; c < cols; c++) baselines[at(longest[0]!, c)] = 0;
    }
  }
  const advantages = allocate(dtype, rows * width);
  for (let i = 0; i < rows; i++) {
    let c = 0;
    for (let t = 0; t < width; t++) {
      const k = i * width + t;
      if (tir) {
        const a = mask[k] ? r(R[at(i, c)]! - baselines[at(i, c++)]!) : 0;
        advantages[k] = r(a * mask[k]!);
      } else advantages[k] = r(r(returns[k]! - baselines[k]!) * mask[k]!);
    }
  }
  return { advantages: unpad(layout, advantages), returns: unpad(layout, returns) };
}

/** Each row's mask-1 values moved to the left of a `[rows, cols]` matrix (zeros after). */
function compact(layout: PaddedLayout, x: FloatArray, cols: number): FloatArray {
  const out = allocate(layout.dtype, layout.rows * cols);
  for (let i = 0; i < layout.rows; i++) {
    let c = 0;
    for (let t = 0; t < layout.offsets[i + 1]! - layout.offsets[i]!; t++) {
      if (layout.mask[layout.offsets[i]! + t]) out[i * cols + c++] = x[i * layout.width + t]!;
    }
  }
  return out;
}

function required<T>(value: T | undefined | null, name: string): T {
  if (value === undefined || value === null) {
    throw new ValidationError(name, `is required by this estimator, found ${describeValue(value)}`);
  }
  return value;
}
