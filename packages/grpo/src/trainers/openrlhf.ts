import { ConfigError, describeValue, ValidationError } from '@vime/core';
import { f32, torchStdAllF32, torchStdWelfordF32, torchSumF32 } from '../estimators/f32.js';
import { flattenMasks, type LossMasks, tokenOffsets } from '../tokens/tokens.js';

/**
 * OpenRLHF's `RemoteExperienceMaker.compute_advantages_and_returns` in float32: reward shaping per
 * prompt group, `compute_reward` (the scalar on the last action token, `−kl_coef·kl` on every token),
 * cumulative returns or GAE per experience, and the whitening of `gae` / `reinforce` /
 * `reinforce_baseline` over every action token of the batch (biased variance, clamped at 1e-8).
 */

export type OpenrlhfEstimator =
  | 'gae'
  | 'reinforce'
  | 'rloo'
  | 'reinforce_baseline'
  | 'group_norm'
  | 'dr_grpo';
/** Every OpenRLHF advantage estimator reproduced here. */
export const OPENRLHF_ESTIMATORS = [
  'gae',
  'reinforce',
  'rloo',
  'reinforce_baseline',
  'group_norm',
  'dr_grpo',
] as const satisfies readonly OpenrlhfEstimator[];

/** The rewards (and values, for GAE) OpenRLHF's experience maker gets. */
export interface OpenrlhfInput {
  /** One reward per sample, in the order the samples are listed (experience order). */
  rewards: ArrayLike<number>;
  responseLengths: ArrayLike<number>;
  /** `action_mask` per token (flat or one array per sample). */
  actionMasks: LossMasks;
  /** Per-token KL of the policy to the reference (`experience.kl`), needed when `klCoef > 0`. */
  kl?: ArrayLike<number> | undefined;
  /** Critic values per token (`gae`). */
  values?: ArrayLike<number> | undefined;
  /** Prompt-order position of each listed sample (`experience.index`); groups are blocks of n in prompt order. */
  order?: ArrayLike<number> | undefined;
  /** How many consecutive listed samples each experience (micro-batch) holds (default: one experience). */
  experiences?: ArrayLike<number> | undefined;
  /** Padded action length of each experience (default: its longest response). */
  paddedLengths?: ArrayLike<number> | undefined;
}

/** Options of `openrlhfAdvantages`: the estimator and OpenRLHF's settings. */
export interface OpenrlhfOptions {
  estimator: OpenrlhfEstimator;
  /** `--n_samples_per_prompt` (> 1; OpenRLHF asserts it). */
  nSamplesPerPrompt: number;
  /** Forced to 1 for rloo, reinforce_baseline, group_norm and dr_grpo, as OpenRLHF does. */
  gamma?: number | undefined;
  lambd?: number | undefined;
  /** The KL controller's value; ≤ 0 means none. */
  klCoef?: number | undefined;
  /** `--no_std_norm`: the whitening only subtracts the mean. */
  noStdNorm?: boolean | undefined;
  /** `--reward_clip_range`: clamp the shaped scalar before it is placed. */
  rewardClipRange?: readonly [number, number] | null | undefined;
}

/** Per-token advantages and returns, as OpenRLHF computes them. */
export interface OpenrlhfResult {
  advantages: Float32Array;
  returns: Float32Array;
}

