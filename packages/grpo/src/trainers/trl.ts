import { ConfigError, describeValue, ValidationError } from '@vime/core';
import { f32, torchOuterSumF32, torchSumF32 } from '../estimators/f32.js';
import { pad, paddedLayout, padMask, rowSums, unpad } from '../tokens/padded.js';
import type { LossMasks } from '../tokens/tokens.js';

/**
 * huggingface/trl's `GRPOTrainer` in float32, as it computes on CPU: `nanstd`, the advantages of
 * `_generate_and_score_completions` (several reward functions, `None` scores, `scale_rewards`,
 * `multi_objective_aggregation`) and the loss of `_compute_loss` for every `loss_type`.
 */

const TRL_EPSILON = f32(1e-4);

/** Sum of `x[from..to)` with NaN entries as 0 (`torch.nansum`), in torch's float32 order. */
function nansum(x: Float32Array, from: number, to: number): number {
  let clean = x.subarray(from, to);
  if (clean.some(Number.isNaN)) clean = clean.map((v) => (Number.isNaN(v) ? 0 : v));
  return torchSumF32(clean);
}

function notNaN(x: Float32Array, from: number, to: number): number {
  let c = 0;
  for (let i = from; i < to; i++) if (!Number.isNaN(x[i]!)) c++;
  return c;
}

/** `torch.nanmean` of each row of `rowLength` values (the whole array by default), float32. */
export function nanmean(
  values: ArrayLike<number>,
  options: { rowLength?: number | undefined } = {},
): Float32Array {
  const x = Float32Array.from(values);
  const width = rowWidth(x.length, options.rowLength);
  return Float32Array.from({ length: x.length / width }, (_, r) =>
    f32(nansum(x, r * width, (r + 1) * width) / notNaN(x, r * width, (r + 1) * width)),
  );
}

/**
 * TRL's `nanstd` of each row of `rowLength` values (the whole array by default): the float32 two-pass
 * `sqrt(nanmean((x − nanmean)²) · n/(n − 1))` over the non-NaN entries; fewer than two give NaN.
 */
export function nanstd(
  values: ArrayLike<number>,
  options: { rowLength?: number | undefined } = {},
): Float32Array {
  const x = Float32Array.from(values);
  const width = rowWidth(x.length, options.rowLength);
  const means = nanmean(x, { rowLength: width });
  const squares = new Float32Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const d = f32(x[i]! - means[Math.floor(i / width)]!);
    squares[i] = f32(d * d);
  }
  return Float32Array.from({ length: x.length / width }, (_, r) => {
    const n = notNaN(x, r * width, (r + 1) * width);
    const variance = f32(nansum(squares, r * width, (r + 1) * width) / n);
    return f32(Math.sqrt(f32(variance * (n > 1 ? f32(n / (n - 1)) : Number.NaN))));
  });
}

function rowWidth(length: number, rowLength: number | undefined): number {
  const width = rowLength ?? length;
  if (!(Number.isInteger(width) && width > 0 && length % width === 0)) {
    throw new ValidationError(
      'rowLength',
      `must be a positive integer dividing ${length}, found ${describeValue(rowLength)}`,
    );
  }
  return width;
}

/** A reward function's scores: one per sample, `null`/`undefined`/NaN where it did not score it. */
export type RewardScores = ArrayLike<number | null | undefined>;

/** Options of combining several reward functions as TRL does. */
export interface MultiRewardOptions {
  /** `num_generations`: consecutive blocks of this many samples form a group. */
  groupSize: number;
  /** `reward_weights`, one per reward function (default all 1). */
  weights?: ArrayLike<number> | undefined;
  /** `scale_rewards`: `'group'` (= true, default), `'batch'` or `'none'` (= false). */
  scale?: 'group' | 'batch' | 'none' | boolean | undefined;
}

