import {
  ConfigError,
  fromSlimeDict,
  type Phase,
  PhaseSchema,
  type PhaseTimings,
  type RolloutResult,
  type Sample,
  type SampleStatus,
  ValidationError,
} from '@vime/core';
import { seededRandom } from '@vime/core/utils';
import { passAtK, passHatK, powersOfTwoUpTo } from './pass-at-k.js';
import { percentileOfSorted, type Summary, summarize } from './percentile.js';

/** What `rolloutMetrics` accepts: rollout results, or training rows (in memory or as slime dicts). */
export type RolloutInput = RolloutResult | Sample | Record<string, unknown>;

/** Options of `rolloutMetrics`. */
export interface RolloutMetricsOptions {
  /**
   * Required: when does a rollout's reward count as solved? Peers disagree (slime `r === 1`,
   * verifiers `r >= 0.5`, SkyRL/rllm `r > 0`), so there is no default.
   */
  correct: (reward: number) => boolean;
  /** k values to report (each must be ≥ 1). Default: 1, 2, 4, … up to the group size. */
  ks?: ReadonlyArray<number> | undefined;
  /** Rollouts expected per problem group. Default: the largest group seen (failed rollouts included). */
  groupSize?: number | undefined;
  /** Group rollouts by prompt group (`groupIndex` / `group_index`, default) or by task id. */
  groupBy?: 'group' | 'task' | undefined;
  /** Bootstrap confidence intervals over problems; `false` to skip. Seeded, so reports are reproducible. */
  bootstrap?:
    | { resamples?: number | undefined; confidence?: number | undefined; seed?: number | undefined }
    | false
    | undefined;
  /** Component of dict rewards (slime `--reward-key`). */
  rewardKey?: string | undefined;
  /**
   * One reward per rollout from its training rows. Default: `metadata.rollout_reward` (or
   * `metadata.agent_reward`) when the rows carry it, else the rows' common `reward`. Rows that disagree
   * are an error: summing fan-out rows inflates pass@1 by the number of rows, so it is never done
   * implicitly (pass `rows => rows.reduce(…)` for slime's `reward/K` split).
   */
  rolloutReward?: ((rows: ReadonlyArray<Sample>) => number) | undefined;
  /** How many of the slowest rollouts to list with their phase breakdown (default 5). */
  slowest?: number | undefined;
}

/** One rollout after deduplicating its rows. */
export interface RolloutRecord {
  key: string;
  group: string;
  taskId?: string | undefined;
  rolloutId?: number | undefined;
  status: SampleStatus;
  /** Present only for `completed | truncated`. */
  reward?: number | undefined;
  rows: number;
  turns?: number | undefined;
  /** Fraction of loss-masked response tokens, per row that has a mask. */
  maskedFractions: number[];
  /** Milliseconds per phase. */
  timings: PhaseTimings;
  execCallsMs: number[];
  totalMs?: number | undefined;
  drift?: { forks: number; realigns: number; retokenizedTokens: number } | undefined;
}

/** pass@k at one k, with its bootstrap interval. */
export interface KEstimate {
  k: number;
  /** Mean over the problems with at least k scored rollouts; `null` when there are none. */
  value: number | null;
  /** Bootstrap confidence interval over problems (percentile method). */
  ci: [number, number] | null;
  problems: number;
  /** Problems left out for this k (fewer than k scored rollouts). */
  skipped: number;
}

/** A prompt group with fewer rollouts than expected. */
export interface IncompleteGroup {
  group: string;
  expected: number;
  scored: number;
  failed: number;
  aborted: number;
  pending: number;
}

/** Rollout time per phase and overall. */
export interface RolloutTiming {
  /** Per-phase milliseconds, one value per rollout that recorded the phase. */
  phases: Partial<Record<Phase, Summary>>;
  /** Milliseconds per sandbox exec call, across all rollouts. */
  execCall: Summary;
  /** Wall-clock milliseconds per rollout (`endedAt − startedAt`, else claim + setup + agent + eval). */
  total: Summary;
  slowest: Array<{
    key: string;
    rolloutId?: number | undefined;
    taskId?: string | undefined;
    status: SampleStatus;
    totalMs: number;
    phases: PhaseTimings;
  }>;
}

