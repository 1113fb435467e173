import { describeValue, ValidationError } from '@vime/core';
import { allocate, type Dtype, type FloatArray, f32, rounder, torchSumF32 } from '../estimators/f32.js';
import { pad, paddedLayout, padMask, rowSums, torchSum } from '../tokens/padded.js';
import { flattenMasks, type LossMasks, tokenOffsets } from '../tokens/tokens.js';

/**
 * Loss math for checking what a trainer computed (not for training): per-token KL estimators, PPO
 * clipping, CISPO, GSPO's sequence ratio and the loss reducers, in float32 like slime.
 */

export type KlType = 'k1' | 'k2' | 'k3' | 'low_var_kl';

function sameLength(name: string, a: ArrayLike<number>, expected: number, other: string): void {
  if (a.length !== expected) {
    throw new ValidationError(
      name,
      `has ${a.length} values but ${other} has ${expected}; they must match token for token`,
    );
  }
}

/**
 * Per-token KL estimate of `logProbs` against `refLogProbs` (`lr = logp − ref`): k1 `lr`, k2 `lr²/2`,
 * k3 / low_var_kl `exp(−lr) − 1 + lr`; `importanceRatio` multiplies (slime `--use-unbiased-kl`);
 * low_var_kl is clamped to [−10, 10] (slime's clamp).
 */
export function approxKl(
  logProbs: ArrayLike<number>,
  refLogProbs: ArrayLike<number>,
  options: {
    type?: KlType | undefined;
    importanceRatio?: ArrayLike<number> | undefined;
    dtype?: Dtype | undefined;
  } = {},
): FloatArray {
  const { type = 'k1', importanceRatio, dtype = 'float32' } = options;
  if (!['k1', 'k2', 'k3', 'low_var_kl'].includes(type)) {
    throw new ValidationError(
      'type',
      `unknown KL estimator ${describeValue(type)}; use k1, k2, k3 or low_var_kl`,
    );
  }
  sameLength('refLogProbs', refLogProbs, logProbs.length, 'logProbs');
  if (importanceRatio) sameLength('importanceRatio', importanceRatio, logProbs.length, 'logProbs');
  const r = rounder(dtype);
  const out = allocate(dtype, logProbs.length);
  for (let i = 0; i < logProbs.length; i++) {
    const lr = r(r(logProbs[i]!) - r(refLogProbs[i]!));
    let kl: number;
    if (type === 'k1') kl = lr;
    else if (type === 'k2') kl = r(r(lr * lr) / 2);
    else kl = r(r(r(Math.exp(-lr)) - 1) + lr);
    if (importanceRatio) kl = r(r(importanceRatio[i]!) * kl);
    if (type === 'low_var_kl') kl = Math.min(10, Math.max(-10, kl));
    out[i] = kl;
  }
  return out;
}

/** Options of the clipped policy loss. */
export interface PolicyLossOptions {
  /** Lower clip: ratio ≥ 1 − epsClip (default 0.2). */
  epsClip?: number | undefined;
  /** Upper clip: ratio ≤ 1 + epsClipHigh (default: epsClip). */
  epsClipHigh?: number | undefined;
  /** Dual clip for A < 0: loss ≤ −c·A (slime `--eps-clip-c`, off by default; verl uses 3). Must be > 1. */
  dualClipC?: number | null | undefined;
  dtype?: Dtype | undefined;
}

/** The clipped policy loss per token, with its clip statistics. */
export interface PolicyLoss {
  /** Per-token loss. */
  losses: FloatArray;
  /** 1 where the clipped term was taken (per token). */
  clipfrac: FloatArray;
}

/**
 * PPO clipped surrogate per token, as slime's `compute_policy_loss`: `ratio = exp(−ppoKl)` with
 * `ppoKl = old − new`; `max(−ratio·A, −clip(ratio, 1−ε, 1+ε_high)·A)`, then the dual clip for A < 0.
 */