/** `rewards_per_func` as TRL holds it: a float32 `[B, F]` matrix, NaN where a function returned None. */
function rewardMatrix(rewardsPerFunc: ReadonlyArray<RewardScores>, options: MultiRewardOptions) {
  if (!Array.isArray(rewardsPerFunc) || rewardsPerFunc.length === 0) {
    throw new ValidationError(
      'rewardsPerFunc',
      `expected one score array per reward function, found ${describeValue(rewardsPerFunc)}`,
    );
  }
  const F = rewardsPerFunc.length;
  const B = rewardsPerFunc[0]!.length;
  const G = options.groupSize;
  if (!(Number.isInteger(G) && G > 0 && B > 0 && B % G === 0)) {
    throw new ValidationError(
      'groupSize',
      `${B} samples do not split into groups of ${Number.isInteger(G) && G > 0 ? G : describeValue(G)} (num_generations); TRL reshapes the batch to (-1, num_generations)`,
    );
  }
  const w = options.weights ?? Array.from({ length: F }, () => 1);
  if (w.length !== F) {
    throw new ValidationError('weights', `has ${w.length} entries for ${F} reward functions`);
  }
  const m = new Float32Array(B * F);
  rewardsPerFunc.forEach((scores, f) => {
    if (scores?.length !== B) {
      throw new ValidationError(
        `rewardsPerFunc[${f}]`,
        `has ${describeValue(scores?.length)} scores but rewardsPerFunc[0] has ${B}; every function answers for every sample (null for none)`,
      );
    }
    for (let i = 0; i < B; i++) {
      const v = scores[i];
      if (v !== null && v !== undefined && typeof v !== 'number') {
        throw new ValidationError(
          `rewardsPerFunc[${f}][${i}]`,
          `expected a number or null, found ${describeValue(v)}`,
        );
      }
      m[i * F + f] = v === null || v === undefined ? Number.NaN : v;
    }
  });
  const scale =
    options.scale === true ? 'group' : options.scale === false ? 'none' : (options.scale ?? 'group');
  if (!['group', 'batch', 'none'].includes(scale)) {
    throw new ConfigError(
      `scale: must be 'group', 'batch' or 'none' (or a boolean), found ${JSON.stringify(scale)}`,
    );
  }
  return { m, B, F, G, w: Float32Array.from(w), scale };
}

/** Weighted `nansum` over the functions of each sample; NaN where every function returned None. */
function weightedRewards(values: Float32Array, B: number, F: number, w: Float32Array): Float32Array {
  const rewards = new Float32Array(B);
  const row = new Float32Array(F);
  for (let i = 0; i < B; i++) {
    let scored = false;
    for (let f = 0; f < F; f++) {
      row[f] = f32(values[i * F + f]! * w[f]!);
      scored ||= !Number.isNaN(values[i * F + f]!);
    }
    rewards[i] = scored ? nansum(row, 0, F) : Number.NaN;
  }
  return rewards;
}

const zeroNaN = (x: Float32Array) => x.map((v) => (Number.isNaN(v) ? 0 : v));

/**
 * TRL's default `multi_objective_aggregation="sum_then_normalize"`: the weighted `nansum` of the
 * reward functions per sample, then `(r − nanmean_g)/(nanstd + 1e-4)` with the group's std
 * (`scale: 'group'`), the batch's (`'batch'`) or none. A sample no function scored is left out of its
 * group's mean and std and gets advantage 0; with `groupSize` 1 every advantage is 0.
 */
export function sumThenNormalize(
  rewardsPerFunc: ReadonlyArray<RewardScores>,
  options: MultiRewardOptions,
): Float32Array {
  const { m, B, F, G, w, scale } = rewardMatrix(rewardsPerFunc, options);
  const rewards = weightedRewards(m, B, F, w);
  const means = nanmean(rewards, { rowLength: G });
  const stds =
    scale === 'batch'
      ? B > 1
        ? new Float32Array(B / G).fill(nanstd(rewards)[0]!)
        : new Float32Array(1)
      : G > 1
        ? nanstd(rewards, { rowLength: G })
        : new Float32Array(B / G);
  const out = new Float32Array(B);
  for (let i = 0; i < B; i++) {
    const g = Math.floor(i / G);
    const centred = f32(rewards[i]! - means[g]!);
    out[i] = scale === 'none' ? centred : f32(centred / f32(stds[g]! + TRL_EPSILON));
  }
  return zeroNaN(out);
}

