import { ConfigError, describeValue, type Sample, ValidationError } from '@vime/core';
import { type GroupReport, groupStatistics } from '../estimators/advantages.js';
import type { GroupingOptions } from '../estimators/groups.js';
import { resolveGroups } from '../estimators/groups.js';
import type { Preset } from '../estimators/presets.js';
import { searchConventions } from './check-auto.js';
import {
  type AutoReport,
  type Batch,
  CHECK_ESTIMATORS,
  type CheckEstimator,
  type CheckOptions,
  type CheckReport,
  compareRows,
  groupingFor,
  type Row,
  recompute,
  type Tolerance,
} from './check-core.js';
import { type RolloutDump, rewardScalar, type TrainDump } from './dump.js';

export type {
  AutoReport,
  CheckEstimator,
  CheckOptions,
  CheckReport,
  ConventionMatch,
  SampleCheck,
  TokenMismatch,
  Tolerance,
  TrainerEstimator,
} from './check-core.js';
export { CHECK_ESTIMATORS, TRAINER_ESTIMATORS } from './check-core.js';

/**
 * The golden check: recompute the advantages from the rewards, masks and lengths a trainer dumped,
 * with a chosen preset, and compare them token by token with the trainer's own `advantages`.
 */

export type CheckInput =
  | { rolloutDump?: RolloutDump | undefined; trainDump: TrainDump }
  | {
      /** Vime samples in rollout order (rewards, masks, lengths, group_index). */
      samples: ReadonlyArray<Sample>;
      /** The trainer's per-token advantages, one array per sample. */
      advantages: ReadonlyArray<ArrayLike<number>>;
      /** The trainer's per-token returns, if it has them. */
      returns?: ReadonlyArray<ArrayLike<number>> | undefined;
    };

function fromDumps(
  input: { rolloutDump?: RolloutDump | undefined; trainDump: TrainDump },
  options: CheckOptions,
): Batch {
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
      logProbs: s.log_probs,
      refLogProbs: s.ref_log_probs,
      values: s.values,
      teacherLogProbs: s.teacher_log_probs,
      kl: s.kl,
    };
  });
  const batch = { rolloutId: trainDump.rollout_id, rawRewards, groupKeys, rows };
  return options.perRollout ? perRolloutBatch(batch, rolloutDump, trainDump) : batch;
}

/** The batch with one position per rollout id: its first row's reward and group, every row moved onto it. */
function perRolloutBatch(batch: Batch, rolloutDump: RolloutDump | undefined, trainDump: TrainDump): Batch {
  const ids: number[] = rolloutDump
    ? rolloutDump.samples.map((s, i) => s.rollout_id ?? -1 - i)
    : (() => {
        const out = batch.rawRewards.map((_, i) => -1 - i);
        for (const s of trainDump.samples)
          if (s.rollout_ids !== undefined) out[s.rollout_position] = s.rollout_ids;
        return out;
      })();
  const collapsed = new Map<number, number>();
  const rawRewards: number[] = [];
  const groupKeys: Array<number | string> | null = batch.groupKeys ? [] : null;
  const positionOf = ids.map((id, i) => {
    let at = collapsed.get(id);
    if (at === undefined) {
      at = rawRewards.length;
      collapsed.set(id, at);
      rawRewards.push(batch.rawRewards[i]!);
      groupKeys?.push(batch.groupKeys![i]!);
    } else if (batch.rawRewards[i] !== rawRewards[at]) {
      throw new ValidationError(
        `rolloutDump.samples[${i}].reward`,
        `is ${batch.rawRewards[i]} but an earlier row of rollout ${id} has ${rawRewards[at]}: one rollout has one reward`,
      );
    }
    return at;
  });
  return {
    ...batch,
    rawRewards,
    groupKeys,
    rows: batch.rows.map((r) => ({ ...r, position: positionOf[r.position]! })),
  };
}

function fromSamples(
  input: {
    samples: ReadonlyArray<Sample>;
    advantages: ReadonlyArray<ArrayLike<number>>;
    returns?: ReadonlyArray<ArrayLike<number>> | undefined;
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

/**
 * Recompute the advantages a trainer should have produced and compare them with the ones it dumped:
 * per sample the largest absolute and relative error, the first mismatching token, the scalar reward,
 * and the group statistics; `verdict` is `match` when every token is within tolerance. On a mismatch
 * the other conventions are tried and the ones that reproduce the trainer are named in `hints`; with
 * `preset: 'auto'` the report is that of the best of them (most bit-exact tokens), listed in `auto`.
 */
export function checkAgainstTrainer(input: CheckInput, options: CheckOptions = {}): CheckReport {
  const estimator = options.estimator ?? 'grpo';
  if (!CHECK_ESTIMATORS.includes(estimator)) {
    throw new ConfigError(
      `estimator: unknown ${JSON.stringify(estimator)}; use one of ${CHECK_ESTIMATORS.join(', ')}`,
    );
  }
  const tolerance = resolveTolerance(options.tolerance);
  const batch = 'trainDump' in input ? fromDumps(input, options) : fromSamples(input, options);
  const grouping = groupingFor(batch, options);
  if (options.preset === 'auto') {
    const auto = searchConventions(batch, options, tolerance, grouping);
    const best = auto.matches[0] ?? auto.closest;
    const chosen = best?.options ?? { ...options, preset: 'slime' as const };
    const report = build(batch, chosen, tolerance, groupingFor(batch, chosen));
    report.auto = auto;
    if (auto.matches.length === 0) report.hints = [noMatch(auto)];
    return report;
  }
  const report = build(batch, options, tolerance, grouping);
  if (report.verdict === 'mismatch') {
    const auto = searchConventions(batch, options, tolerance, grouping);
    report.hints = auto.matches.length
      ? auto.matches.map(
          (m) => `the trainer's values match ${m.name}: check the run's configuration or pass ${m.flags}`,
        )
      : [noMatch(auto)];
  }
  return report;
}

function noMatch(auto: AutoReport): string {
  const closest = auto.closest
    ? ` (closest: ${auto.closest.name}, ${auto.closest.mismatchedSamples} samples differ)`
    : '';
  return `none of the ${auto.tried} known conventions reproduces the trainer${closest}: compare the first mismatching tokens with the rewards and masks`;
}

function build(
  batch: Batch,
  options: CheckOptions,
  tolerance: Tolerance,
  grouping: GroupingOptions,
): CheckReport {
  const preset: Preset = options.preset && options.preset !== 'auto' ? options.preset : 'slime';
  const estimator: CheckEstimator = options.estimator ?? 'grpo';
  const recomputed = recompute(batch, { ...options, preset }, grouping);
  const samples = compareRows(batch, recomputed, tolerance, grouping);
  const stats = groupStatistics(batch.rawRewards, { ...options, preset, ...grouping });
  const mismatched = samples.filter((s) => !s.ok);
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
    hints: [],
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
