/**
 * Evaluation statistics: pass@1 of an eval pass with its bootstrap 95% interval (over tasks, as
 * @vime/metrics computes it), and the change between two passes on the same tasks with a paired
 * bootstrap interval (tasks resampled together, so task difficulty cancels out).
 */
import { isScored, type RolloutResult } from '@vime/core';
import { seededRandom } from '@vime/core/utils';
import { rolloutMetrics } from '@vime/metrics';

export interface PassAt1 {
  value: number | null;
  ci: [number, number] | null;
  tasks: number;
  /** Scored rollouts (failed and aborted ones are infrastructure failures, not reward 0). */
  scored: number;
  failed: number;
  /** Solved fraction per task id. */
  perTask: Record<string, number>;
}

const correct = (r: number) => r === 1;

export function passAt1(results: readonly RolloutResult[], samplesPerTask: number): PassAt1 {
  const m = rolloutMetrics(results, {
    correct,
    groupSize: samplesPerTask,
    groupBy: 'task',
    bootstrap: { seed: 0 },
  });
  const k1 = m.passAtK.find((p) => p.k === 1);
  const byTask = new Map<string, number[]>();
  for (const r of results) {
    if (!isScored(r)) continue;
    const list = byTask.get(r.taskId) ?? [];
    list.push(correct(r.reward) ? 1 : 0);
    byTask.set(r.taskId, list);
  }
  const perTask = Object.fromEntries(
    [...byTask].map(([id, xs]) => [id, xs.reduce((a, b) => a + b, 0) / xs.length]),
  );
  return {
    value: k1?.value ?? null,
    ci: k1?.ci ?? null,
    tasks: byTask.size,
    scored: results.filter(isScored).length,
    failed: results.filter((r) => !isScored(r)).length,
    perTask,
  };
}

export interface PassDelta {
  /** Mean over the tasks both passes scored of (after − before). */
  value: number | null;
  ci: [number, number] | null;
  tasks: number;
  /** The rise is larger than its interval: the interval's lower end is above 0. */
  significant: boolean;
}

/** after − before on the common tasks, with a seeded paired bootstrap (percentile method). */
export function passDelta(
  before: PassAt1,
  after: PassAt1,
  options: { resamples?: number | undefined; seed?: number | undefined } = {},
): PassDelta {
  const ids = Object.keys(before.perTask).filter((id) => id in after.perTask);
  if (ids.length === 0) return { value: null, ci: null, tasks: 0, significant: false };
  const diffs = ids.map((id) => after.perTask[id]! - before.perTask[id]!);
  const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const random = seededRandom(options.seed ?? 0);
  const resamples = options.resamples ?? 2000;
  const means: number[] = [];
  for (let b = 0; b < resamples; b++) {
    let sum = 0;
    for (let i = 0; i < diffs.length; i++) sum += diffs[Math.floor(random() * diffs.length)]!;
    means.push(sum / diffs.length);
  }
  means.sort((a, b) => a - b);
  const q = (p: number) => means[Math.min(means.length - 1, Math.max(0, Math.floor(p * means.length)))]!;
  const ci: [number, number] = [q(0.025), q(0.975)];
  return { value: mean(diffs), ci, tasks: ids.length, significant: ci[0] > 0 };
}
