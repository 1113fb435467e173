/**
 * The run report's rollout-level sections, computed from the run's `RolloutResult`s: reward
 * distribution, per-task results, failures by cause, hacks, staleness (from the samples' weight
 * versions), per-phase timing, and the workload figures the capacity planner fits on.
 */
import { isScored, PhaseSchema, type RolloutResult } from '@vime/core';
import { passAtK, powersOfTwoUpTo } from './pass-at-k.js';
import { type Summary, summarize } from './percentile.js';
import { type TokenStaleness, tokenStaleness } from './token-staleness.js';

/** Scored rollouts' rewards in bins. */
export interface RewardHistogram {
  bins: Array<{ lo: number; hi: number; count: number }>;
  scored: number;
}

/** One task's row of the report: attempts, outcomes, mean reward and pass@k. */
export interface TaskRow {
  task: string;
  attempts: number;
  scored: number;
  solved: number;
  failed: number;
  aborted: number;
  mean_reward: number | null;
  /** Unbiased pass@k over the task's scored attempts (`null` when fewer than k). */
  pass_at_k: Record<string, number | null>;
}

/** The report's staleness section. */
export interface Staleness {
  /** Rollouts whose training rows carry weight versions. */
  rollouts_with_versions: number;
  /** Scored rollouts by the oldest weight version among their rows. */
  by_version: Record<string, number>;
  /** Versions behind the newest version seen in the same step (0: generated on the newest weights). */
  lag: Record<string, number>;
  max_lag: number;
  /** Rollouts whose turns spanned more than one weight version (a weight update landed mid-rollout). */
  mixed_versions: number;
  /**
   * Trained tokens by lag behind the trainer's version, per step, from the rows' weight-version spans
   * (null when no row carries spans, e.g. results read back from a metrics file).
   */
  tokens: TokenStaleness | null;
}

/** The report's phase section: time per rollout by step and phase. */
export interface PhaseTiming {
  /** Mean milliseconds per rollout, per step and phase (phases that do not overlap, for stacked bars). */
  per_step: Record<string, Record<string, number>>;
  /** Percentiles of each phase over every rollout (ms). */
  summary: Record<string, Summary>;
  /** Milliseconds per sandbox command. */
  exec_call: Summary;
}

/** The report's workload section. */
export interface Workload {
  rollouts_per_step: number | null;
  turns_mean: number | null;
  turns_max: number | null;
  output_tokens_per_turn: number | null;
  exec_sec_per_turn: number | null;
  claim_sec: number | null;
  eval_sec: number | null;
}

/** Non-overlapping phases in drawing order: `agent` minus model and exec time is the harness itself. */
export const STACKED_PHASES = ['claim', 'setup', 'model', 'exec', 'agent_other', 'eval'] as const;

const meanOf = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);

/** Scored rollouts' rewards in `bins` bins. */
export function rewardHistogram(results: ReadonlyArray<RolloutResult>, bins = 10): RewardHistogram | null {
  const rewards = results.filter(isScored).map((r) => r.reward);
  if (rewards.length === 0) return null;
  const lo = Math.min(0, ...rewards);
  const hi = Math.max(1, ...rewards);
  const width = (hi - lo) / bins;
  const out = Array.from({ length: bins }, (_, i) => ({
    lo: lo + i * width,
    hi: lo + (i + 1) * width,
    count: 0,
  }));
  for (const r of rewards) out[Math.min(bins - 1, Math.floor((r - lo) / width))]!.count++;
  return { bins: out, scored: rewards.length };
}

/** One row per task: attempts, outcomes, mean reward and pass@k. */
export function taskTable(results: ReadonlyArray<RolloutResult>, correct: (r: number) => boolean): TaskRow[] {
  const byTask = new Map<string, RolloutResult[]>();
  for (const r of results) byTask.set(r.taskId, [...(byTask.get(r.taskId) ?? []), r]);
  return [...byTask.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([task, rs]) => {
      const rewards = rs.filter(isScored).map((r) => r.reward);
      const solved = rewards.filter(correct).length;
      const pass: Record<string, number | null> = {};
      for (const k of powersOfTwoUpTo(Math.max(1, rs.length)))
        pass[`pass@${k}`] = rewards.length >= k ? passAtK({ n: rewards.length, c: solved, k }) : null;
      return {
        task,
        attempts: rs.length,
        scored: rewards.length,
        solved,
        failed: rs.filter((r) => r.status === 'failed').length,
        aborted: rs.filter((r) => r.status === 'aborted').length,
        mean_reward: meanOf(rewards),
        pass_at_k: pass,
      };
    });
}