export function policyLoss(
  ppoKl: ArrayLike<number>,
  advantages: ArrayLike<number>,
  options: PolicyLossOptions = {},
): PolicyLoss {
  const { epsClip = 0.2, dtype = 'float32' } = options;
  const epsClipHigh = options.epsClipHigh ?? epsClip;
  const c = options.dualClipC ?? null;
  if (c !== null && !(c > 1)) {
    throw new ValidationError('dualClipC', `must be greater than 1, found ${describeValue(c)}`);
  }
  sameLength('advantages', advantages, ppoKl.length, 'ppoKl');
  const r = rounder(dtype);
  const lo = r(1 - epsClip);
  const hi = r(1 + epsClipHigh);
  const losses = allocate(dtype, ppoKl.length);
  const clipfrac = allocate(dtype, ppoKl.length);
  for (let i = 0; i < ppoKl.length; i++) {
    const a = r(advantages[i]!);
    const ratio = r(Math.exp(r(-ppoKl[i]!)));
    const l1 = r(-ratio * a);
    const l2 = r(-Math.min(hi, Math.max(lo, ratio)) * a);
    let l = Math.max(l1, l2);
    clipfrac[i] = l2 > l1 ? 1 : 0;
    if (c !== null && a < 0) l = Math.min(r(r(-c) * a), l);
    losses[i] = l;
  }
  return { losses, clipfrac };
}

/** CISPO per token: `−sg(clip(ratio, 1−ε, 1+ε_high))·A·logp` (canonical: epsClip 1, i.e. no lower bound). */
export function cispoLoss(
  ppoKl: ArrayLike<number>,
  logProbs: ArrayLike<number>,
  advantages: ArrayLike<number>,
  options: { epsClip?: number | undefined; epsClipHigh?: number | undefined; dtype?: Dtype | undefined } = {},
): PolicyLoss {
  const { epsClip = 1, dtype = 'float32' } = options;
  const epsClipHigh = options.epsClipHigh ?? epsClip;
  sameLength('logProbs', logProbs, ppoKl.length, 'ppoKl');
  sameLength('advantages', advantages, ppoKl.length, 'ppoKl');
  const r = rounder(dtype);
  const lo = r(1 - epsClip);
  const hi = r(1 + epsClipHigh);
  const losses = allocate(dtype, ppoKl.length);
  const clipfrac = allocate(dtype, ppoKl.length);
  for (let i = 0; i < ppoKl.length; i++) {
    const ratio = r(Math.exp(r(-ppoKl[i]!)));
    const truncated = Math.min(hi, Math.max(lo, ratio));
    losses[i] = r(r(r(-truncated) * r(advantages[i]!)) * r(logProbs[i]!));
    clipfrac[i] = truncated !== ratio ? 1 : 0;
  }
  return { losses, clipfrac };
}

/**
 * GSPO's sequence-level `ppoKl`: per response, `Σ_t m_t·(old_t − new_t) / max(Σ m, 1)`, repeated on
 * every token of that response.
 */
export function gspoSequenceKl(
  logProbs: ArrayLike<number>,
  oldLogProbs: ArrayLike<number>,
  responseLengths: ArrayLike<number>,
  lossMasks: LossMasks,
  options: { dtype?: Dtype | undefined } = {},
): FloatArray {
  const { dtype = 'float32' } = options;
  const offsets = tokenOffsets(responseLengths);
  const total = offsets[offsets.length - 1]!;
  sameLength('logProbs', logProbs, total, 'the responses');
  sameLength('oldLogProbs', oldLogProbs, total, 'the responses');
  const mask = flattenMasks(lossMasks, offsets);
  const r = rounder(dtype);
  const out = allocate(dtype, total);
  const term = allocate(dtype, total);
  for (let t = 0; t < total; t++) term[t] = r(r(r(oldLogProbs[t]!) - r(logProbs[t]!)) * mask[t]!);
  for (let i = 0; i + 1 < offsets.length; i++) {
    const from = offsets[i]!;
    const to = offsets[i + 1]!;
    let count = 0;
    for (let t = from; t < to; t++) count += mask[t]!;
    const sum = dtype === 'float32' ? torchSumF32(term, from, to) : sumRange(term, from, to);
    out.fill(r(sum / Math.max(count, 1)), from, to);
  }
  return out;
}