/** Rollout counts, rewards, pass@k with intervals, groups and timing of a set of rollouts. */
export interface RolloutMetrics {
  rollouts: {
    total: number;
    rows: number;
    completed: number;
    truncated: number;
    failed: number;
    aborted: number;
    pending: number;
    /** Rollout results seen more than once (same session/rollout id); counted once. */
    duplicates: number;
  };
  groups: {
    total: number;
    groupSize: number;
    complete: number;
    incomplete: IncompleteGroup[];
  };
  passAtK: KEstimate[];
  passHatK: KEstimate[];
  /** Mean continuous reward (the expected mean of k rollouts), over problems with ≥ k scored rollouts. */
  meanAtK: KEstimate[];
  /** Expected best continuous reward of k rollouts drawn without replacement (unbiased, exact). */
  maxAtK: KEstimate[];
  reward: { mean: number | null; min: number | null; max: number | null; correct: number; scored: number };
  shape: {
    turns: { mean: number; max: number } | null;
    maskedFraction: { mean: number; max: number } | null;
    rowsPerRollout: { mean: number; max: number } | null;
    /** Rollouts that emitted more than one training row (their trajectory forked). */
    forkedRollouts: number;
    /** Single-row rollouts that packed several turns (loss-masked spans present, or turns > 1). */
    packedRollouts: number;
    drift: { forks: number; realigns: number; retokenizedTokens: number } | null;
  };
  timing: RolloutTiming;
}

const STATUS_PRECEDENCE: SampleStatus[] = ['failed', 'aborted', 'pending', 'truncated', 'completed'];
const TOP_LEVEL_PHASES: Phase[] = ['claim', 'setup', 'agent', 'eval'];

function isRolloutResult(x: unknown): x is RolloutResult {
  return typeof x === 'object' && x !== null && 'taskId' in x && 'groupIndex' in x && 'status' in x;
}

function isSample(x: unknown): x is Sample {
  return typeof x === 'object' && x !== null && (x as { tokens?: unknown }).tokens instanceof Int32Array;
}

function maskedFraction(row: Sample): number | undefined {
  if (row.remove_sample || !row.loss_mask || row.loss_mask.length === 0) return undefined;
  let kept = 0;
  for (let i = 0; i < row.loss_mask.length; i++) kept += row.loss_mask[i]!;
  return 1 - kept / row.loss_mask.length;
}

function finiteNumbers(value: unknown): number[] {
  return Array.isArray(value)
    ? value.filter((v): v is number => typeof v === 'number' && Number.isFinite(v))
    : [];
}

function readDrift(metadata: Record<string, unknown>): RolloutRecord['drift'] {
  const d = metadata.drift as Record<string, unknown> | undefined;
  if (!d || typeof d !== 'object') return undefined;
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  return { forks: num(d.forks), realigns: num(d.realigns), retokenizedTokens: num(d.retokenizedTokens) };
}

/** Per-rollout timings carried on row metadata: `timings` (ms, vime) or `agent_timing` (seconds). */
function rowTimings(metadata: Record<string, unknown>): { timings: PhaseTimings; execCallsMs: number[] } {
  const timings: PhaseTimings = {};
  const ms = metadata.timings as Record<string, unknown> | undefined;
  if (ms && typeof ms === 'object') {
    for (const phase of PhaseSchema.options) {
      const v = ms[phase];
      if (typeof v === 'number' && Number.isFinite(v)) timings[phase] = v;
    }
    return { timings, execCallsMs: finiteNumbers(metadata.execCallsMs) };
  }
  const sec = metadata.agent_timing as Record<string, unknown> | undefined;
  if (sec && typeof sec === 'object') {
    for (const phase of PhaseSchema.options) {
      const v = sec[`${phase}_sec`];
      if (typeof v === 'number' && Number.isFinite(v)) timings[phase] = v * 1000;
    }
    return { timings, execCallsMs: finiteNumbers(sec.exec_calls).map((s) => s * 1000) };
  }
  return { timings, execCallsMs: [] };
}

function rewardOfRow(row: Sample, rewardKey: string | undefined, at: string): number | null {
  const r = row.reward;
  if (r === null) return null;
  if (typeof r === 'number') return r;
  if (rewardKey === undefined) {
    throw new ValidationError(
      `${at}.reward`,
      `found a dict reward with keys [${Object.keys(r).join(', ')}]; pass options.rewardKey to pick one`,
    );
  }
  const v = r[rewardKey];
  if (typeof v !== 'number') {
    throw new ValidationError(`${at}.reward.${rewardKey}`, `expected a number, found ${typeof v}`);
  }
  return v;
}

