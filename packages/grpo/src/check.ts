import { ConfigError, describeValue, type Sample, ValidationError } from '@vime/core';
import { type GroupReport, groupStatistics, normalizeGroups } from './advantages.js';
import { type RolloutDump, rewardScalar, type TrainDump } from './dump.js';
import type { GroupingOptions } from './groups.js';
import { resolveGroups } from './groups.js';
import { type ConventionOptions, type Preset, resolveConventions } from './presets.js';
import { SLIME_ESTIMATORS, type SlimeEstimator, slimeAdvantagesAndReturns } from './slime.js';

/**
 * The golden check: recompute the advantages from the rewards, masks and lengths a trainer dumped,
 * with a chosen preset, and compare them token by token with the trainer's own `advantages`.
 */

export type CheckInput =
  | { rolloutDump?: RolloutDump; trainDump: TrainDump }
  | {
      /** Vime samples in rollout order (rewards, masks, lengths, group_index). */
      samples: ReadonlyArray<Sample>;
      /** The trainer's per-token advantages, one array per sample. */
      advantages: ReadonlyArray<ArrayLike<number>>;
      /** The trainer's per-token returns, if it has them. */
      returns?: ReadonlyArray<ArrayLike<number>>;
    };

export interface Tolerance {
  /** Absolute part (default 1e-6). */
  abs: number;
  /** Relative part (default 1e-5): a value matches when `|a − e| ≤ abs + rel·|e|`. */
  rel: number;
}

export interface CheckOptions extends ConventionOptions {
  preset?: Preset;
  /** The trainer's `--advantage-estimator` (default grpo). */
  estimator?: SlimeEstimator;
  tolerance?: Partial<Tolerance>;
  /** Positional groups of this size when the samples carry no `group_index` (`--n-samples-per-prompt`). */
  groupSize?: number;
  allowUnevenGroups?: boolean;
  /** Key of the scalar in dict rewards (`--reward-key`). */
  rewardKey?: string;
  /** `--disable-rewards-normalization` when false. */
  rewardsNormalization?: boolean;
  klCoef?: number;
  /** `--use-opd --opd-kl-coef`: subtract `coef·(logp − teacher)` using the dumped teacher log-probs. */
  opdKlCoef?: number;
  /** `--normalize-advantages` (default: on for the REINFORCE++ estimators, which require it). */
  normalizeAdvantages?: boolean;
  gamma?: number;
  lambda?: number;
}

export interface TokenMismatch {
  /** Token index within the response. */
  token: number;
  expected: number;
  actual: number;
  lossMask: number;
}

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

export interface CheckReport {
  verdict: 'match' | 'mismatch';
  preset: Preset;
  estimator: SlimeEstimator;
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
}

/** One training row as the check sees it, from either input form. */
interface Row {
  position: number;
  sampleIndex: number | null;
  responseLength: number;
  lossMask: Uint8Array;
  advantages: ArrayLike<number>;
  returns: ArrayLike<number> | undefined;
  trainerReward: number | null;
  logProbs?: ArrayLike<number>;
  refLogProbs?: ArrayLike<number>;
  values?: ArrayLike<number>;
  teacherLogProbs?: ArrayLike<number>;
  kl?: ArrayLike<number>;
}

interface Batch {
  rolloutId: number | null;
  rawRewards: number[];
  groupKeys: Array<number | string> | null;
  rows: Row[];
}