/**
 * TRL's `multi_objective_aggregation="normalize_then_sum"` (GDPO): each reward function normalized
 * within its groups (`nanmean` / `nanstd` over the group, NaN where fewer than two samples were
 * scored), the weighted `nansum`, then `(x − nanmean)/(nanstd + 1e-4)` over the batch. An unscored
 * sample gets advantage 0; a scored one whose normalized values are all NaN counts as 0.
 */
export function normalizeThenSum(
  rewardsPerFunc: ReadonlyArray<RewardScores>,
  options: Omit<MultiRewardOptions, 'scale'>,
): Float32Array {
  const { m, B, F, G, w } = rewardMatrix(rewardsPerFunc, options);
  const normalized = new Float32Array(B * F);
  const column = new Float32Array(G);
  for (let p = 0; p < B / G; p++) {
    for (let f = 0; f < F; f++) {
      const at = (j: number) => (p * G + j) * F + f;
      // nanmean / nanstd over dim 1 of the [P, G, F] view: a strided (outer) reduction.
      const sumOf = (get: (j: number) => number) =>
        torchOuterSumF32((j) => (Number.isNaN(get(j)) ? 0 : get(j)), G, f, F);
      let n = 0;
      for (let j = 0; j < G; j++) if (!Number.isNaN(m[at(j)]!)) n++;
      const mean = f32(sumOf((j) => m[at(j)]!) / n);
      for (let j = 0; j < G; j++) {
        const d = f32(m[at(j)]! - mean);
        column[j] = f32(d * d);
      }
      const variance = f32(sumOf((j) => column[j]!) / n);
      const std = G > 1 ? f32(Math.sqrt(f32(variance * (n > 1 ? f32(n / (n - 1)) : Number.NaN)))) : 0;
      for (let j = 0; j < G; j++) normalized[at(j)] = f32(f32(m[at(j)]! - mean) / f32(std + TRL_EPSILON));
    }
  }
  const rewards = new Float32Array(B);
  const row = new Float32Array(F);
  for (let i = 0; i < B; i++) {
    let scored = false;
    for (let f = 0; f < F; f++) {
      row[f] = f32(normalized[i * F + f]! * w[f]!);
      scored ||= !Number.isNaN(m[i * F + f]!);
    }
    rewards[i] = scored ? nansum(row, 0, F) : Number.NaN;
  }
  const std = B > 1 ? nanstd(rewards)[0]! : 0;
  const mean = nanmean(rewards)[0]!;
  return zeroNaN(rewards.map((r) => f32(f32(r - mean) / f32(std + TRL_EPSILON))));
}

/** A TRL `loss_type`. */
export type TrlLossType = 'grpo' | 'bnpo' | 'dr_grpo' | 'dapo' | 'luspo' | 'cispo' | 'sapo' | 'vespo';
/** Every TRL `loss_type` reproduced here. */
export const TRL_LOSS_TYPES = [
  'grpo',
  'bnpo',
  'dr_grpo',
  'dapo',
  'luspo',
  'cispo',
  'sapo',
  'vespo',
] as const satisfies readonly TrlLossType[];

/** What TRL's GRPO loss is computed from. */
export interface TrlLossInput {
  /** Per-token log-probs of the policy being trained (flat over the responses). */
  perTokenLogps: ArrayLike<number>;
  /** Log-probs of the policy that generated (default: `perTokenLogps`, TRL's single-iteration case). */
  oldPerTokenLogps?: ArrayLike<number> | undefined;
  /** Reference log-probs (needed when `beta ≠ 0`). */
  refPerTokenLogps?: ArrayLike<number> | undefined;
  /** Inference-time log-probs for the off-policy mask (default: the old ones). */
  samplingPerTokenLogps?: ArrayLike<number> | undefined;
  /** vLLM importance-sampling ratio per token (with `vllmImportanceSamplingCorrection`, and for `vespo`). */
  importanceSamplingRatio?: ArrayLike<number> | undefined;
  /** One advantage per sequence. */
  advantages: ArrayLike<number>;
  responseLengths: ArrayLike<number>;
  /** `completion_mask × tool_mask`. */
  lossMasks: LossMasks;
  /** The padded completion dimension (default: the longest response). */
  paddedLength?: number | undefined;
}

