/**
 * What a step leaves on disk and in the metrics: its batch with GRPO advantages stamped on every row, its
 * results file (what a resumed run reads instead of rolling the step out again), and its scalars.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeSamples, isScored, type RolloutResult, type Sample, type ScoredRollout } from '@vime/core';
import type { GroupQueue } from '@vime/core/queue';
import { seededRandom } from '@vime/core/utils';
import { grpoAdvantages, type HandoffAudit } from '@vime/grpo';
import {
  type RolloutMetrics,
  rolloutMetrics,
  type StepSpecDecode,
  type StepToolCallHealth,
  specDecodeLine,
  toolCallAlarm,
  toolCallLine,
} from '@vime/metrics';

/** What a trainer reports for one step: the weight version the engines now serve, timings, metrics. */
export interface TrainResult {
  weightVersion: string;
  /** Seconds of the optimizer step (forward, backward, update) and of writing/loading the new weights. */
  trainSeconds: number;
  weightUpdateSeconds: number;
  /** Finite scalars (loss, grad_norm, logprob_abs_diff_mean, ...), recorded as `train/<name>`. */
  metrics: Record<string, number>;
}

/** What one step did: rollouts, rewards, pass@k and timing. */
export interface StepSummary {
  step: number;
  rollouts: number;
  metrics: RolloutMetrics;
  advantages: { nonZero: number; rows: number };
  /** Groups whose scored rollouts all got the same reward (zero advantage, no learning signal). */
  zeroVarianceGroups: number;
  rolloutSeconds: number;
  handoffSeconds: number;
  batchPath: string;
  /** Handed off before a restart: its timing was not measured in this process. */
  resumed?: boolean | undefined;
  /** What the trainer hook reported for this step (absent without a trainer). */
  train?: TrainResult | undefined;
  /** The token audit of the step's rows at hand-off, and its seconds (absent for a step resumed from disk). */
  audit?: StepAudit | undefined;
  /** The step's tool-call health (absent for a step handed off before a restart: its rows are in the batch). */
  toolCalls?: StepToolCallHealth | undefined;
  /**
   * The step's speculative decoding: from its rows (SGLang's per-request counts), else from the vLLM
   * engines' counters over the step; absent when neither reported any.
   */
  spec?: StepSpecDecode | undefined;
}

/** The token audit of a step's hand-off: its counts and how long it took. */
export type StepAudit = HandoffAudit & { seconds: number };

/** A step's audit as metric scalars: `audit/*` counts, failures by cause, and `perf/audit_time`. */
export function auditScalars(audit: StepAudit | undefined): Record<string, number> {
  if (!audit) return {};
  const scalars: Record<string, number> = {
    'audit/samples': audit.samples,
    'audit/failed_samples': audit.failedSamples,
    'audit/rollouts': audit.rollouts,
    'audit/failed_rollouts': audit.failedRollouts,
    'audit/tokens': audit.tokens,
    'perf/audit_time': audit.seconds,
  };
  for (const [cause, n] of Object.entries(audit.causes)) scalars[`audit/failed_by_cause/${cause}`] = n;
  return scalars;
}

/** A rollout is correct when it resolved the task (reward 1). */
export const correct = (r: number) => r === 1;

export const stepBatchPath = (out: string, step: number) => join(out, 'steps', `${step}.msgpack`);
export const stepResultsPath = (out: string, step: number) => join(out, 'steps', `${step}.results.json`);

/**
 * The step's rewards permuted (the shuffled-reward control): a seeded Fisher-Yates over the whole step,
 * the seed mixed with the step number, so the same step always gets the same permutation (a resumed
 * hand-off writes the same batch) and the multiset of rewards is the step's own.
 */