function sumRange(x: ArrayLike<number>, from: number, to: number): number {
  let s = 0;
  for (let i = from; i < to; i++) s += x[i]!;
  return s;
}

/** How per-token losses are reduced to one loss. */
export type AggregationMode =
  | 'token-mean'
  | 'seq-mean-token-sum'
  | 'seq-mean-token-mean'
  | 'seq-mean-token-sum-norm'
  | 'rollout-mean';

/** Options of reducing per-token losses. */
export interface AggregateOptions {
  mode: AggregationMode;
  /**
   * `rollout-mean` (slime's default reducer): the rollout each row belongs to. Rows of one rollout
   * (fan-out) share one denominator, the loss-mask total of all of them, and the mean is over rollouts.
   */
  rolloutIds?: ArrayLike<number | string> | undefined;
  /** verl's global-batch denominators (`config.global_batch_info`): the result is multiplied by `dpSize`. */
  dpSize?: number | undefined;
  /** `token-mean`: valid tokens of the global batch (default: this batch's). */
  batchNumTokens?: number | null | undefined;
  /** `seq-mean-*`: sequences of the global batch (default: this batch's sequences with at least one token). */
  globalBatchSize?: number | null | undefined;
  /** `seq-mean-token-sum-norm`: the constant divisor (verl default: the padded response dimension). */
  lossScaleFactor?: number | null | undefined;
  /** The trainer's padded response dimension (default: the longest response). */
  paddedLength?: number | undefined;
  dtype?: Dtype | undefined;
}

/**
 * Reduce a per-token loss to a scalar exactly as verl's `agg_loss` does on its padded `[B, T]` batch
 * (float32 by default), or with slime's rollout mean:
 * - `token-mean`: `Σ l·m / batchNumTokens · dpSize` (verl default, TRL `dapo`, slime `--calculate-per-token-loss`);
 * - `seq-mean-token-sum`: `Σ_i Σ_t l·m / globalBatchSize · dpSize`;
 * - `seq-mean-token-mean`: `Σ_i (Σ_t l·m / (Σ_t m + 1e-8)) / globalBatchSize · dpSize`;
 * - `seq-mean-token-sum-norm`: `Σ l·m / lossScaleFactor` (Dr.GRPO; no `dpSize`);
 * - `rollout-mean`: mean over rollouts of the token mean within the rollout (slime's default).
 *
 * Without the global numbers, `batchNumTokens` is this batch's mask total and `globalBatchSize` counts
 * its sequences with at least one token: an all-zero-mask sequence adds nothing and is not counted.
 * A batch with no token at all gives NaN (0/0), as in verl.
 */
export function aggregateLoss(
  losses: ArrayLike<number>,
  responseLengths: ArrayLike<number>,
  lossMasks: LossMasks,
  options: AggregateOptions,
): number {
  const { mode, dtype = 'float32', dpSize = 1 } = options;
  if (mode === 'rollout-mean') return rolloutMean(losses, responseLengths, lossMasks, options);
  const layout = paddedLayout(responseLengths, lossMasks, { paddedLength: options.paddedLength, dtype });
  const { rows: n, width } = layout;
  const r = rounder(dtype);
  const loss = pad(layout, losses, 'losses');
  const mask = padMask(layout);
  // `loss_mat * loss_mask` (masked_sum first zeroes masked entries with torch.where).
  const product = loss.map((v, k) => r(v * mask[k]!));
  const whereProduct = loss.map((v, k) => (mask[k] ? r(v * mask[k]!) : 0));
  const counts = rowSums(layout, mask);
  const seqMask = counts.map((c) => (c > 0 ? 1 : 0));
  const seqMean = (seqLosses: ArrayLike<number>) => {
    const kept = allocate(dtype, n).map((_, i) => (seqMask[i] ? r(seqLosses[i]! * seqMask[i]!) : 0));
    const size = options.globalBatchSize ?? torchSum(Float32Array.from(seqMask), dtype);
    return r(r(torchSum(kept, dtype) / size) * dpSize);
  };
  switch (mode) {
    case 'token-mean': {
      const tokens = options.batchNumTokens ?? torchSum(mask, dtype);
      return r(r(torchSum(whereProduct, dtype) / tokens) * dpSize);
    }
    case 'seq-mean-token-sum':
      return seqMean(rowSums(layout, product));
    case 'seq-mean-token-mean': {
      const sums = rowSums(layout, product);
      // `Σm + 1e-8` is a float32 tensor (integer mask) whatever the loss dtype.
      return seqMean(sums.map((s, i) => r(s / f32(counts[i]! + 1e-8))));
    }
    case 'seq-mean-token-sum-norm': {
      const factor = options.lossScaleFactor ?? width;
      if (!(factor > 0))
        throw new ValidationError('lossScaleFactor', `must be positive, found ${describeValue(factor)}`);
      return r(torchSum(rowSums(layout, product).map(r), dtype) / factor);
    }
    default:
      throw new ValidationError('mode', `unknown aggregation ${describeValue(mode)}`);
  }
}