function fromDumps(input: { rolloutDump?: RolloutDump; trainDump: TrainDump }, options: CheckOptions): Batch {
  const { rolloutDump, trainDump } = input;
  const train = [...trainDump.samples].sort((a, b) => a.rollout_position - b.rollout_position);
  let rawRewards: number[];
  let groupKeys: Array<number | string> | null = null;
  if (rolloutDump) {
    if (rolloutDump.rollout_id !== trainDump.rollout_id) {
      throw new ValidationError(
        'rolloutDump.rollout_id',
        `is ${rolloutDump.rollout_id} but the train dump is for rollout ${trainDump.rollout_id}; pass the two files of the same rollout id`,
      );
    }
    rawRewards = rolloutDump.samples.map((s, i) =>
      rewardScalar(s.reward, options.rewardKey, `rolloutDump.samples[${i}].reward`),
    );
    if (rolloutDump.samples.every((s) => s.group_index !== null)) {
      groupKeys = rolloutDump.samples.map((s) => s.group_index!);
    }
    if (trainDump.raw_reward) {
      const trainRaw = trainDump.raw_reward.map((r, i) =>
        rewardScalar(r, options.rewardKey, `trainDump.raw_reward[${i}]`),
      );
      const differs = trainRaw.length !== rawRewards.length || trainRaw.some((r, i) => r !== rawRewards[i]);
      if (differs) {
        throw new ValidationError(
          'trainDump.raw_reward',
          `does not match the rollout dump's rewards (${trainRaw.length} vs ${rawRewards.length} values); are both files from the same run?`,
        );
      }
    }
  } else {
    if (!trainDump.raw_reward) {
      throw new ValidationError('rolloutDump', 'the train dump has no raw_reward; pass the rollout dump too');
    }
    rawRewards = trainDump.raw_reward.map((r, i) =>
      rewardScalar(r, options.rewardKey, `trainDump.raw_reward[${i}]`),
    );
  }
  const rows = train.map((s, i): Row => {
    if (s.rollout_position >= rawRewards.length) {
      throw new ValidationError(
        `trainDump.samples[${i}].rollout_position`,
        `is ${s.rollout_position} but the rollout holds ${rawRewards.length} samples`,
      );
    }
    const source = rolloutDump?.samples[s.rollout_position];
    if (source && source.response_length !== s.response_lengths) {
      throw new ValidationError(
        `trainDump.samples[${i}].response_lengths`,
        `is ${s.response_lengths} but rollout sample ${s.rollout_position} has response_length ${source.response_length}; the files do not belong together`,
      );
    }
    return {
      position: s.rollout_position,
      sampleIndex: s.sample_index ?? null,
      responseLength: s.response_lengths,
      lossMask: s.loss_masks,
      advantages: s.advantages,
      returns: s.returns,
      trainerReward: s.rewards,
      ...(s.log_probs ? { logProbs: s.log_probs } : {}),
      ...(s.ref_log_probs ? { refLogProbs: s.ref_log_probs } : {}),
      ...(s.values ? { values: s.values } : {}),
      ...(s.teacher_log_probs ? { teacherLogProbs: s.teacher_log_probs } : {}),
      ...(s.kl ? { kl: s.kl } : {}),
    };
  });
  return { rolloutId: trainDump.rollout_id, rawRewards, groupKeys, rows };
}

function fromSamples(
  input: {
    samples: ReadonlyArray<Sample>;
    advantages: ReadonlyArray<ArrayLike<number>>;
    returns?: ReadonlyArray<ArrayLike<number>>;
  },
  options: CheckOptions,
): Batch {
  const { samples, advantages } = input;
  if (!Array.isArray(samples) || samples.length === 0) {
    throw new ValidationError(
      'samples',
      `expected a non-empty array of samples, found ${describeValue(samples)}`,
    );
  }
  if (!Array.isArray(advantages) || advantages.length !== samples.length) {
    throw new ValidationError(
      'advantages',
      `expected one per-token array per sample (${samples.length}), found ${describeValue(advantages)}`,
    );
  }
  const rawRewards = samples.map((s, i) => rewardScalar(s.reward, options.rewardKey, `samples[${i}].reward`));
  const groupKeys = samples.every((s) => s.group_index !== null) ? samples.map((s) => s.group_index!) : null;
  const rows = samples.map((s, i): Row => {
    const mask = s.loss_mask ?? new Uint8Array(s.response_length).fill(1);
    if (mask.length !== s.response_length) {
      throw new ValidationError(
        `samples[${i}].loss_mask`,
        `has ${mask.length} entries but response_length is ${s.response_length}`,
      );
    }
    if (advantages[i]!.length !== s.response_length) {
      throw new ValidationError(
        `advantages[${i}]`,
        `has ${advantages[i]!.length} tokens but response_length is ${s.response_length}`,
      );
    }
    return {
      position: i,
      sampleIndex: s.index,
      responseLength: s.response_length,
      lossMask: mask,
      advantages: advantages[i]!,
      returns: input.returns?.[i],
      trainerReward: null,
    };
  });
  return { rolloutId: null, rawRewards, groupKeys, rows };
}