/** Failed and aborted rollouts by `status:code (phase)`: infrastructure failures, never reward 0. */
export function failuresByCause(results: ReadonlyArray<RolloutResult>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of results) {
    if (isScored(r)) continue;
    const key = `${r.status}:${r.error.code}${r.error.phase ? ` (${r.error.phase})` : ''}`;
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}

/** Counts of a string (or string list) metadata field over scored rollouts, e.g. `hacks`, `grade_outcome`. */
export function countMetadata(results: ReadonlyArray<RolloutResult>, field: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of results) {
    if (!isScored(r)) continue;
    const v = r.metadata[field];
    for (const key of Array.isArray(v) ? v : v === undefined || v === null ? [] : [v]) {
      out[String(key)] = (out[String(key)] ?? 0) + 1;
    }
  }
  return out;
}

/** Rollouts by weight version and by lag behind the newest version of their step. */
export function staleness(
  byStep: ReadonlyArray<{ step: number; results: ReadonlyArray<RolloutResult> }>,
): Staleness | null {
  const out: Staleness = {
    rollouts_with_versions: 0,
    by_version: {},
    lag: {},
    max_lag: 0,
    mixed_versions: 0,
    tokens: tokenStaleness(byStep),
  };
  for (const { results } of byStep) {
    const versions = results
      .filter(isScored)
      .map((r) => versionsOf(r).map(Number).filter(Number.isFinite))
      .filter((v) => v.length > 0);
    if (versions.length === 0) continue;
    const newest = Math.max(...versions.flat());
    for (const v of versions) {
      out.rollouts_with_versions++;
      const oldest = Math.min(...v);
      if (Math.max(...v) !== oldest) out.mixed_versions++;
      out.by_version[String(oldest)] = (out.by_version[String(oldest)] ?? 0) + 1;
      const lag = newest - oldest;
      out.lag[String(lag)] = (out.lag[String(lag)] ?? 0) + 1;
      out.max_lag = Math.max(out.max_lag, lag);
    }
  }
  return out.rollouts_with_versions > 0 ? out : null;
}

/** The weight versions of a rollout's rows; without rows (read back from a metrics file), `metadata.weight_versions`. */
function versionsOf(r: RolloutResult): unknown[] {
  if (r.samples.length) return r.samples.flatMap((s) => s.weight_versions ?? []);
  const v = r.metadata.weight_versions;
  return Array.isArray(v) ? v : [];
}

/** One step's token audit at hand-off, as the run gives it. */
export interface TokenAuditStep {
  step: number;
  samples: number;
  failedSamples: number;
  rollouts: number;
  failedRollouts: number;
  /** Trained tokens checked. */
  tokens: number;
  /** Failed rollouts by cause (the field that differs, or why the audit could not run). */
  causes: Record<string, number>;
  seconds: number;
}

/** The report's token-audit section: per step and in total, failures by cause and the audit's share of the hand-off. */
export interface TokenAuditRecord {
  steps: Array<TokenAuditStep & { handoff_seconds: number | null }>;
  samples: number;
  failed_samples: number;
  rollouts: number;
  failed_rollouts: number;
  tokens: number;
  causes: Record<string, number>;
  seconds: number;
  /** Audit seconds over hand-off seconds, over the steps whose hand-off was timed. */
  share_of_handoff: number | null;
}

