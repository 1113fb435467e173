import { describeValue, ValidationError } from '@vime/core';
import { f32, torchSumF32 } from '../estimators/f32.js';
import { gae } from '../estimators/gae.js';
import { maskedWhiten, reinforcePlusPlusReturns } from '../estimators/returns.js';
import { flattenMasks, type LossMasks, tokenOffsets } from '../tokens/tokens.js';
import { approxKl, cispoLoss, gspoSequenceKl, type KlType, policyLoss, sumOfSampleMean } from './loss.js';

/**
 * slime's trainer-side computations, reproduced in float32 for checking a trainer: the per-token
 * advantages and returns of `compute_advantages_and_returns`, and the policy loss of `loss_function`.
 */

export type SlimeEstimator =
  | 'grpo'
  | 'gspo'
  | 'cispo'
  | 'ppo'
  | 'reinforce_plus_plus'
  | 'reinforce_plus_plus_baseline';
/** Every slime `--advantage-estimator` reproduced here. */
export const SLIME_ESTIMATORS = [
  'grpo',
  'gspo',
  'cispo',
  'ppo',
  'reinforce_plus_plus',
  'reinforce_plus_plus_baseline',
] as const satisfies readonly SlimeEstimator[];

/** Per-token values: one flat array over all responses, or one array per sample. */
export type TokenValues = ArrayLike<number> | ReadonlyArray<ArrayLike<number>>;

/** Flatten per-sample token arrays (or check a flat one) against the response offsets, as float32. */
export function flattenTokens(values: TokenValues, offsets: Int32Array, what: string): Float32Array {
  const n = offsets.length - 1;
  const total = offsets[n]!;
  const first = (values as ArrayLike<unknown>)[0];
  if (values.length > 0 && typeof first !== 'number') {
    const perSample = values as ReadonlyArray<ArrayLike<number>>;
    if (perSample.length !== n) {
      throw new ValidationError(what, `has ${perSample.length} per-sample arrays but there are ${n} samples`);
    }
    const out = new Float32Array(total);
    for (let i = 0; i < n; i++) {
      const len = offsets[i + 1]! - offsets[i]!;
      if (perSample[i]?.length !== len) {
        throw new ValidationError(
          `${what}[${i}]`,
          `has ${describeValue(perSample[i])} but response ${i} is ${len} tokens long`,
        );
      }
      out.set(perSample[i]!, offsets[i]!);
    }
    return out;
  }
  if (values.length !== total) {
    throw new ValidationError(what, `has ${values.length} values but the responses hold ${total} tokens`);
  }
  return Float32Array.from(values as ArrayLike<number>);
}

/** What slime's advantage computation takes. */
export interface SlimeAdvantageInput {
  estimator: SlimeEstimator;
  /** Post-processed scalar rewards (after group normalization), one per sample. */
  rewards: ArrayLike<number>;
  responseLengths: ArrayLike<number>;
  lossMasks: LossMasks;
  /** Trainer (old-policy) log-probs; needed when klCoef ≠ 0 or with OPD. */
  logProbs?: TokenValues | undefined;
  refLogProbs?: TokenValues | undefined;
  /** Critic values (ppo). */
  values?: TokenValues | undefined;
  /** Teacher log-probs: subtract `opdKlCoef·(logp − teacher)` from the advantages (`--use-opd`). */
  teacherLogProbs?: TokenValues | undefined;
  opdKlCoef?: number | undefined;
  /** Per-token KL as the trainer computed it (`rollout_data["kl"]`); computed from the log-probs when absent. */
  kl?: TokenValues | undefined;
  klCoef?: number | undefined;
  klType?: KlType | undefined;
  gamma?: number | undefined;
  lambda?: number | undefined;
  /** `--normalize-advantages`: masked whitening over all tokens of the batch. */
  normalizeAdvantages?: boolean | undefined;
}

/** Per-token advantages and returns, as slime computes them. */
export interface SlimeAdvantageResult {
  /** Flat per-token advantages (use `splitTokens` for per-sample views). */
  advantages: Float32Array;
  returns: Float32Array;
  kl: Float32Array;
  /** `logp − teacher` per token, when OPD is on. */
  opdReverseKl?: Float32Array | undefined;
}