/** slime's default reducer: per rollout `Σ l·m / Σ m` over its rows, then the mean over rollouts. */
function rolloutMean(
  losses: ArrayLike<number>,
  responseLengths: ArrayLike<number>,
  lossMasks: LossMasks,
  options: AggregateOptions,
): number {
  const offsets = tokenOffsets(responseLengths);
  const n = offsets.length - 1;
  sameLength('losses', losses, offsets[n]!, 'the responses');
  const mask = flattenMasks(lossMasks, offsets);
  const r = rounder(options.dtype ?? 'float32');
  const ids = options.rolloutIds ?? Array.from({ length: n }, (_, i) => i);
  if (ids.length !== n) {
    throw new ValidationError('rolloutIds', `has ${ids.length} entries but there are ${n} samples`);
  }
  const perRollout = new Map<number | string, { sum: number; count: number }>();
  for (let i = 0; i < n; i++) {
    const entry = perRollout.get(ids[i]!) ?? { sum: 0, count: 0 };
    for (let t = offsets[i]!; t < offsets[i + 1]!; t++) {
      entry.sum = r(entry.sum + r(losses[t]! * mask[t]!));
      entry.count += mask[t]!;
    }
    perRollout.set(ids[i]!, entry);
  }
  let acc = 0;
  for (const { sum, count } of perRollout.values()) acc = r(acc + r(sum / Math.max(count, 1)));
  return r(acc / perRollout.size);
}

/**
 * slime's reducer `get_sum_of_sample_mean` (one rank): `Σ_i Σ_t(x·m) / max(denom_i, 1)`, where
 * `denom_i` is the sample's `rollout_mask_sums` (its own mask total by default); with `perToken`, the
 * plain masked sum. Computed in float32 like the trainer.
 */
export function sumOfSampleMean(
  x: ArrayLike<number>,
  responseLengths: ArrayLike<number>,
  lossMasks: LossMasks,
  options: { sampleDenominators?: ArrayLike<number> | undefined; perToken?: boolean | undefined } = {},
): number {
  const offsets = tokenOffsets(responseLengths);
  const n = offsets.length - 1;
  sameLength('x', x, offsets[n]!, 'the responses');
  const mask = flattenMasks(lossMasks, offsets);
  const { sampleDenominators, perToken = false } = options;
  if (sampleDenominators && sampleDenominators.length !== n) {
    throw new ValidationError(
      'sampleDenominators',
      `has ${sampleDenominators.length} entries but there are ${n} samples`,
    );
  }
  const term = new Float32Array(offsets[n]!);
  for (let t = 0; t < term.length; t++) term[t] = x[t]! * mask[t]!;
  // Python's sum() over per-sample tensors: left to right from int 0.
  let acc = 0;
  for (let i = 0; i < n; i++) {
    const s = torchSumF32(term, offsets[i]!, offsets[i + 1]!);
    if (perToken) {
      acc = f32(acc + s);
      continue;
    }
    let count = 0;
    for (let t = offsets[i]!; t < offsets[i + 1]!; t++) count += mask[t]!;
    const denom = sampleDenominators ? f32(sampleDenominators[i]!) : count;
    acc = f32(acc + f32(s / Math.max(denom, 1)));
  }
  return acc;
}