function defaultRolloutReward(
  rows: ReadonlyArray<Sample>,
  key: string,
  rewardKey: string | undefined,
): number {
  const stamped = rows.map((r) => r.metadata.rollout_reward ?? r.metadata.agent_reward);
  if (stamped.every((v) => typeof v === 'number')) {
    const first = stamped[0] as number;
    if (stamped.some((v) => v !== first)) {
      throw new ValidationError(
        `rollout ${key}.metadata.rollout_reward`,
        `rows of one rollout carry different stamped rewards [${stamped.join(', ')}]`,
      );
    }
    return first;
  }
  const rewards = rows.map((row, i) => rewardOfRow(row, rewardKey, `rollout ${key} row ${i}`));
  const first = rewards[0];
  if (first === null || first === undefined || rewards.some((r) => r !== first)) {
    throw new ValidationError(
      `rollout ${key}.reward`,
      `its ${rows.length} rows carry rewards [${rewards.join(', ')}]; metrics never sum fan-out rows. ` +
        'Stamp metadata.rollout_reward on every row, or pass options.rolloutReward to combine them',
    );
  }
  return first;
}

function keyOfRow(row: Sample, i: number): string {
  if (row.session_id) return `session:${row.session_id}`;
  if (row.rollout_id !== null) return `rollout:${row.rollout_id}`;
  if (row.index !== null) return `index:${row.index}`;
  return `row:${i}`;
}

/** Deduplicate rollouts and rows into one `RolloutRecord` per rollout. */
export function toRolloutRecords(
  inputs: ReadonlyArray<RolloutInput>,
  options: Pick<RolloutMetricsOptions, 'groupBy' | 'rewardKey' | 'rolloutReward'> = {},
): { records: RolloutRecord[]; rows: number; duplicates: number } {
  const records = new Map<string, RolloutRecord>();
  const rowGroups = new Map<string, { rows: Sample[]; first: number }>();
  let rows = 0;
  let duplicates = 0;
  inputs.forEach((input, i) => {
    if (isRolloutResult(input)) {
      const key = input.sessionId ? `session:${input.sessionId}` : `rollout:${input.rolloutId}`;
      if (records.has(key)) {
        duplicates++;
        return;
      }
      rows += input.samples.length;
      const masks = input.samples.map(maskedFraction).filter((v): v is number => v !== undefined);
      const phases = input.timings;
      const total =
        input.startedAt !== undefined && input.endedAt !== undefined
          ? input.endedAt - input.startedAt
          : TOP_LEVEL_PHASES.some((p) => phases[p] !== undefined)
            ? TOP_LEVEL_PHASES.reduce((s, p) => s + (phases[p] ?? 0), 0)
            : undefined;
      const record: RolloutRecord = {
        key,
        group: options.groupBy === 'task' ? input.taskId : String(input.groupIndex),
        taskId: input.taskId,
        rolloutId: input.rolloutId,
        status: input.status,
        rows: input.samples.length,
        turns: input.turns,
        maskedFractions: masks,
        timings: phases,
        execCallsMs: finiteNumbers(input.metadata.execCallsMs),
      };
      if (input.status === 'completed' || input.status === 'truncated') record.reward = input.reward;
      if (total !== undefined) record.totalMs = total;
      const drift = readDrift(input.metadata);
      if (drift) record.drift = drift;
      records.set(key, record);
      return;
    }
    const row = isSample(input) ? input : fromSlimeDict(input, `[${i}]`);
    rows++;
    const key = keyOfRow(row, i);
    const entry = rowGroups.get(key);
    if (entry) entry.rows.push(row);
    else rowGroups.set(key, { rows: [row], first: i });
  });

  for (const [key, { rows: group, first }] of rowGroups) {
    if (records.has(key)) {
      throw new ValidationError(
        `[${first}]`,
        `rollout ${key} appears both as a RolloutResult and as training rows; pass one form per rollout`,
      );
    }
    const head = group[0]!;
    const groupIndex = head.group_index;
    const taskId = typeof head.metadata.instance_id === 'string' ? head.metadata.instance_id : undefined;
    let groupKey: string;
    if (options.groupBy === 'task') {
      if (taskId === undefined) {
        throw new ValidationError(
          `[${first}].metadata.instance_id`,
          'groupBy "task" needs metadata.instance_id on rows',
        );
      }
      groupKey = taskId;
    } else {
      if (groupIndex === null) {
        throw new ValidationError(
          `[${first}].group_index`,
          'expected the prompt group index, found null; set group_index on every row (slime does) so rollouts can be grouped per problem',
        );
      }
      groupKey = String(groupIndex);
    }
    const status = STATUS_PRECEDENCE.find((s) => group.some((r) => r.status === s)) ?? 'completed';
    const timingRow = group.find((r) => Object.keys(rowTimings(r.metadata).timings).length > 0) ?? head;
    const { timings, execCallsMs } = rowTimings(timingRow.metadata);
    const turnsRaw = head.metadata.n_turns ?? head.metadata.turns;
    const record: RolloutRecord = {
      key,
      group: groupKey,
      status,
      rows: group.length,
      maskedFractions: group.map(maskedFraction).filter((v): v is number => v !== undefined),
      timings,
      execCallsMs,
    };
    if (taskId !== undefined) record.taskId = taskId;
    if (head.rollout_id !== null) record.rolloutId = head.rollout_id;
    if (typeof turnsRaw === 'number') record.turns = turnsRaw;
    if (TOP_LEVEL_PHASES.some((p) => timings[p] !== undefined)) {
      record.totalMs = TOP_LEVEL_PHASES.reduce((s, p) => s + (timings[p] ?? 0), 0);
    }
    const drift = readDrift(head.metadata);
    if (drift) record.drift = drift;
    if (status === 'completed' || status === 'truncated') {
      record.reward = options.rolloutReward
        ? options.rolloutReward(group)
        : defaultRolloutReward(group, key, options.rewardKey);
    }
    records.set(key, record);
  }
  return { records: [...records.values()], rows, duplicates };
}