/** slime's `compute_advantages_and_returns` for one rank (no context parallelism). */
export function slimeAdvantagesAndReturns(input: SlimeAdvantageInput): SlimeAdvantageResult {
  const { estimator, rewards, klCoef = 0, klType = 'k1', gamma = 1, lambda = 1 } = input;
  if (!SLIME_ESTIMATORS.includes(estimator)) {
    throw new ValidationError(
      'estimator',
      `unknown estimator ${describeValue(estimator)}; use one of ${SLIME_ESTIMATORS.join(', ')}`,
    );
  }
  const n = rewards.length;
  const offsets = tokenOffsets(input.responseLengths, n);
  const total = offsets[n]!;
  const mask = flattenMasks(input.lossMasks, offsets);
  const logProbs = input.logProbs ? flattenTokens(input.logProbs, offsets, 'logProbs') : undefined;
  let kl: Float32Array;
  if (input.kl) {
    kl = flattenTokens(input.kl, offsets, 'kl');
  } else if (klCoef === 0 || !logProbs) {
    kl = new Float32Array(total);
  } else {
    if (!input.refLogProbs)
      throw new ValidationError('refLogProbs', 'klCoef ≠ 0 needs the reference log-probs');
    kl = approxKl(logProbs, flattenTokens(input.refLogProbs, offsets, 'refLogProbs'), {
      type: klType,
    }) as Float32Array;
  }
  let advantages: Float32Array;
  let returns: Float32Array;
  const coef = f32(klCoef);
  switch (estimator) {
    case 'grpo':
    case 'gspo':
    case 'cispo': {
      returns = new Float32Array(total);
      for (let i = 0; i < n; i++) returns.fill(f32(rewards[i]!), offsets[i]!, offsets[i + 1]!);
      advantages = returns.slice();
      break;
    }
    case 'reinforce_plus_plus_baseline': {
      advantages = new Float32Array(total);
      for (let i = 0; i < n; i++) {
        const r = f32(rewards[i]!);
        for (let t = offsets[i]!; t < offsets[i + 1]!; t++) advantages[t] = f32(r - f32(coef * kl[t]!));
      }
      returns = advantages.slice();
      break;
    }
    case 'reinforce_plus_plus': {
      returns = reinforcePlusPlusReturns({
        rewards: Float32Array.from(rewards),
        responseLengths: input.responseLengths,
        lossMasks: mask,
        kl,
        klCoef,
        gamma,
      }) as Float32Array;
      advantages = returns.slice();
      break;
    }
    case 'ppo': {
      if (!input.values) throw new ValidationError('values', "estimator 'ppo' needs the critic values");
      const values = flattenTokens(input.values, offsets, 'values');
      const tokenRewards = new Float32Array(total);
      for (let t = 0; t < total; t++) tokenRewards[t] = f32(kl[t]! * f32(-klCoef));
      for (let i = 0; i < n; i++) {
        // slime puts the reward on the response's last token, whatever its mask.
        if (offsets[i + 1]! > offsets[i]!) {
          const last = offsets[i + 1]! - 1;
          tokenRewards[last] = f32(tokenRewards[last]! + f32(rewards[i]!));
        }
      }
      const result = gae({ tokenRewards, values, responseLengths: input.responseLengths, gamma, lambda });
      advantages = result.advantages as Float32Array;
      returns = result.returns as Float32Array;
      break;
    }
  }
  let opdReverseKl: Float32Array | undefined;
  if (input.teacherLogProbs) {
    if (!logProbs) throw new ValidationError('logProbs', 'OPD needs the student log-probs');
    const teacher = flattenTokens(input.teacherLogProbs, offsets, 'teacherLogProbs');
    const c = f32(input.opdKlCoef ?? 1);
    opdReverseKl = new Float32Array(total);
    advantages = advantages.slice();
    for (let t = 0; t < total; t++) {
      opdReverseKl[t] = f32(logProbs[t]! - teacher[t]!);
      advantages[t] = f32(advantages[t]! - f32(c * opdReverseKl[t]!));
    }
  }
  if (input.normalizeAdvantages) advantages = maskedWhiten(advantages, mask) as Float32Array;
  return { advantages, returns, kl, ...(opdReverseKl ? { opdReverseKl } : {}) };
}