/** Options of TRL's GRPO loss. */
export interface TrlLossOptions {
  lossType?: TrlLossType | undefined;
  /** Lower clip ε (default 0.2). */
  epsilon?: number | undefined;
  /** Upper clip (default: `epsilon`); for `cispo` the truncation bound ε_max. */
  epsilonHigh?: number | undefined;
  /** Two-sided clipping: upper bound of the ratio (INTELLECT-2). */
  delta?: number | null | undefined;
  /** KL coefficient (default 0). */
  beta?: number | undefined;
  useBiasCorrectionKl?: boolean | undefined;
  importanceSamplingLevel?: 'token' | 'sequence' | undefined;
  sapoTemperaturePos?: number | undefined;
  sapoTemperatureNeg?: number | undefined;
  vespoKPos?: number | undefined;
  vespoLambdaPos?: number | undefined;
  vespoKNeg?: number | undefined;
  vespoLambdaNeg?: number | undefined;
  offPolicyMaskThreshold?: number | null | undefined;
  vllmImportanceSamplingCorrection?: boolean | undefined;
  /** `dr_grpo`'s constant. */
  maxCompletionLength?: number | undefined;
  /** `dapo` / `cispo` / `vespo`: active tokens of the whole generation batch (default: this batch's). */
  numItemsInBatch?: number | undefined;
  numProcesses?: number | undefined;
  gradientAccumulationSteps?: number | undefined;
}

/** TRL's GRPO loss and the metrics it logs. */
export interface TrlLoss {
  /** The loss `backward()` is called on (divided by the accumulation steps where TRL does). */
  loss: number;
  /** The logged `policy_loss` (before that division). */
  policyLoss: number;
  /** Per-token loss (flat; a sequence-level loss repeated on each token). */
  perTokenLoss: Float32Array;
}