/** Expected best of k draws without replacement: Σ_{i≥k} r_(i) · C(i−1, k−1) / C(n, k), r ascending. */
function expectedMaxOfK(sortedAscending: ReadonlyArray<number>, k: number): number {
  const n = sortedAscending.length;
  let w = k / n;
  let sum = 0;
  for (let i = n; i >= k; i--) {
    sum += w * sortedAscending[i - 1]!;
    w *= (i - k) / (i - 1);
  }
  return sum;
}

function estimate(
  k: number,
  perProblem: number[],
  skipped: number,
  random: (() => number) | null,
  resamples: number,
  confidence: number,
): KEstimate {
  const m = perProblem.length;
  if (m === 0) return { k, value: null, ci: null, problems: 0, skipped };
  let total = 0;
  for (const v of perProblem) total += v;
  let ci: [number, number] | null = null;
  if (random) {
    const means = new Float64Array(resamples);
    for (let b = 0; b < resamples; b++) {
      let s = 0;
      for (let j = 0; j < m; j++) s += perProblem[Math.floor(random() * m)]!;
      means[b] = s / m;
    }
    means.sort();
    const tail = ((1 - confidence) / 2) * 100;
    ci = [percentileOfSorted(means, tail), percentileOfSorted(means, 100 - tail)];
  }
  return { k, value: total / m, ci, problems: m, skipped };
}

/** Timing aggregates over deduplicated rollouts. */
export function rolloutTiming(records: ReadonlyArray<RolloutRecord>, slowest = 5): RolloutTiming {
  const phases: Partial<Record<Phase, Summary>> = {};
  for (const phase of PhaseSchema.options) {
    const values = records.map((r) => r.timings[phase]).filter((v): v is number => v !== undefined);
    if (values.length > 0) phases[phase] = summarize(values);
  }
  const timed = records.filter((r) => r.totalMs !== undefined);
  return {
    phases,
    execCall: summarize(records.flatMap((r) => r.execCallsMs)),
    total: summarize(timed.map((r) => r.totalMs!)),
    slowest: [...timed]
      .sort((a, b) => b.totalMs! - a.totalMs! || a.key.localeCompare(b.key))
      .slice(0, slowest)
      .map((r) => {
        const out: RolloutTiming['slowest'][number] = {
          key: r.key,
          status: r.status,
          totalMs: r.totalMs!,
          phases: r.timings,
        };
        if (r.rolloutId !== undefined) out.rolloutId = r.rolloutId;
        if (r.taskId !== undefined) out.taskId = r.taskId;
        return out;
      }),
  };
}

function meanMax(values: number[]): { mean: number; max: number } | null {
  if (values.length === 0) return null;
  let sum = 0;
  let max = Number.NEGATIVE_INFINITY;
  for (const v of values) {
    sum += v;
    if (v > max) max = v;
  }
  return { mean: sum / values.length, max };
}

/**
 * Quality, shape and timing of a batch of rollouts. Accepts `RolloutResult`s or training rows (fan-out
 * rows of one rollout, sharing `session_id` or `rollout_id`, count once). Failed, aborted and pending
 * rollouts never enter pass@k; they are counted, and groups they leave short are listed as incomplete.
 */