/** Log-probs of the response tokens and the per-token entropy from packed logits `[T, V]`. */
export function logProbsFromLogits(input: {
  logits: ArrayLike<number> | ReadonlyArray<ArrayLike<number>>;
  vocabSize: number;
  /** Prompt + response ids per sample, packed in this order. */
  tokens: ReadonlyArray<ArrayLike<number>>;
  responseLengths: ArrayLike<number>;
  temperature?: number | undefined;
}): { logProbs: Float32Array; entropy: Float32Array } {
  const { vocabSize: V, tokens, temperature = 1 } = input;
  const logits =
    typeof (input.logits as ArrayLike<unknown>)[0] === 'number'
      ? Float32Array.from(input.logits as ArrayLike<number>)
      : Float32Array.from(
          (input.logits as ReadonlyArray<ArrayLike<number>>).flatMap((row) => Array.from(row)),
        );
  const offsets = tokenOffsets(input.responseLengths, tokens.length);
  const logProbs = new Float32Array(offsets[tokens.length]!);
  const entropy = new Float32Array(logProbs.length);
  const row = new Float32Array(V);
  const work = new Float32Array(V);
  let end = 0;
  for (let i = 0; i < tokens.length; i++) {
    const seq = tokens[i]!;
    const R = offsets[i + 1]! - offsets[i]!;
    end += seq.length;
    const start = end - R;
    if ((end - 1) * V > logits.length) {
      throw new ValidationError(
        'logits',
        `has ${logits.length / V} rows but sample ${i} needs row ${end - 2}`,
      );
    }
    for (let t = 0; t < R; t++) {
      const at = (start - 1 + t) * V;
      for (let v = 0; v < V; v++)
        row[v] = temperature === 1 ? logits[at + v]! : f32(logits[at + v]! / temperature);
      let max = -Infinity;
      for (let v = 0; v < V; v++) max = Math.max(max, row[v]!);
      const target = seq[seq.length - R + t]!;
      if (!(Number.isInteger(target) && target >= 0 && target < V)) {
        throw new ValidationError(
          `tokens[${i}][${seq.length - R + t}]`,
          `token id ${target} is outside the vocabulary of ${V}`,
        );
      }
      const predicted = f32(row[target]! - max);
      for (let v = 0; v < V; v++) work[v] = f32(Math.exp(f32(row[v]! - max)));
      const sumExp = torchSumF32(work, 0, V);
      const logSum = f32(Math.log(sumExp));
      logProbs[offsets[i]! + t] = f32(predicted - logSum);
      for (let v = 0; v < V; v++) work[v] = f32(f32(work[v]! / sumExp) * row[v]!);
      entropy[offsets[i]! + t] = f32(f32(max + logSum) - torchSumF32(work, 0, V));
    }
  }
  return { logProbs, entropy };
}

/** What slime's policy loss is computed from. */
export interface SlimeLossInput {
  estimator?: SlimeEstimator | undefined;
  logits: ArrayLike<number> | ReadonlyArray<ArrayLike<number>>;
  vocabSize: number;
  tokens: ReadonlyArray<ArrayLike<number>>;
  responseLengths: ArrayLike<number>;
  lossMasks: LossMasks;
  advantages: TokenValues;
  oldLogProbs: TokenValues;
  refLogProbs?: TokenValues | undefined;
  /** Per-sample loss denominators: the mask total of every sample sharing the rollout id. */
  rolloutMaskSums?: ArrayLike<number> | undefined;
  epsClip?: number | undefined;
  epsClipHigh?: number | undefined;
  epsClipC?: number | null | undefined;
  entropyCoef?: number | undefined;
  useKlLoss?: boolean | undefined;
  klLossType?: KlType | undefined;
  klLossCoef?: number | undefined;
  useUnbiasedKl?: boolean | undefined;
  calculatePerTokenLoss?: boolean | undefined;
  numMicrobatches?: number | undefined;
  /** Rollouts (not rows) in the step's global batch. */
  stepGlobalBatchSize: number;
  temperature?: number | undefined;
}