/** TRL `GRPOTrainer._compute_loss` (train mode, no entropy bonus or entropy mask) on a padded batch. */
export function trlLoss(input: TrlLossInput, options: TrlLossOptions = {}): TrlLoss {
  const lossType = options.lossType ?? 'dapo';
  if (!TRL_LOSS_TYPES.includes(lossType)) {
    throw new ConfigError(
      `lossType: unknown ${JSON.stringify(lossType)}; use one of ${TRL_LOSS_TYPES.join(', ')}`,
    );
  }
  const level = options.importanceSamplingLevel ?? 'token';
  const B = input.advantages.length;
  const layout = paddedLayout(input.responseLengths, input.lossMasks, {
    paddedLength: input.paddedLength,
    count: B,
  });
  const T = layout.width;
  // The layout is float32: every padded array below is a Float32Array.
  const pad32 = (values: ArrayLike<number>, what: string, fill = 0) =>
    pad(layout, values, what, fill) as Float32Array;
  const mask = padMask(layout) as Float32Array;
  const logp = pad32(input.perTokenLogps, 'perTokenLogps');
  const old = input.oldPerTokenLogps ? pad32(input.oldPerTokenLogps, 'oldPerTokenLogps') : logp;
  const counts = rowSums(layout, mask);
  const clampedCounts = counts.map((c) => Math.max(c, 1));
  const A = Float32Array.from(input.advantages);
  const logRatio = logp.map((v, k) => f32(v - old[k]!));
  // coef_1 is [B, T] at token level, [B, 1] at sequence level: `coef(i, t)` reads either.
  let logWeights: Float32Array;
  if (level === 'token') logWeights = Float32Array.from(logRatio);
  else if (level === 'sequence') {
    const weighted = rowSums(
      layout,
      logRatio.map((v, k) => f32(v * mask[k]!)),
    );
    logWeights = Float32Array.from(weighted, (s, i) => f32(s / clampedCounts[i]!));
  } else
    throw new ConfigError(
      `importanceSamplingLevel: must be 'token' or 'sequence', found ${JSON.stringify(level)}`,
    );
  const coef1 = logWeights.map((v) => f32(Math.exp(v)));
  const coef = (i: number, t: number) => (level === 'token' ? coef1[i * T + t]! : coef1[i]!);
  const epsLow = options.epsilon ?? 0.2;
  const epsHigh = options.epsilonHigh ?? epsLow;
  const perToken = new Float32Array(B * T);
  const phi = lossType === 'vespo' ? vespoWeights(layout, logRatio, mask, A, input, options) : null;
  for (let i = 0; i < B; i++) {
    const a = A[i]!;
    for (let t = 0; t < T; t++) {
      const c1 = coef(i, t);
      const k = i * T + t;
      let l: number;
      if (lossType === 'cispo') l = f32(f32(-Math.min(c1, f32(epsHigh)) * a) * logp[k]!);
      else if (lossType === 'sapo') {
        const temp = f32(a > 0 ? (options.sapoTemperaturePos ?? 1) : (options.sapoTemperatureNeg ?? 1.05));
        const gate = f32(f32(f32(sigmoid(f32(temp * f32(c1 - 1))) * 4)) / temp);
        l = f32(-gate * a);
      } else if (lossType === 'vespo') l = f32(f32(-phi![i]! * a) * logp[k]!);
      else {
        const c2 = Math.min(f32(1 + epsHigh), Math.max(f32(1 - epsLow), c1));
        const capped = options.delta != null ? Math.min(c1, f32(options.delta)) : c1;
        l = -Math.min(f32(capped * a), f32(c2 * a));
      }
      perToken[k] = l;
    }
  }
  if (options.offPolicyMaskThreshold != null) {
    const sampling = input.samplingPerTokenLogps
      ? pad32(input.samplingPerTokenLogps, 'samplingPerTokenLogps')
      : old;
    const kl = rowSums(
      layout,
      sampling.map((s, k) => f32(f32(s - logp[k]!) * mask[k]!)),
    );
    for (let i = 0; i < B; i++) {
      const keep = A[i]! >= 0 || f32(kl[i]! / clampedCounts[i]!) <= options.offPolicyMaskThreshold;
      for (let t = 0; t < T; t++) perToken[i * T + t] = f32(perToken[i * T + t]! * (keep ? 1 : 0));
    }
  }
  if (options.vllmImportanceSamplingCorrection && lossType !== 'vespo') {
    const ratio = pad32(
      required(input.importanceSamplingRatio, 'importanceSamplingRatio'),
      'importanceSamplingRatio',
    );
    for (let k = 0; k < perToken.length; k++) perToken[k] = f32(perToken[k]! * ratio[k]!);
  }
  const beta = options.beta ?? 0;
  if (beta !== 0) {
    const ref = pad32(required(input.refPerTokenLogps, 'refPerTokenLogps'), 'refPerTokenLogps');
    for (let i = 0; i < B; i++) {
      for (let t = 0; t < T; t++) {
        const k = i * T + t;
        const d = f32(ref[k]! - logp[k]!);
        let kl = f32(f32(f32(Math.exp(d)) - d) - 1);
        if (options.useBiasCorrectionKl) kl = f32(kl * coef(i, t));
        perToken[k] = f32(perToken[k]! + f32(f32(beta) * kl));
      }
    }
  }
  const policyLoss = aggregate(lossType, perToken, mask, counts, clampedCounts, B, T, level, options);
  const steps = options.gradientAccumulationSteps ?? 1;
  const divided = ['cispo', 'dapo', 'vespo'].includes(lossType) ? policyLoss : f32(policyLoss / steps);
  return { loss: divided, policyLoss, perTokenLoss: Float32Array.from(unpad(layout, perToken)) };
}