export function shuffledRewards(rewards: readonly number[], seed: number, step: number): number[] {
  const next = seededRandom((Math.imul(seed, 0x9e3779b1) ^ Math.imul(step, 0x85ebca6b)) >>> 0);
  const out = [...rewards];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/**
 * slime-preset GRPO advantages per scored rollout, stamped on every row of the rollout. With `shuffle`
 * (the shuffled-reward control), the rewards are first permuted across the step's rollouts: advantages are
 * computed on the permuted rewards, each row's `reward` is its permuted one (a trainer that computes its
 * own advantages sees the same), and `metadata.true_reward` keeps what the rollout earned.
 */
export function stampAdvantages(
  scored: ScoredRollout[],
  shuffle?: { seed: number; step: number } | undefined,
): { rows: Sample[]; nonZero: number } {
  const rows: Sample[] = [];
  if (scored.length === 0) return { rows, nonZero: 0 };
  const earned = scored.map((r) => r.reward);
  const rewards = shuffle ? shuffledRewards(earned, shuffle.seed, shuffle.step) : earned;
  const advantages = grpoAdvantages(rewards, {
    groups: scored.map((r) => r.groupIndex),
    preset: 'slime',
    allowUnevenGroups: true,
  });
  let nonZero = 0;
  scored.forEach((r, i) => {
    const advantage = advantages[i]!;
    if (advantage !== 0) nonZero++;
    for (const row of r.samples) {
      row.metadata = { ...row.metadata, advantage };
      if (shuffle) {
        row.metadata.true_reward = earned[i];
        row.reward = rewards[i]!;
      }
      rows.push(row);
    }
  });
  return { rows, nonZero };
}

/** A rollout result without its rows (rows live in the step's batch). */
export function withoutRows(r: RolloutResult): RolloutResult {
  return { ...r, samples: [] };
}

export function zeroVarianceGroups(results: RolloutResult[]): number {
  const rewards = new Map<number, Set<number>>();
  for (const r of results) {
    if (!isScored(r)) continue;
    const set = rewards.get(r.groupIndex) ?? new Set<number>();
    set.add(r.reward);
    rewards.set(r.groupIndex, set);
  }
  return [...rewards.values()].filter((s) => s.size === 1).length;
}

/** A step handed off before a restart: its summary and results from disk, or undefined. */
export async function finishedStep(
  out: string,
  step: number,
  groupSize: number,
): Promise<{ summary: StepSummary; results: RolloutResult[] } | undefined> {
  let results: RolloutResult[];
  try {
    results = JSON.parse(await readFile(stepResultsPath(out, step), 'utf8')) as RolloutResult[];
  } catch {
    return undefined;
  }
  const batchPath = stepBatchPath(out, step);
  const rows = decodeSamples(await readFile(batchPath));
  const nonZero = new Set(rows.filter((r) => r.metadata.advantage !== 0).map((r) => r.rollout_id)).size;
  const summary: StepSummary = {
    step,
    rollouts: results.length,
    metrics: rolloutMetrics(results, { correct, groupSize }),
    advantages: { nonZero, rows: rows.length },
    zeroVarianceGroups: zeroVarianceGroups(results),
    rolloutSeconds: 0,
    handoffSeconds: 0,
    batchPath,
    resumed: true,
  };
  return { summary, results };
}

/** A step's trainer result as metric scalars: `perf/train_time`, `perf/update_weights_time`, `train/*`. */
export function trainScalars(train: TrainResult | undefined): Record<string, number> {
  if (!train) return {};
  const scalars: Record<string, number> = {
    'perf/train_time': train.trainSeconds,
    'perf/update_weights_time': train.weightUpdateSeconds,
  };
  const version = Number(train.weightVersion);
  if (Number.isFinite(version)) scalars['train/weight_version'] = version;
  for (const [k, v] of Object.entries(train.metrics)) if (Number.isFinite(v)) scalars[`train/${k}`] = v;
  return scalars;
}

/** One line of the log per handed-off step. */
export function stepLine(s: StepSummary): string {
  const pass1 = s.metrics.passAtK.find((p) => p.k === 1)?.value;
  const train = s.train
    ? ` (train ${s.train.trainSeconds.toFixed(2)} s, weight update ${s.train.weightUpdateSeconds.toFixed(2)} s, now serving ${s.train.weightVersion})`
    : '';
  const audit = s.audit?.failedRollouts
    ? `, token audit failed ${s.audit.failedRollouts} of ${s.audit.rollouts} rollouts`
    : '';
  return `step ${s.step}: ${s.rollouts} rollouts${audit}, mean reward ${s.metrics.reward.mean?.toFixed(3) ?? '-'}, pass@1 ${pass1?.toFixed(3) ?? '-'}, rollout ${s.rolloutSeconds.toFixed(1)} s, hand-off ${s.handoffSeconds.toFixed(2)} s${train}`;
}

/** A step's tool-call health as metric scalars: `tool_calls/*`. */
export function toolCallScalars(health: StepToolCallHealth | undefined): Record<string, number> {
  if (!health) return {};
  return {
    'tool_calls/emitted': health.emitted,
    'tool_calls/parsed': health.parsed,
    'tool_calls/malformed': health.malformed,
    'tool_calls/unknown_tool': health.unknownTool,
    'tool_calls/bad_arguments': health.badArguments,
    'tool_calls/failure_rate': health.failureRate,
    'tool_calls/no_tool_rollouts': health.noToolRollouts,
  };
}

/** The log lines of a step's tool calls: its counts, and the alarm when its failure rate is past the threshold. */
export function toolCallLines(s: StepSummary): string[] {
  if (!s.toolCalls || s.toolCalls.rollouts === 0) return [];
  const alarm = toolCallAlarm(s.step, s.toolCalls);
  return [`step ${s.step} ${toolCallLine(s.toolCalls)}`, ...(alarm ? [alarm] : [])];
}

/** The log line of a step's speculative decoding (none when the step has no figures). */
export function specDecodeLines(s: StepSummary): string[] {
  return s.spec ? [`step ${s.step} ${specDecodeLine(s.spec)}`] : [];
}

/** The queue's counters as the report's work-unit table: groups by fate (drops by reason), attempts. */
export function workUnitCounts(stats: GroupQueue['stats']): Record<string, number> {
  const { dropped, open: _open, ready: _ready, inFlight: _inFlight, ...counts } = stats;
  const drops = Object.fromEntries(Object.entries(dropped).map(([why, n]) => [`dropped: ${why}`, n]));
  return { ...counts, ...drops };
}