/** Advantages and returns exactly as OpenRLHF's experience maker computes them. */
export function openrlhfAdvantages(input: OpenrlhfInput, options: OpenrlhfOptions): OpenrlhfResult {
  const { estimator, nSamplesPerPrompt: n } = options;
  if (!OPENRLHF_ESTIMATORS.includes(estimator)) {
    throw new ConfigError(
      `estimator: unknown ${JSON.stringify(estimator)}; use one of ${OPENRLHF_ESTIMATORS.join(', ')}`,
    );
  }
  const B = input.rewards.length;
  if (!(Number.isInteger(n) && n > 1 && B % n === 0)) {
    throw new ValidationError(
      'nSamplesPerPrompt',
      `must be an integer > 1 dividing the ${B} samples (OpenRLHF asserts n_samples_per_prompt > 1), found ${describeValue(n)}`,
    );
  }
  const offsets = tokenOffsets(input.responseLengths, B);
  const mask = flattenMasks(input.actionMasks, offsets, 'actionMasks');
  const order = input.order ? Int32Array.from(input.order) : Int32Array.from({ length: B }, (_, i) => i);
  if (order.length !== B || new Set(order).size !== B || order.some((o) => o < 0 || o >= B)) {
    throw new ValidationError(
      'order',
      `must be a permutation of 0..${B - 1} (one prompt-order position per sample)`,
    );
  }
  const shaped = shapeRewards(input.rewards, order, n, estimator);
  const gamma = ['gae', 'reinforce'].includes(estimator) ? (options.gamma ?? 1) : 1;
  const lambd = options.lambd ?? 1;
  const klCoef = Math.max(options.klCoef ?? 0, 0);
  const sizes = input.experiences ? Array.from(input.experiences) : [B];
  if (sizes.reduce((a, b) => a + b, 0) !== B) {
    throw new ValidationError(
      'experiences',
      `sizes sum to ${sizes.reduce((a, b) => a + b, 0)}, not the ${B} samples`,
    );
  }
  const total = offsets[B]!;
  for (const [name, arr] of [
    ['kl', input.kl],
    ['values', input.values],
  ] as const) {
    if (arr && arr.length !== total) {
      throw new ValidationError(name, `has ${arr.length} values but the responses hold ${total} tokens`);
    }
  }
  if (estimator === 'gae' && !input.values)
    throw new ValidationError('values', "estimator 'gae' needs the critic values");
  const advantages = new Float32Array(total);
  const returns = new Float32Array(total);
  // Padded blocks of every experience, concatenated: the whitening reduces over them in this order.
  const blocks: Array<{ first: number; size: number; width: number; adv: Float32Array; mask: Float32Array }> =
    [];
  let first = 0;
  sizes.forEach((size, e) => {
    let width = 0;
    for (let i = first; i < first + size; i++) width = Math.max(width, offsets[i + 1]! - offsets[i]!);
    width = input.paddedLengths ? input.paddedLengths[e]! : width;
    const block = experience(input, options, {
      first,
      size,
      width,
      offsets,
      mask,
      shaped,
      gamma,
      lambd,
      klCoef,
    });
    blocks.push({ first, size, width, ...block });
    for (let i = first; i < first + size; i++) {
      for (let t = 0; t < offsets[i + 1]! - offsets[i]!; t++)
        returns[offsets[i]! + t] = block.returns[(i - first) * width + t]!;
    }
    first += size;
  });
  const all = concat(blocks.map((b) => b.adv));
  const allMask = concat(blocks.map((b) => b.mask));
  if (['gae', 'reinforce', 'reinforce_baseline'].includes(estimator)) {
    const count = torchSumF32(allMask);
    const mean = f32(torchSumF32(all.map((a, k) => f32(a * allMask[k]!))) / count);
    let rstd = 1;
    if (!options.noStdNorm) {
      const sq = all.map((a, k) => {
        const d = f32(a - mean);
        return f32(f32(d * d) * allMask[k]!);
      });
      const variance = f32(torchSumF32(sq) / count);
      rstd = f32(1 / f32(Math.sqrt(Math.max(variance, f32(1e-8)))));
    }
    for (let k = 0; k < all.length; k++) all[k] = f32(f32(all[k]! - mean) * rstd);
  }
  let at = 0;
  for (const b of blocks) {
    for (let i = b.first; i < b.first + b.size; i++) {
      for (let t = 0; t < offsets[i + 1]! - offsets[i]!; t++) {
        advantages[offsets[i]! + t] = all[at + (i - b.first) * b.width + t]!;
      }
    }
    at += b.size * b.width;
  }
  return { advantages, returns };
}

/** Baseline subtraction over `[prompts, n]` in prompt order, then back to the listed order. */
function shapeRewards(
  rewards: ArrayLike<number>,
  order: Int32Array,
  n: number,
  estimator: OpenrlhfEstimator,
): Float32Array {
  const B = rewards.length;
  const r = new Float32Array(B);
  for (let k = 0; k < B; k++) r[order[k]!] = rewards[k]!;
  const out = Float32Array.from(r);
  const prompts = B / n;
  for (let p = 0; p < prompts; p++) {
    const from = p * n;
    const to = from + n;
    const sum = torchSumF32(r, from, to);
    const mean = f32(sum / n);
    const std =
      estimator === 'group_norm'
        ? prompts === 1
          ? torchStdAllF32(r, from, to)
          : torchStdWelfordF32((j) => r[from + j]!, n)
        : 0;
    for (let i = from; i < to; i++) {
      if (estimator === 'rloo') out[i] = f32(r[i]! - f32(f32(sum - r[i]!) / (n - 1)));
      else if (estimator === 'reinforce_baseline' || estimator === 'dr_grpo') out[i] = f32(r[i]! - mean);
      else if (estimator === 'group_norm') out[i] = f32(f32(r[i]! - mean) / f32(std + f32(1e-9)));
    }
  }
  return Float32Array.from(order, (o) => out[o]!);
}