function aggregate(
  lossType: TrlLossType,
  perToken: Float32Array,
  mask: ArrayLike<number>,
  counts: Float64Array,
  clampedCounts: Float64Array,
  B: number,
  T: number,
  level: 'token' | 'sequence',
  options: TrlLossOptions,
): number {
  const masked = perToken.map((v, k) => f32(v * mask[k]!));
  const total = () => torchSumF32(masked);
  switch (lossType) {
    case 'grpo':
    case 'sapo': {
      const perSeq = Float32Array.from({ length: B }, (_, i) =>
        f32(torchSumF32(masked, i * T, (i + 1) * T) / clampedCounts[i]!),
      );
      return f32(torchSumF32(perSeq) / B);
    }
    case 'bnpo':
      return f32(total() / Math.max(torchSumF32(Float32Array.from(counts)), 1));
    case 'dr_grpo':
      return f32(total() / (B * required(options.maxCompletionLength, 'maxCompletionLength')));
    case 'luspo': {
      // (per_token_loss * mask.sum(1, keepdim=True)).mean(): sequence-level losses repeat on each token.
      const scaled =
        level === 'sequence'
          ? Float32Array.from({ length: B }, (_, i) => f32(perToken[i * T]! * counts[i]!))
          : perToken.map((v, k) => f32(v * counts[Math.floor(k / T)]!));
      return f32(torchSumF32(scaled) / scaled.length);
    }
    default: {
      const items = options.numItemsInBatch ?? torchSumF32(Float32Array.from(counts));
      const normalizer = f32(Math.max(f32(items), 1) / (options.numProcesses ?? 1));
      return f32(total() / normalizer);
    }
  }
}

/** VESPO's sequence weights φ(w) = exp(λ + k·log w − λ·w) (TRL `get_gamma_weights`), NaN/±inf → 0. */
function vespoWeights(
  layout: ReturnType<typeof paddedLayout>,
  logRatio: Float32Array,
  mask: ArrayLike<number>,
  A: Float32Array,
  input: TrlLossInput,
  options: TrlLossOptions,
): Float32Array {
  const lower = f32(Math.log(1e-8));
  const clamp = (v: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, v));
  const seq = rowSums(
    layout,
    logRatio.map((v, k) => f32(clamp(v, -20, 20) * mask[k]!)),
  );
  if (input.importanceSamplingRatio) {
    // Summed over the whole padded row; padding carries ratio 1 (log 0).
    const ratio = pad(layout, input.importanceSamplingRatio, 'importanceSamplingRatio', 1);
    const logs = rowSums(
      layout,
      ratio.map((v) => clamp(f32(Math.log(v)), lower, 20)),
    );
    for (let i = 0; i < seq.length; i++) seq[i] = f32(seq[i]! + logs[i]!);
  }
  return Float32Array.from(seq, (s, i) => {
    const logW = clamp(s, lower, 20);
    const w = f32(Math.exp(logW));
    const nonneg = A[i]! >= 0;
    const k = f32(nonneg ? (options.vespoKPos ?? 2) : (options.vespoKNeg ?? 3));
    const lambda = Math.max(
      f32(nonneg ? (options.vespoLambdaPos ?? 3) : (options.vespoLambdaNeg ?? 2)),
      f32(1e-4),
    );
    const phi = f32(Math.exp(f32(f32(lambda + f32(k * logW)) - f32(lambda * w))));
    return Number.isFinite(phi) ? phi : 0;
  });
}

/** torch's float32 sigmoid: `(exp(−x) + 1).reciprocal()`, each op rounded. */
function sigmoid(x: number): number {
  return f32(1 / f32(1 + f32(Math.exp(-x))));
}

function required<T>(value: T | undefined | null, name: string): T {
  if (value === undefined || value === null) {
    throw new ValidationError(name, 'is required by the chosen loss options');
  }
  return value;
}
