import { ValidationError } from '@vime/core';
import { type GroupReport, normalizeGroups } from '../estimators/advantages.js';
import type { GroupingOptions } from '../estimators/groups.js';
import { resolveGroups } from '../estimators/groups.js';
import {
  type BroadcastMode,
  type ConventionOptions,
  type Preset,
  resolveConventions,
} from '../estimators/presets.js';
import { openrlhfAdvantages } from '../trainers/openrlhf.js';
import { SLIME_ESTIMATORS, type SlimeEstimator, slimeAdvantagesAndReturns } from '../trainers/slime.js';
import { verlAdvantages } from '../trainers/verl.js';

/** The check's data model and its recomputation of one convention (shared by the check and its convention search). */

/** Trainer-native sequence estimators the check can recompute besides slime's pipeline. */
export const TRAINER_ESTIMATORS = [
  'verl:grpo_passk',
  'verl:rloo',
  'verl:rloo_vectorized',
  'verl:opo',
  'verl:gpg',
  'verl:reinforce_plus_plus_baseline',
  'verl:reinforce_plus_plus',
  'verl:remax',
  'verl:gae',
  'openrlhf:rloo',
  'openrlhf:reinforce_baseline',
  'openrlhf:reinforce',
  'openrlhf:gae',
] as const;
/** Another trainer's estimator, as `verl:<name>` or `openrlhf:<name>`. */
export type TrainerEstimator = (typeof TRAINER_ESTIMATORS)[number];
/** slime's `--advantage-estimator`, or `verl:<name>` / `openrlhf:<name>` for another trainer's estimator. */
export type CheckEstimator = SlimeEstimator | TrainerEstimator;
/** Every estimator the golden check can recompute. */
export const CHECK_ESTIMATORS: readonly CheckEstimator[] = [...SLIME_ESTIMATORS, ...TRAINER_ESTIMATORS];

/** How close a recomputed value must be to the trainer's: `abs + rel × |expected|`. */
export interface Tolerance {
  /** Absolute part (default 1e-6). */
  abs: number;
  /** Relative part (default 1e-5): a value matches when `|a − e| ≤ abs + rel·|e|`. */
  rel: number;
}

/** Options of the golden check. */
export interface CheckOptions extends Omit<ConventionOptions, 'preset'> {
  /** The trainer's conventions; `'auto'` tries every known convention and reports those that reproduce the dump. */
  preset?: Preset | 'auto' | undefined;
  /** The trainer's `--advantage-estimator` (default grpo), or another trainer's estimator (`verl:rloo`, …). */
  estimator?: CheckEstimator | undefined;
  tolerance?: Partial<Tolerance> | undefined;
  /** Positional groups of this size when the samples carry no `group_index` (`--n-samples-per-prompt`). */
  groupSize?: number | undefined;
  allowUnevenGroups?: boolean | undefined;
  /**
   * One reward per rollout: rows that share a rollout id (a rollout recorded as several samples) are one
   * member of their group, normalised once, its value on each of its rows (the bridge's and the closed
   * loop's normalisation). Off by default: slime itself normalises each row as a sample.
   */
  perRollout?: boolean | undefined;
  /** Key of the scalar in dict rewards (`--reward-key`). */
  rewardKey?: string | undefined;
  /** `--disable-rewards-normalization` when false. */
  rewardsNormalization?: boolean | undefined;
  klCoef?: number | undefined;
  /** `--use-opd --opd-kl-coef`: subtract `coef·(logp − teacher)` using the dumped teacher log-probs. */
  opdKlCoef?: number | undefined;
  /** `--normalize-advantages` (default: on for the REINFORCE++ estimators, which require it). */
  normalizeAdvantages?: boolean | undefined;
  gamma?: number | undefined;
  lambda?: number | undefined;
}

/** One token whose recomputed value differs from the trainer's. */
export interface TokenMismatch {
  /** Token index within the response. */
  token: number;
  expected: number;
  actual: number;
  lossMask: number;
}

/** The golden check of one training sample. */
export interface SampleCheck {
  /** Index in the training samples. */
  row: number;
  /** Position in the rollout batch. */
  rolloutPosition: number;
  sampleIndex: number | null;
  group: number | string;
  rawReward: number;
  /** The recomputed scalar (group-normalized) reward, and the trainer's when the dump has it. */
  reward: { expected: number; trainer: number | null; ok: boolean };
  tokens: number;
  maxAbsError: number;
  maxRelError: number;
  /** Tokens whose value equals the recomputation bit for bit. */
  bitExactTokens: number;
  firstMismatch: TokenMismatch | null;
  /** Largest returns error, when the trainer dumped returns. */
  returnsMaxAbsError: number | null;
  ok: boolean;
}

