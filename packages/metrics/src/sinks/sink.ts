/**
 * Metric sinks: where a running loop sends one record per finished rollout and one per finished step.
 * Sinks write files (JSONL, TensorBoard event files, a Weights & Biases offline run) and never print;
 * a failing sink is the caller's to report, never a reason to lose a rollout.
 */
import { isScored, type RolloutResult } from '@vime/core';
import type { RolloutMetrics } from '../rollout.js';
import { rowFigures } from '../training.js';

/** One finished rollout (JSONL `kind: "rollout"`). */
export interface RolloutMetricRecord {
  step: number;
  /** Epoch milliseconds when it was recorded. */
  t: number;
  rollout_id: number;
  task_id: string;
  group: number;
  status: RolloutResult['status'];
  /** Only for completed/truncated rollouts: a failure has no reward, never 0. */
  reward: number | null;
  turns: number;
  duration_ms: number | null;
  phases_ms: Record<string, number>;
  /** `code (phase)` of a failed or aborted rollout. */
  error: string | null;
  hacks: string[];
  weight_versions: string[];
  /**
   * Tokens after the prompt over the rollout's training rows (tool output included, as slime's
   * `response_length`); `null` for a rollout without rows (a failure).
   */
  response_tokens: number | null;
  /** Of those, the tokens the model generated (loss mask 1); `null` without rows. */
  trained_tokens: number | null;
}

/** One finished step (JSONL `kind: "step"`): scalars keyed like TensorBoard tags (`rollout/…`, `perf/…`). */
export interface StepMetricRecord {
  step: number;
  t: number;
  scalars: Record<string, number | null>;
}

/** What a run is, written once when the sink opens (JSONL `kind: "run"`). */
export interface RunMetadata {
  runId: string;
  /** Epoch milliseconds. */
  startedAt: number;
  config?: unknown;
  /** e.g. "stand-in engine, not a model". */
  engine?: string | undefined;
}

/** Where a run's metrics go: one record per rollout and per step. */
export interface MetricSink {
  /** Record one rollout. */
  rollout(record: RolloutMetricRecord): Promise<void>;
  /** Record one step. */
  step(record: StepMetricRecord): Promise<void>;
  /** Flush and close; `summary` holds the run's final scalars. */
  close(summary?: Record<string, number | null>): Promise<void>;
}

/** Every sink gets every record; one sink's failure does not stop the others (the first error is thrown after). */
export function fanOut(sinks: ReadonlyArray<MetricSink>): MetricSink {
  const all = async (fn: (s: MetricSink) => Promise<void>) => {
    const results = await Promise.allSettled(sinks.map(fn));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  };
  return {
    rollout: (r) => all((s) => s.rollout(r)),
    step: (r) => all((s) => s.step(r)),
    close: (summary) => all((s) => s.close(summary)),
  };
}

/** The sink record of a finished rollout. */
export function rolloutRecordOf(step: number, r: RolloutResult, t = Date.now()): RolloutMetricRecord {
  const phases: Record<string, number> = {};
  for (const [k, v] of Object.entries(r.timings)) if (typeof v === 'number') phases[k] = Math.round(v);
  const hacks = isScored(r) && Array.isArray(r.metadata.hacks) ? r.metadata.hacks.map(String) : [];
  const tokens = rowFigures(r.samples);
  return {
    step,
    t,
    rollout_id: r.rolloutId,
    task_id: r.taskId,
    group: r.groupIndex,
    status: r.status,
    reward: isScored(r) ? r.reward : null,
    turns: r.turns,
    duration_ms:
      r.startedAt !== undefined && r.endedAt !== undefined ? Math.round(r.endedAt - r.startedAt) : null,
    phases_ms: phases,
    error: isScored(r) ? null : `${r.error.code}${r.error.phase ? ` (${r.error.phase})` : ''}`,
    hacks,
    weight_versions: [...new Set(r.samples.flatMap((s) => s.weight_versions ?? []))],
    response_tokens: tokens.responseTokens,
    trained_tokens: tokens.trainedTokens,
  };
}

/** The sink record of a finished step: its quality and rollout counts, plus any timing scalars given. */
export function stepRecordOf(
  step: number,
  metrics: RolloutMetrics,
  extra: Record<string, number | null> = {},
  t = Date.now(),
): StepMetricRecord {
  const scalars: Record<string, number | null> = {
    'rollout/reward_mean': metrics.reward.mean,
    'rollout/completed': metrics.rollouts.completed,
    'rollout/truncated': metrics.rollouts.truncated,
    'rollout/failed': metrics.rollouts.failed,
    'rollout/aborted': metrics.rollouts.aborted,
  };
  for (const e of metrics.passAtK) scalars[`rollout/pass@${e.k}`] = e.value;
  if (metrics.shape.turns) scalars['rollout/turns_mean'] = metrics.shape.turns.mean;
  return { step, t, scalars: { ...scalars, ...extra } };
}

/** A scalar that can be written to a binary format (finite numbers only). */
export const finiteScalars = (scalars: Record<string, number | null>): Array<[string, number]> =>
  Object.entries(scalars).filter(
    (e): e is [string, number] => typeof e[1] === 'number' && Number.isFinite(e[1]),
  );
