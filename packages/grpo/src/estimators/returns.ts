import { describeValue, ValidationError } from '@vime/core';
import { flattenMasks, type LossMasks, tokenOffsets } from '../tokens/tokens.js';
import { allocate, type Dtype, type FloatArray, rounder, sumF64, torchSumF32 } from './f32.js';

/**
 * Token-level returns as the trainers compute them for REINFORCE++ and PPO: discounted returns, the
 * REINFORCE++ reward placement, and the masked whitening of the result.
 */

export interface WhitenOptions {
  /** Subtract the mean (default). `false` adds it back after scaling, like slime's `shift_mean=False`. */
  shiftMean?: boolean | undefined;
  /** Added to the variance under the square root (default 1e-8). */
  epsilon?: number | undefined;
  /** Bessel-corrected variance (slime, verl) or the biased one (OpenRLHF). */
  std?: 'unbiased' | 'biased' | undefined;
  dtype?: Dtype | undefined;
}

/**
 * Masked whitening over all tokens: mean and variance over mask==1 tokens, `(x − mean)·rsqrt(var + ε)`
 * applied to every token (masked ones too), as slime's `distributed_masked_whiten` on one rank.
 */
export function maskedWhiten(
  values: ArrayLike<number>,
  mask: ArrayLike<number>,
  options: WhitenOptions = {},
): FloatArray {
  const { shiftMean = true, epsilon = 1e-8, std = 'unbiased', dtype = 'float32' } = options;
  if (values.length !== mask.length) {
    throw new ValidationError('mask', `has ${mask.length} entries but there are ${values.length} values`);
  }
  const round = rounder(dtype);
  const n = values.length;
  const masked = allocate(dtype, n);
  const squared = allocate(dtype, n);
  let count = 0;
  for (let i = 0; i < n; i++) {
    const v = round(values[i]!);
    const m = mask[i]!;
    count += m;
    masked[i] = round(v * m);
    squared[i] = round(round(v * v) * m);
  }
  if (count === 0) {
    throw new ValidationError(
      'mask',
      'every token is masked out; whitening needs at least one token with mask 1',
    );
  }
  const sum = dtype === 'float32' ? torchSumF32(masked) : sumF64(masked);
  const sumSq = dtype === 'float32' ? torchSumF32(squared) : sumF64(squared);
  const total = round(count);
  const mean = round(sum / total);
  let variance = round(round(sumSq / total) - round(mean * mean));
  if (std === 'unbiased' && count >= 2) variance = round(variance * round(total / round(total - 1)));
  if (std === 'biased') variance = Math.max(variance, 0);
  const scale = round(1 / round(Math.sqrt(round(variance + round(epsilon)))));
  const out = allocate(dtype, n);
  for (let i = 0; i < n; i++) {
    const w = round(round(round(values[i]!) - mean) * scale);
    out[i] = shiftMean ? w : round(w + mean);
  }
  return out;
}

/**
 * Discounted returns per response, `G_t = r_t + γ·G_{t+1}` (`G` after the last token is 0), over a
 * flat array of token rewards. With `resetMask`, the running return is cut after each mask-0 token, so
 * earlier tokens do not see what follows it (verl's reset after EOS).
 */
export function discountedReturns(
  tokenRewards: ArrayLike<number>,
  responseLengths: ArrayLike<number>,
  gamma: number,
  options: { resetMask?: ArrayLike<number> | undefined; dtype?: Dtype | undefined } = {},
): FloatArray {
  const { dtype = 'float32', resetMask } = options;
  checkUnit('gamma', gamma);
  const offsets = tokenOffsets(responseLengths);
  const total = offsets[offsets.length - 1]!;
  if (tokenRewards.length !== total) {
    throw new ValidationError(
      'tokenRewards',
      `has ${tokenRewards.length} values but the responses hold ${total} tokens`,
    );
  }
  const out = allocate(dtype, total);
  for (let i = 0; i + 1 < offsets.length; i++) {
    let running = 0;
    for (let t = offsets[i + 1]! - 1; t >= offsets[i]!; t--) {
      running = tokenRewards[t]! + gamma * running;
      out[t] = running;
      if (resetMask && resetMask[t] === 0) running = 0;
    }
  }
  return out;
}

/** A discount or GAE λ: a number in [0, 1]. */
export function checkUnit(name: string, value: number): void {
  if (!(Number.isFinite(value) && value >= 0 && value <= 1)) {
    throw new ValidationError(name, `must be a number in [0, 1], found ${describeValue(value)}`);
  }
}

/**
 * REINFORCE++ token returns (slime): token reward `−klCoef·kl_t·mask_t`, plus the sequence reward at
 * the last token with mask 1, discounted with `gamma`.
 */
export function reinforcePlusPlusReturns(input: {
  rewards: ArrayLike<number>;
  responseLengths: ArrayLike<number>;
  lossMasks: LossMasks;
  kl?: ArrayLike<number> | undefined;
  klCoef?: number | undefined;
  gamma?: number | undefined;
  dtype?: Dtype | undefined;
}): FloatArray {
  const { rewards, klCoef = 0, gamma = 1, dtype = 'float32' } = input;
  const offsets = tokenOffsets(input.responseLengths, rewards.length);
  const mask = flattenMasks(input.lossMasks, offsets);
  const round = rounder(dtype);
  const total = offsets[rewards.length]!;
  if (input.kl && input.kl.length !== total) {
    throw new ValidationError('kl', `has ${input.kl.length} values but the responses hold ${total} tokens`);
  }
  const tokenRewards = allocate(dtype, total);
  for (let i = 0; i < rewards.length; i++) {
    let last = -1;
    for (let t = offsets[i]!; t < offsets[i + 1]!; t++) {
      const kl = input.kl ? round(round(input.kl[t]!) * mask[t]!) : 0;
      tokenRewards[t] = round(round(-klCoef) * kl);
      if (mask[t]) last = t;
    }
    if (last < 0) {
      throw new ValidationError(
        `lossMasks[${i}]`,
        'sample is fully masked; REINFORCE++ puts the reward on its last unmasked token',
      );
    }
    tokenRewards[last] = round(tokenRewards[last]! + round(rewards[i]!));
  }
  return discountedReturns(tokenRewards, input.responseLengths, gamma, { dtype });
}
