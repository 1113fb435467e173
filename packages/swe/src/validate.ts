/**
 * The baseline check of a dataset, as SWE-smith validates its instances: for every row, the unchanged
 * repository must fail its FAIL_TO_PASS tests and the gold patch must resolve it, each graded in a fresh
 * sandbox. Rows that do not are listed with the reason and left out of training.
 */
import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { TaskSpec } from '@vime/core';
import { patchFromDiff } from './capture.js';
import { gradeInFreshSandbox, type SandboxSource } from './grade-in-sandbox.js';
import type { GradeSweOptions, SweGradeResult } from './grade-types.js';
import { taskTestFiles } from './setup.js';

/** The baseline check of one row: whether it is valid and why not. */
export interface RowVerdict {
  instanceId: string;
  valid: boolean;
  /** Why a row is left out: which baseline went wrong and how. */
  reason?: string | undefined;
  /** The verdict could not be reached (an infrastructure failure); never cached, tried again next time. */
  infra?: boolean | undefined;
}

/** The baseline check of a dataset: the valid tasks and the rows left out. */
export interface ValidationReport {
  valid: TaskSpec[];
  invalid: RowVerdict[];
  verdicts: RowVerdict[];
  /** True when every verdict came from the cache file. */
  cached: boolean;
  durationMs: number;
}

/** Options of `validateDataset`. */
export interface ValidateDatasetOptions
  extends Pick<GradeSweOptions, 'timeoutMs' | 'setupTimeoutMs' | 'signal'> {
  /** Rows graded at once (default 2; each takes two fresh sandboxes in turn). */
  concurrency?: number | undefined;
  /** A JSON file keeping the verdicts of a task set (by content), so a run validates a set once. */
  cacheFile?: string | undefined;
  /** Called as each row's verdict is known, with the rows done so far. */
  onRow?: ((verdict: RowVerdict, done: number, total: number) => void) | undefined;
}

/** A content key of the tasks: what their verdicts depend on. */
function cacheKey(tasks: readonly TaskSpec[]): string {
  const hash = createHash('sha256');
  for (const t of tasks)
    hash.update(JSON.stringify([t.id, t.image, t.setupCommand, t.testCommand, t.goldPatch, t.grader]));
  return hash.digest('hex');
}

function verdictOf(task: TaskSpec, unchanged: SweGradeResult, gold: SweGradeResult): RowVerdict {
  const instanceId = task.id;
  if (unchanged.status === 'infra_error') {
    return {
      instanceId,
      valid: false,
      infra: true,
      reason: `unchanged repository: ${unchanged.reason}: ${unchanged.message}`,
    };
  }
  if (gold.status === 'infra_error') {
    return { instanceId, valid: false, infra: true, reason: `gold patch: ${gold.reason}: ${gold.message}` };
  }
  const passing = unchanged.tests_status.FAIL_TO_PASS.success;
  if (passing.length > 0) {
    return {
      instanceId,
      valid: false,
      reason: `unchanged repository already passes FAIL_TO_PASS test(s): ${passing.slice(0, 3).join(', ')}`,
    };
  }
  if (gold.reward !== 1) {
    const failing = [...gold.tests_status.FAIL_TO_PASS.failure, ...gold.tests_status.PASS_TO_PASS.failure];
    return {
      instanceId,
      valid: false,
      reason: `gold patch does not resolve (${gold.outcome}, ${gold.resolution}${failing.length ? `; failing: ${failing.slice(0, 3).join(', ')}` : ''})`,
    };
  }
  return { instanceId, valid: true };
}

/** Grade the unchanged repository and the gold patch of every task; keep the tasks that pass both checks. */
export async function validateDataset(
  tasks: readonly TaskSpec[],
  source: SandboxSource,
  options: ValidateDatasetOptions = {},
): Promise<ValidationReport> {
  const started = performance.now();
  const { concurrency = 2, cacheFile, onRow, ...grade } = options;
  const key = cacheKey(tasks);
  if (cacheFile) {
    const cached = await readFile(cacheFile, 'utf8').then(
      (text) => JSON.parse(text) as { key?: string | undefined; verdicts?: RowVerdict[] | undefined },
      () => undefined,
    );
    if (cached?.key === key && cached.verdicts?.length === tasks.length) {
      return report(tasks, cached.verdicts, true, started);
    }
  }
  const verdicts = new Array<RowVerdict>(tasks.length);
  let next = 0;
  let done = 0;
  await Promise.all(
    Array.from({ length: Math.max(1, Math.min(concurrency, tasks.length)) }, async () => {
      while (next < tasks.length) {
        const i = next++;
        const task = tasks[i]!;
        const unchanged = await gradeInFreshSandbox(source, task, patchFromDiff(''), grade);
        const gold = await gradeInFreshSandbox(
          source,
          task,
          patchFromDiff(task.goldPatch ?? '', taskTestFiles(task)),
          grade,
        );
        verdicts[i] = task.goldPatch
          ? verdictOf(task, unchanged, gold)
          : { instanceId: task.id, valid: false, reason: 'the row has no gold patch' };
        onRow?.(verdicts[i]!, ++done, tasks.length);
      }
    }),
  );
  if (cacheFile && !verdicts.some((v) => v.infra)) {
    await mkdir(dirname(cacheFile), { recursive: true });
    await writeFile(`${cacheFile}.tmp`, `${JSON.stringify({ key, verdicts }, null, 2)}\n`);
    await rename(`${cacheFile}.tmp`, cacheFile);
  }
  return report(tasks, verdicts, false, started);
}

function report(
  tasks: readonly TaskSpec[],
  verdicts: RowVerdict[],
  cached: boolean,
  started: number,
): ValidationReport {
  const ok = new Set(verdicts.filter((v) => v.valid).map((v) => v.instanceId));
  return {
    valid: tasks.filter((t) => ok.has(t.id)),
    invalid: verdicts.filter((v) => !v.valid),
    verdicts,
    cached,
    durationMs: performance.now() - started,
  };
}