/** A convention that reproduces the trainer's values (or comes closest), from the convention search. */
export interface ConventionMatch {
  /** What it is, e.g. `preset 'verl'` or `verl estimator 'rloo_vectorized'`. */
  name: string;
  /** The check options that select it. */
  options: CheckOptions;
  /** The `vime-grpo check` flags that select it. */
  flags: string;
  mismatchedSamples: number;
  bitExactTokens: number;
  tokens: number;
  maxAbsError: number;
}

/** What `preset: 'auto'` found: how many conventions were tried and which reproduce the dump. */
export interface AutoReport {
  /** How many conventions were tried. */
  tried: number;
  /** The ones that reproduce every token within tolerance, best (most bit-exact tokens) first. */
  matches: ConventionMatch[];
  /** The closest one when none matches (fewest mismatched samples, then smallest error). */
  closest: ConventionMatch | null;
}

/** The golden check of a trainer dump: a verdict and, per sample, the tokens that differ. */
export interface CheckReport {
  verdict: 'match' | 'mismatch';
  /** The preset the samples below were recomputed with (under `'auto'`: the best match's, or slime). */
  preset: Preset;
  estimator: CheckEstimator;
  tolerance: Tolerance;
  rolloutId: number | null;
  samples: SampleCheck[];
  groups: GroupReport[];
  summary: {
    samples: number;
    mismatchedSamples: number;
    tokens: number;
    bitExactTokens: number;
    maxAbsError: number;
    maxRelError: number;
    zeroVarianceGroups: number;
  };
  /** Where to look when the verdict is a mismatch (e.g. a preset or grouping that does match). */
  hints: string[];
  /** Trainer behaviour that agrees with the recomputation but is still wrong (e.g. a uniform group with non-zero advantages). */
  warnings: string[];
  /** With `preset: 'auto'`: every convention that reproduces the dump. */
  auto?: AutoReport | undefined;
}

/** One training row as the check sees it, from either input form. */
export interface Row {
  position: number;
  sampleIndex: number | null;
  responseLength: number;
  lossMask: Uint8Array;
  advantages: ArrayLike<number>;
  returns: ArrayLike<number> | undefined;
  trainerReward: number | null;
  logProbs?: ArrayLike<number> | undefined;
  refLogProbs?: ArrayLike<number> | undefined;
  values?: ArrayLike<number> | undefined;
  teacherLogProbs?: ArrayLike<number> | undefined;
  kl?: ArrayLike<number> | undefined;
}

export interface Batch {
  rolloutId: number | null;
  rawRewards: number[];
  groupKeys: Array<number | string> | null;
  rows: Row[];
}

export interface Recomputed {
  scalars: ArrayLike<number>;
  advantages: Float32Array;
  returns: Float32Array;
}