function resolveTolerance(t: Partial<Tolerance> | undefined): Tolerance {
  const out = { abs: t?.abs ?? 1e-6, rel: t?.rel ?? 1e-5 };
  for (const [k, v] of Object.entries(out)) {
    if (!(Number.isFinite(v) && v >= 0))
      throw new ConfigError(`tolerance.${k}: must be a finite number ≥ 0, found ${v}`);
  }
  return out;
}

interface Recomputed {
  scalars: ArrayLike<number>;
  advantages: Float32Array;
  returns: Float32Array;
}

function recompute(batch: Batch, options: CheckOptions, grouping: GroupingOptions): Recomputed {
  const estimator = options.estimator ?? 'grpo';
  const conventions = resolveConventions(options);
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
    estimator,
    rewards: rows.map((r) => scalars[r.position]!),
    responseLengths: rows.map((r) => r.responseLength),
    lossMasks: rows.map((r) => r.lossMask),
    ...(logProbs ? { logProbs } : {}),
    ...(refLogProbs ? { refLogProbs } : {}),
    ...(values ? { values } : {}),
    ...(kl ? { kl } : {}),
    ...(options.opdKlCoef !== undefined
      ? { teacherLogProbs: required('teacherLogProbs'), opdKlCoef: options.opdKlCoef }
      : {}),
    klCoef: options.klCoef ?? 0,
    gamma: options.gamma ?? 1,
    lambda: options.lambda ?? 1,
    normalizeAdvantages: options.normalizeAdvantages ?? estimator.startsWith('reinforce_plus_plus'),
  });
  if (conventions.broadcast === 'maskedTokens') {
    let t = 0;
    for (const r of rows)
      for (let j = 0; j < r.responseLength; j++, t++) if (!r.lossMask[j]) result.advantages[t] = 0;
  }
  return { scalars, advantages: result.advantages, returns: result.returns };
}