/** slime's policy loss and the metrics it logs. */
export interface SlimeLoss {
  /** The loss Megatron back-propagates (scaled). */
  loss: number;
  /** Megatron's normalizer: the token count with `calculatePerTokenLoss`, else 1. */
  normalizer: number;
  /** Un-scaled reducer sums: loss, pg_loss, entropy_loss, pg_clipfrac, ppo_kl[, kl_loss]. */
  metrics: Record<string, number>;
}

/** slime's `loss_function` with `policy_loss_function` for one micro-batch on one rank. */
export function slimePolicyLoss(input: SlimeLossInput): SlimeLoss {
  const {
    estimator = 'grpo',
    epsClip = 0.2,
    entropyCoef = 0,
    klLossCoef = 0,
    klLossType = 'k1',
    calculatePerTokenLoss = false,
    numMicrobatches = 1,
  } = input;
  const n = input.tokens.length;
  const offsets = tokenOffsets(input.responseLengths, n);
  const mask = flattenMasks(input.lossMasks, offsets);
  const advantages = flattenTokens(input.advantages, offsets, 'advantages');
  const oldLogProbs = flattenTokens(input.oldLogProbs, offsets, 'oldLogProbs');
  const { logProbs, entropy } = logProbsFromLogits(input);
  const reduce = (x: ArrayLike<number>) =>
    sumOfSampleMean(x, input.responseLengths, mask, {
      sampleDenominators: input.rolloutMaskSums,
      perToken: calculatePerTokenLoss,
    });
  let ppoKl: Float32Array;
  if (estimator === 'gspo') {
    ppoKl = gspoSequenceKl(logProbs, oldLogProbs, input.responseLengths, mask) as Float32Array;
  } else {
    ppoKl = new Float32Array(logProbs.length);
    for (let t = 0; t < ppoKl.length; t++) ppoKl[t] = f32(oldLogProbs[t]! - logProbs[t]!);
  }
  const pg =
    estimator === 'cispo'
      ? cispoLoss(ppoKl, logProbs, advantages, { epsClip, epsClipHigh: input.epsClipHigh ?? epsClip })
      : policyLoss(ppoKl, advantages, {
          epsClip,
          epsClipHigh: input.epsClipHigh ?? epsClip,
          dualClipC: input.epsClipC ?? null,
        });
  const pgLoss = reduce(pg.losses);
  const entropyLoss = reduce(entropy);
  let loss = f32(pgLoss - f32(f32(entropyCoef) * entropyLoss));
  const metrics: Record<string, number> = {
    loss: 0,
    pg_loss: pgLoss,
    entropy_loss: entropyLoss,
    pg_clipfrac: reduce(pg.clipfrac),
    ppo_kl: reduce(ppoKl),
  };
  if (input.useKlLoss) {
    if (!input.refLogProbs)
      throw new ValidationError('refLogProbs', 'useKlLoss needs the reference log-probs');
    const ref = flattenTokens(input.refLogProbs, offsets, 'refLogProbs');
    let ratio: Float32Array | undefined;
    if (input.useUnbiasedKl) {
      ratio = new Float32Array(logProbs.length);
      for (let t = 0; t < ratio.length; t++) ratio[t] = f32(Math.exp(f32(logProbs[t]! - oldLogProbs[t]!)));
    }
    const kl = approxKl(logProbs, ref, { type: klLossType, importanceRatio: ratio });
    const klLoss = reduce(kl);
    loss = f32(loss + f32(f32(klLossCoef) * klLoss));
    metrics.kl_loss = klLoss;
  }
  metrics.loss = loss;
  let numTokens = 0;
  for (let i = 0; i < n; i++) {
    let c = 0;
    for (let t = offsets[i]!; t < offsets[i + 1]!; t++) c += mask[t]!;
    numTokens += Math.max(c, 1);
  }
  const scaled = calculatePerTokenLoss ? loss : f32(f32(loss * numMicrobatches) / input.stepGlobalBatchSize);
  return { loss: scaled, normalizer: calculatePerTokenLoss ? numTokens : 1, metrics };
}