export function recompute(batch: Batch, options: CheckOptions, grouping: GroupingOptions): Recomputed {
  const estimator = options.estimator ?? 'grpo';
  if (estimator.includes(':'))
    return recomputeTrainerEstimator(batch, estimator as TrainerEstimator, options, grouping);
  const preset = options.preset && options.preset !== 'auto' ? options.preset : 'slime';
  const conventions = resolveConventions({ ...options, preset });
  const normalizes =
    (options.rewardsNormalization ?? true) &&
    ['grpo', 'gspo', 'cispo', 'reinforce_plus_plus_baseline'].includes(estimator);
  let scalars: ArrayLike<number> = Float64Array.from(batch.rawRewards);
  if (normalizes) {
    const c =
      estimator === 'reinforce_plus_plus_baseline'
        ? { ...conventions, stdNormalization: false, scale: 'none' as const }
        : conventions;
    scalars = normalizeGroups(batch.rawRewards, resolveGroups(batch.rawRewards.length, grouping), c, {
      trainerResidual: true,
    });
  }
  const rows = batch.rows;
  const perSample = <K extends 'logProbs' | 'refLogProbs' | 'values' | 'teacherLogProbs' | 'kl'>(key: K) =>
    rows.every((r) => r[key]) ? rows.map((r) => r[key]!) : undefined;
  const logProbs = perSample('logProbs');
  const refLogProbs = perSample('refLogProbs');
  const values = perSample('values');
  // The trainer's own per-token KL (its --kl-loss-type is not in the dump).
  const kl = perSample('kl');
  const required = (key: 'teacherLogProbs') => {
    const column = perSample(key);
    if (!column)
      throw new ValidationError('trainDump.samples', 'opdKlCoef needs teacher_log_probs in every sample');
    return column;
  };
  const result = slimeAdvantagesAndReturns({
    estimator: estimator as SlimeEstimator,
    rewards: rows.map((r) => scalars[r.position]!),
    responseLengths: rows.map((r) => r.responseLength),
    lossMasks: rows.map((r) => r.lossMask),
    logProbs,
    refLogProbs,
    values,
    kl,
    ...(options.opdKlCoef !== undefined
      ? { teacherLogProbs: required('teacherLogProbs'), opdKlCoef: options.opdKlCoef }
      : {}),
    klCoef: options.klCoef ?? 0,
    gamma: options.gamma ?? 1,
    lambda: options.lambda ?? 1,
    normalizeAdvantages: options.normalizeAdvantages ?? estimator.startsWith('reinforce_plus_plus'),
  });
  // The GRPO family's returns are its advantages: both take the trainer's token broadcast.
  const same = ['grpo', 'gspo', 'cispo'].includes(estimator);
  applyBroadcast(rows, conventions.broadcast, result.advantages);
  if (same) applyBroadcast(rows, conventions.broadcast, result.returns);
  return { scalars, advantages: result.advantages, returns: result.returns };
}

/**
 * verl multiplies by the mask (a negative advantage leaves −0 on masked tokens); OpenRLHF's cumulative
 * return leaves +0 after the last mask-1 token.
 */
function applyBroadcast(rows: Row[], mode: BroadcastMode, values: Float32Array): void {
  if (mode === 'allTokens') return;
  let t = 0;
  for (const r of rows) {
    let last = -1;
    if (mode === 'throughLastToken') for (let j = 0; j < r.responseLength; j++) if (r.lossMask[j]) last = j;
    for (let j = 0; j < r.responseLength; j++, t++) {
      if (mode === 'maskedTokens') values[t] = values[t]! * r.lossMask[j]!;
      else if (j > last) values[t] = 0;
    }
  }
}

/** verl's or OpenRLHF's own sequence estimator on the dumped rewards, with that trainer's token layout. */
function recomputeTrainerEstimator(
  batch: Batch,
  estimator: TrainerEstimator,
  options: CheckOptions,
  grouping: GroupingOptions,
): Recomputed {
  const [trainer, name] = estimator.split(':') as ['verl' | 'openrlhf', string];
  const groups = resolveGroups(batch.rawRewards.length, grouping);
  const rows = batch.rows;
  const rewards = rows.map((r) => batch.rawRewards[r.position]!);
  const lengths = rows.map((r) => r.responseLength);
  const masks = rows.map((r) => r.lossMask);
  const ones = rows.map(() => [1]);
  // GAE needs the critic's values, which a PPO trainer's dump carries; without them it cannot apply.
  const values = (perToken: boolean) => {
    if (name !== 'gae') return undefined;
    if (rows.some((r) => !r.values)) throw new ValidationError('values', 'the dump has no critic values');
    return Float64Array.from(rows.flatMap((r) => (perToken ? Array.from(r.values!) : [r.values![0]!])));
  };
  const index = rows.map((r) => groups.keys[groups.groupOf[r.position]!]!);
  const verl = (
    responseLengths: number[],
    lossMasks: ArrayLike<number>[],
    extra: { values?: ArrayLike<number> | undefined; rewardBaselines?: ArrayLike<number> | undefined },
  ) =>
    verlAdvantages(
      { scores: rewards, responseLengths, lossMasks, index, ...extra },
      { estimator: name as 'rloo', normAdvByStdInGrpo: options.stdNormalization ?? true },
    );
  // ReMax subtracts the reward of each prompt's greedy rollout, which a dump does not keep: take it from
  // the dump as the group's mean of return − advantage on its first trained token, so a match means one
  // baseline per prompt explains every token.
  const baselines = (): Float64Array | undefined => {
    if (name !== 'remax') return undefined;
    const plain = verl(lengths, masks, { rewardBaselines: new Float64Array(rows.length) }).returns;
    const sums = new Map<number | string, { sum: number; n: number }>();
    let at = 0;
    rows.forEach((r, i) => {
      const t = r.lossMask.indexOf(1);
      if (t >= 0) {
        const g = sums.get(index[i]!) ?? { sum: 0, n: 0 };
        g.sum += plain[at + t]! - r.advantages[t]!;
        g.n++;
        sums.set(index[i]!, g);
      }
      at += r.responseLength;
    });
    return Float64Array.from(index, (k) => {
      const g = sums.get(k);
      return g ? g.sum / g.n : 0;
    });
  };
  const rewardBaselines = baselines();
  const run = (responseLengths: number[], lossMasks: ArrayLike<number>[]) => {
    const perToken = lossMasks !== ones;
    if (trainer === 'verl') {
      const v = values(perToken);
      return verl(responseLengths, lossMasks, { values: v, rewardBaselines });
    }
    const n = groups.starts[1]!;
    const positional = Array.from(groups.groupOf).every((g, i) => g === Math.floor(i / n));
    if (!positional || rows.length !== batch.rawRewards.length) {
      throw new ValidationError(
        'groups',
        'OpenRLHF groups consecutive blocks of n_samples_per_prompt samples',
      );
    }
    const v = values(perToken);
    return openrlhfAdvantages(
      { rewards, responseLengths, actionMasks: lossMasks, values: v },
      { estimator: name as 'rloo', nSamplesPerPrompt: n },
    );
  };
  const tokens = run(lengths, masks);
  // The scalar: the same estimator on one mask-1 token per response.
  const perSequence = run(
    lengths.map(() => 1),
    ones,
  ).advantages;
  const scalars = new Float64Array(batch.rawRewards.length);
  rows.forEach((r, i) => {
    scalars[r.position] = perSequence[i]!;
  });
  return {
    scalars,
    advantages: Float32Array.from(tokens.advantages),
    returns: Float32Array.from(tokens.returns),
  };
}