interface Block {
  first: number;
  size: number;
  width: number;
  offsets: Int32Array;
  mask: Uint8Array;
  shaped: Float32Array;
  gamma: number;
  lambd: number;
  klCoef: number;
}

/** One experience: `compute_reward`, then cumulative returns or GAE, on its padded `[size, width]` block. */
function experience(input: OpenrlhfInput, options: OpenrlhfOptions, b: Block) {
  const { first, size, width, offsets, klCoef } = b;
  const cells = size * width;
  const mask = new Float32Array(cells);
  const tokenRewards = new Float32Array(cells);
  const values = new Float32Array(cells);
  const clip = options.rewardClipRange;
  for (let i = 0; i < size; i++) {
    const s = first + i;
    const len = offsets[s + 1]! - offsets[s]!;
    let last = width - 1; // no action token: argmax of an all-zero row is 0, so the reward lands on the last column
    for (let t = 0; t < len; t++) {
      const k = i * width + t;
      mask[k] = b.mask[offsets[s]! + t]!;
      if (mask[k]) last = t;
      const kl = input.kl ? f32(input.kl[offsets[s]! + t]!) : 0;
      // last_reward (0 here) + kl_reward: 0 + (−0) is +0, as in torch.
      tokenRewards[k] = f32(0 + f32(f32(-klCoef) * kl));
      if (input.values) values[k] = f32(mask[k]! * f32(input.values[offsets[s]! + t]!));
    }
    let r = b.shaped[s]!;
    if (clip) r = Math.min(f32(clip[1]), Math.max(f32(clip[0]), r));
    tokenRewards[i * width + last] = f32(tokenRewards[i * width + last]! + r);
  }
  const masked = tokenRewards.map((v, k) => f32(mask[k]! * v));
  const adv = new Float32Array(cells);
  const returns = new Float32Array(cells);
  const gammaLambda = f32(b.gamma * b.lambd);
  for (let i = 0; i < size; i++) {
    let running = 0;
    for (let t = width - 1; t >= 0; t--) {
      const k = i * width + t;
      if (options.estimator === 'gae') {
        const next = t < width - 1 ? values[k + 1]! : 0;
        const delta = f32(f32(masked[k]! + f32(f32(b.gamma) * next)) - values[k]!);
        running = f32(delta + f32(gammaLambda * running));
        adv[k] = running;
        returns[k] = f32(running + values[k]!);
      } else {
        running = f32(masked[k]! + f32(f32(b.gamma) * running));
        returns[k] = running;
        adv[k] = running;
      }
    }
  }
  return { adv, mask, returns };
}

function concat(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * OpenRLHF `compute_approx_kl`: k1 `lr`, k2 `lr²/2`, k3 `exp(−lr) − 1 + lr` with `lr = logp − base`,
 * every estimator clamped to [−10, 10].
 */
export function openrlhfApproxKl(
  logProbs: ArrayLike<number>,
  baseLogProbs: ArrayLike<number>,
  options: { estimator?: 'k1' | 'k2' | 'k3' | undefined } = {},
): Float32Array {
  const { estimator = 'k1' } = options;
  if (!['k1', 'k2', 'k3'].includes(estimator)) {
    throw new ConfigError(`estimator: unknown KL estimator ${JSON.stringify(estimator)}; use k1, k2 or k3`);
  }
  if (baseLogProbs.length !== logProbs.length) {
    throw new ValidationError(
      'baseLogProbs',
      `has ${baseLogProbs.length} values but logProbs has ${logProbs.length}`,
    );
  }
  return Float32Array.from(logProbs, (lp, i) => {
    const lr = f32(f32(lp) - f32(baseLogProbs[i]!));
    const kl =
      estimator === 'k1'
        ? lr
        : estimator === 'k2'
          ? f32(f32(lr * lr) / 2)
          : f32(f32(f32(Math.exp(-lr)) - 1) + lr);
    return Math.min(10, Math.max(-10, kl));
  });
}