/** The run's token audit in total, from each step's; `null` when no step was audited in this process. */
export function tokenAuditRecord(
  steps: ReadonlyArray<TokenAuditStep & { handoffSeconds?: number | undefined }>,
): TokenAuditRecord | null {
  if (steps.length === 0) return null;
  const sum = (f: (s: TokenAuditStep) => number) => steps.reduce((t, s) => t + f(s), 0);
  const causes: Record<string, number> = {};
  for (const s of steps) for (const [c, n] of Object.entries(s.causes)) causes[c] = (causes[c] ?? 0) + n;
  const timed = steps.filter((s) => s.handoffSeconds !== undefined && s.handoffSeconds > 0);
  const handoff = timed.reduce((t, s) => t + s.handoffSeconds!, 0);
  return {
    steps: steps.map(({ handoffSeconds, ...s }) => ({ ...s, handoff_seconds: handoffSeconds ?? null })),
    samples: sum((s) => s.samples),
    failed_samples: sum((s) => s.failedSamples),
    rollouts: sum((s) => s.rollouts),
    failed_rollouts: sum((s) => s.failedRollouts),
    tokens: sum((s) => s.tokens),
    causes,
    seconds: sum((s) => s.seconds),
    share_of_handoff: handoff > 0 ? timed.reduce((t, s) => t + s.seconds, 0) / handoff : null,
  };
}

function execCalls(r: RolloutResult): number[] {
  const v = r.metadata.execCallsMs;
  return Array.isArray(v) ? v.filter((x): x is number => typeof x === 'number' && Number.isFinite(x)) : [];
}

/** Phase timing per step and overall; `execCallsMs` adds command durations not stamped on the results. */
export function phaseTiming(
  byStep: ReadonlyArray<{ step: number; results: ReadonlyArray<RolloutResult> }>,
  execCallsMs: ReadonlyArray<number> = [],
): PhaseTiming | null {
  const all = byStep.flatMap((s) => s.results);
  if (!all.some((r) => Object.keys(r.timings).length > 0)) return null;
  const stacked = (r: RolloutResult): Record<string, number> => {
    const t = r.timings;
    const out: Record<string, number> = {};
    for (const p of ['claim', 'setup', 'model', 'exec', 'eval'] as const)
      if (t[p] !== undefined) out[p] = t[p]!;
    if (t.agent !== undefined) out.agent_other = Math.max(0, t.agent - (t.model ?? 0) - (t.exec ?? 0));
    return out;
  };
  const per_step: PhaseTiming['per_step'] = {};
  for (const { step, results } of byStep) {
    const rows = results.map(stacked);
    const means: Record<string, number> = {};
    for (const p of STACKED_PHASES) {
      const m = meanOf(rows.map((r) => r[p]).filter((v): v is number => v !== undefined));
      if (m !== null) means[p] = m;
    }
    per_step[String(step)] = means;
  }
  const summary: PhaseTiming['summary'] = {};
  for (const p of PhaseSchema.options) {
    const values = all.map((r) => r.timings[p]).filter((v): v is number => v !== undefined);
    if (values.length) summary[p] = summarize(values);
  }
  const totals = all
    .filter((r) => r.startedAt !== undefined && r.endedAt !== undefined)
    .map((r) => r.endedAt! - r.startedAt!);
  if (totals.length) summary.total = summarize(totals);
  return { per_step, summary, exec_call: summarize([...all.flatMap(execCalls), ...execCallsMs]) };
}

/** Rollouts, turns and time per step of a run. */
export function workload(
  byStep: ReadonlyArray<{ step: number; results: ReadonlyArray<RolloutResult> }>,
  outputTokens: number | null,
): Workload {
  const all = byStep.flatMap((s) => s.results);
  const turns = all.map((r) => r.turns).filter((t) => t > 0);
  const totalTurns = turns.reduce((a, b) => a + b, 0);
  const sec = (p: 'claim' | 'eval') =>
    meanOf(all.map((r) => r.timings[p]).filter((v): v is number => v !== undefined))?.valueOf() ?? null;
  const execMs = all.map((r) => r.timings.exec).filter((v): v is number => v !== undefined);
  const claim = sec('claim');
  const evalMs = sec('eval');
  return {
    rollouts_per_step: byStep.length ? all.length / byStep.length : null,
    turns_mean: meanOf(turns),
    turns_max: turns.length ? Math.max(...turns) : null,
    output_tokens_per_turn: outputTokens !== null && totalTurns > 0 ? outputTokens / totalTurns : null,
    exec_sec_per_turn:
      execMs.length && totalTurns > 0 ? execMs.reduce((a, b) => a + b, 0) / 1000 / totalTurns : null,
    claim_sec: claim === null ? null : claim / 1000,
    eval_sec: evalMs === null ? null : evalMs / 1000,
  };
}