export function compareRows(
  batch: Batch,
  re: Recomputed,
  tol: Tolerance,
  grouping: GroupingOptions,
): SampleCheck[] {
  const groups = resolveGroups(batch.rawRewards.length, grouping);
  const close = (a: number, e: number) => Math.abs(a - e) <= tol.abs + tol.rel * Math.abs(e);
  let t = 0;
  return batch.rows.map((r, row) => {
    let maxAbs = 0;
    let maxRel = 0;
    let exact = 0;
    let first: TokenMismatch | null = null;
    let returnsMax: number | null = r.returns ? 0 : null;
    for (let j = 0; j < r.responseLength; j++, t++) {
      const e = re.advantages[t]!;
      const a = r.advantages[j]!;
      const err = Math.abs(a - e);
      maxAbs = Math.max(maxAbs, err);
      if (e !== 0) maxRel = Math.max(maxRel, err / Math.abs(e));
      if (Object.is(a, e)) exact++;
      if (!close(a, e) && !first) first = { token: j, expected: e, actual: a, lossMask: r.lossMask[j]! };
      if (r.returns) {
        const er = Math.abs(r.returns[j]! - re.returns[t]!);
        returnsMax = Math.max(returnsMax!, er);
        if (!close(r.returns[j]!, re.returns[t]!) && !first) {
          first = { token: j, expected: re.returns[t]!, actual: r.returns[j]!, lossMask: r.lossMask[j]! };
        }
      }
    }
    const expectedReward = re.scalars[r.position]!;
    const rewardOk = r.trainerReward === null || close(r.trainerReward, expectedReward);
    return {
      row,
      rolloutPosition: r.position,
      sampleIndex: r.sampleIndex,
      group: groups.keys[groups.groupOf[r.position]!]!,
      rawReward: batch.rawRewards[r.position]!,
      reward: { expected: expectedReward, trainer: r.trainerReward, ok: rewardOk },
      tokens: r.responseLength,
      maxAbsError: maxAbs,
      maxRelError: maxRel,
      bitExactTokens: exact,
      firstMismatch: first,
      returnsMaxAbsError: returnsMax,
      ok: rewardOk && first === null,
    };
  });
}

export function groupingFor(batch: Batch, options: CheckOptions): GroupingOptions {
  const allowUnevenGroups = options.allowUnevenGroups ?? false;
  if (options.groupSize !== undefined) return { groupSize: options.groupSize, allowUnevenGroups };
  if (batch.groupKeys) return { groups: batch.groupKeys, allowUnevenGroups };
  throw new ValidationError(
    'groupSize',
    "the samples carry no group_index; pass groupSize (the run's --n-samples-per-prompt)",
  );
}