function compareRows(batch: Batch, re: Recomputed, tol: Tolerance, grouping: GroupingOptions): SampleCheck[] {
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

function groupingFor(batch: Batch, options: CheckOptions): GroupingOptions {
  const allowUnevenGroups = options.allowUnevenGroups ?? false;
  if (options.groupSize !== undefined) return { groupSize: options.groupSize, allowUnevenGroups };
  if (batch.groupKeys) return { groups: batch.groupKeys, allowUnevenGroups };
  throw new ValidationError(
    'groupSize',
    "the samples carry no group_index; pass groupSize (the run's --n-samples-per-prompt)",
  );
}

/**
 * Recompute the advantages a slime trainer should have produced and compare them with the ones it
 * dumped: per sample the largest absolute and relative error, the first mismatching token, the
 * scalar reward, and the group statistics; `verdict` is `match` when every token is within tolerance.
 */
export function checkAgainstTrainer(input: CheckInput, options: CheckOptions = {}): CheckReport {
  const preset = options.preset ?? 'slime';
  const estimator = options.estimator ?? 'grpo';
  if (!SLIME_ESTIMATORS.includes(estimator)) {
    throw new ConfigError(
      `estimator: unknown ${JSON.stringify(estimator)}; use one of ${SLIME_ESTIMATORS.join(', ')}`,
    );
  }
  const tolerance = resolveTolerance(options.tolerance);
  const batch = 'trainDump' in input ? fromDumps(input, options) : fromSamples(input, options);
  const grouping = groupingFor(batch, options);
  const recomputed = recompute(batch, { ...options, preset }, grouping);
  const samples = compareRows(batch, recomputed, tolerance, grouping);
  const stats = groupStatistics(batch.rawRewards, { ...options, preset, ...grouping });
  const mismatched = samples.filter((s) => !s.ok);
  const hints = mismatched.length > 0 ? explain(batch, options, preset, estimator, tolerance, grouping) : [];
  return {
    verdict: mismatched.length === 0 ? 'match' : 'mismatch',
    preset,
    estimator,
    tolerance,
    rolloutId: batch.rolloutId,
    samples,
    groups: stats.groups,
    summary: {
      samples: samples.length,
      mismatchedSamples: mismatched.length,
      tokens: samples.reduce((a, s) => a + s.tokens, 0),
      bitExactTokens: samples.reduce((a, s) => a + s.bitExactTokens, 0),
      maxAbsError: Math.max(0, ...samples.map((s) => s.maxAbsError)),
      maxRelError: Math.max(0, ...samples.map((s) => s.maxRelError)),
      zeroVarianceGroups: stats.zeroVarianceGroups.length,
    },
    hints,
    warnings: residualWarnings(batch, grouping, stats.groups),
  };
}

/** Uniform groups whose trainer advantages are not 0: torch's float32 mean left a residual. */
function residualWarnings(batch: Batch, grouping: GroupingOptions, groups: GroupReport[]): string[] {
  const { groupOf, keys } = resolveGroups(batch.rawRewards.length, grouping);
  const out: string[] = [];
  for (const g of groups) {
    if (g.size < 2 || g.std !== 0) continue;
    const row = batch.rows.find(
      (r) => keys[groupOf[r.position]!] === g.key && (r.trainerReward ?? r.advantages[0] ?? 0) !== 0,
    );
    if (row) {
      out.push(
        `group ${JSON.stringify(g.key)} has identical rewards but the trainer gave its samples ${row.trainerReward ?? row.advantages[0]} instead of 0: float32 rounding of the group mean (torch); every sample of it gets the same biased push`,
      );
    }
  }
  return out;
}

/** On a mismatch, try the other conventions and the known pitfalls; name the ones that match. */
function explain(
  batch: Batch,
  options: CheckOptions,
  preset: Preset,
  estimator: SlimeEstimator,
  tolerance: Tolerance,
  grouping: GroupingOptions,
): string[] {
  const matches = (o: CheckOptions, g: GroupingOptions) => {
    try {
      return compareRows(batch, recompute(batch, o, g), tolerance, g).every((s) => s.ok);
    } catch {
      return false;
    }
  };
  const base: CheckOptions = { ...options, preset };
  const hints: string[] = [];
  const { stdNormalization: _s, scale: _c, ...withoutStd } = base;
  for (const other of ['slime', 'drGrpo', 'verl', 'trl', 'openrlhf'] as const) {
    if (other !== preset && matches({ ...withoutStd, preset: other }, grouping)) {
      const flag = other === 'drGrpo' ? ' (slime --disable-grpo-std-normalization)' : '';
      hints.push(
        `the trainer's values match preset '${other}'${flag}: check the run's configuration or pass --preset ${other}`,
      );
    }
  }
  const whole = { groupSize: batch.rawRewards.length };
  if (matches(base, whole)) {
    hints.push(
      'the trainer normalized the whole batch as ONE group: slime does this silently when the sample count is not n_samples_per_prompt × rollout_batch_size (fan-out rows or filtered samples); group by group_index or collapse fan-out rows first',
    );
  }
  if (
    matches(
      {
        ...base,
        normalizeAdvantages: !(options.normalizeAdvantages ?? estimator.startsWith('reinforce_plus_plus')),
      },
      grouping,
    )
  ) {
    hints.push('the values match with --normalize-advantages toggled');
  }
  if (hints.length === 0) {
    hints.push(
      'no preset or known grouping reproduces the trainer: compare the first mismatching tokens with the rewards and masks',
    );
  }
  return hints;
}