export function rolloutMetrics(
  inputs: ReadonlyArray<RolloutInput>,
  options: RolloutMetricsOptions,
): RolloutMetrics {
  if (typeof options?.correct !== 'function') {
    throw new ConfigError(
      'rolloutMetrics needs options.correct, a predicate on the rollout reward such as r => r === 1 (slime) ' +
        'or r => r >= 0.5 (verifiers); there is no default because peers disagree on what "solved" means',
    );
  }
  const { records, rows, duplicates } = toRolloutRecords(inputs, options);
  const counts = { completed: 0, truncated: 0, failed: 0, aborted: 0, pending: 0 };
  for (const r of records) counts[r.status]++;

  const groups = new Map<string, RolloutRecord[]>();
  for (const r of records) {
    const g = groups.get(r.group);
    if (g) g.push(r);
    else groups.set(r.group, [r]);
  }
  let largest = 0;
  for (const g of groups.values()) largest = Math.max(largest, g.length);
  const groupSize = options.groupSize ?? largest;
  if (!Number.isSafeInteger(groupSize) || groupSize < 0) {
    throw new ValidationError('groupSize', `expected a positive integer, found ${String(options.groupSize)}`);
  }
  const ks = options.ks ?? powersOfTwoUpTo(groupSize);
  ks.forEach((k, i) => {
    if (!Number.isSafeInteger(k) || k < 1) {
      throw new ValidationError(`ks[${i}]`, `expected a positive integer k, found ${String(k)}`);
    }
  });

  const incomplete: IncompleteGroup[] = [];
  const problems: Array<{ n: number; c: number; rewards: number[] }> = [];
  for (const [group, members] of groups) {
    const rewards = members.filter((m) => m.reward !== undefined).map((m) => m.reward!);
    const c = rewards.filter((r) => options.correct(r)).length;
    problems.push({ n: rewards.length, c, rewards: rewards.sort((a, b) => a - b) });
    if (rewards.length < groupSize) {
      const count = (s: SampleStatus) => members.filter((m) => m.status === s).length;
      incomplete.push({
        group,
        expected: groupSize,
        scored: rewards.length,
        failed: count('failed'),
        aborted: count('aborted'),
        pending: count('pending'),
      });
    }
  }

  const boot = options.bootstrap === false ? null : (options.bootstrap ?? {});
  const resamples = boot?.resamples ?? 1000;
  const confidence = boot?.confidence ?? 0.95;
  const perK = (fn: (p: { n: number; c: number; rewards: number[] }, k: number) => number, salt: number) =>
    ks.map((k) => {
      const eligible = problems.filter((p) => p.n >= k && p.n > 0);
      const random = boot ? seededRandom((boot.seed ?? 0) * 1_000_003 + salt * 7919 + k) : null;
      return estimate(
        k,
        eligible.map((p) => fn(p, k)),
        problems.length - eligible.length,
        random,
        resamples,
        confidence,
      );
    });

  const allRewards = problems.flatMap((p) => p.rewards);
  const correctCount = problems.reduce((s, p) => s + p.c, 0);
  const drifts = records.filter((r) => r.drift).map((r) => r.drift!);
  return {
    rollouts: { total: records.length, rows, ...counts, duplicates },
    groups: { total: groups.size, groupSize, complete: groups.size - incomplete.length, incomplete },
    passAtK: perK((p, k) => passAtK({ n: p.n, c: p.c, k }), 1),
    passHatK: perK((p, k) => passHatK({ n: p.n, c: p.c, k }), 2),
    meanAtK: perK((p) => p.rewards.reduce((s, r) => s + r, 0) / p.n, 3),
    maxAtK: perK((p, k) => expectedMaxOfK(p.rewards, k), 4),
    reward: {
      mean: allRewards.length ? allRewards.reduce((s, r) => s + r, 0) / allRewards.length : null,
      min: allRewards.length ? allRewards.reduce((a, b) => Math.min(a, b)) : null,
      max: allRewards.length ? allRewards.reduce((a, b) => Math.max(a, b)) : null,
      correct: correctCount,
      scored: allRewards.length,
    },
    shape: {
      turns: meanMax(records.filter((r) => r.turns !== undefined).map((r) => r.turns!)),
      maskedFraction: meanMax(records.flatMap((r) => r.maskedFractions)),
      rowsPerRollout: meanMax(records.map((r) => r.rows)),
      forkedRollouts: records.filter((r) => r.rows > 1).length,
      packedRollouts: records.filter(
        (r) => r.rows === 1 && ((r.turns ?? 0) > 1 || r.maskedFractions.some((f) => f > 0)),
      ).length,
      drift: drifts.length
        ? drifts.reduce(
            (a, d) => ({
              forks: a.forks + d.forks,
              realigns: a.realigns + d.realigns,
              retokenizedTokens: a.retokenizedTokens + d.retokenizedTokens,
            }),
            { forks: 0, realigns: 0, retokenizedTokens: 0 },
          )
        : null,
    },
    timing: rolloutTiming(records, options.slowest ?? 5),
  };
}
