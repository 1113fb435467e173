/**
 * The loop's rollouts as durable work units (`GroupQueue` of @vime/core). A step's prompts are groups
 * of `samplesPerPrompt` siblings, created under a key (a restart finds them again). Workers lease one
 * sibling at a time with a deadline; a graded sibling is submitted and answered with a receipt, so a
 * restart never runs it again; a sibling that fails for infrastructure reasons gets a replacement
 * (`attempts`) or its group is dropped, counted by reason. Only complete groups reach the trainer.
 *
 * Every sibling ends the step with one result: graded (handed off, or kept out because its group was
 * dropped), failed (its last attempt's error), or aborted (its group was dropped before it finished).
 */
import { isScored, type RolloutResult, type ScoredRollout, type TaskSpec, VimeError } from '@vime/core';
import type { GroupQueue, SampleVersions, SiblingAttempt } from '@vime/core/queue';
import { type RolloutFunction, type RolloutRun, runRollouts } from '@vime/core/runner';
import { deadlineSignal } from '@vime/core/utils';

export interface GroupPayload {
  step: number;
  groupIndex: number;
  task: number;
}

/** One sibling attempt as the runner sees it (a task of its own). */
interface AttemptTask {
  id: string;
  task: TaskSpec;
  attempt: SiblingAttempt;
  groupIndex: number;
}

/** One grader call: which sibling attempt it graded and what it gave. */
export interface GradeEntry {
  group: number;
  slot: number;
  attempt: number;
  rolloutId: number;
  status: 'completed' | 'truncated';
  reward: number;
}

/** What the producer leaves for the step's hand-off. */
export interface StepGroups {
  /** The step's groups that are complete (handed off by `take`). */
  complete: number;
  /** Final results of siblings of dropped groups (not trained on). */
  unhanded: RolloutResult[];
}

export const groupKey = (step: number, groupIndex: number) => `step-${step}/group-${groupIndex}`;

/** Create (or find again, after a restart) the groups of a step. */
export function createStepGroups(
  queue: GroupQueue,
  step: number,
  first: number,
  count: number,
  taskCount: number,
  n: number,
): Promise<number[]> {
  return Promise.all(
    Array.from({ length: count }, (_, i) => {
      const groupIndex = first + i;
      const payload: GroupPayload = { step, groupIndex, task: groupIndex % taskCount };
      return queue.create({ n, key: groupKey(step, groupIndex), payload });
    }),
  );
}

/** Siblings of `ids` whose result the queue holds (run before a restart; not run again). */
export function doneSiblings(queue: GroupQueue, ids: number[]): number {
  let done = 0;
  for (const id of ids) for (const s of queue.group(id)?.slots ?? []) if (s.done) done++;
  return done;
}

export interface RollOutOptions {
  samplesPerPrompt: number;
  concurrency: number;
  guardMs: number;
  signal?: AbortSignal | undefined;
  /** Each attempt's result as it finishes (after the queue recorded it). */
  onResult: (result: RolloutResult) => void;
  /** A graded attempt, before it is submitted: the ledger of every reward computed (awaited). */
  onGraded?: ((grade: GradeEntry) => Promise<void>) | undefined;
  /** Called with the run once it exists (progress bars). */
  onRun?: (run: RolloutRun<AttemptTask>) => void;
}

/**
 * Run the open siblings of `ids` until every group is complete or dropped. Returns what the step's
 * hand-off needs; `stats.skipped` of the run is always 0 (the queue decides what runs).
 */
export async function rollOutGroups(
  queue: GroupQueue,
  ids: number[],
  tasks: TaskSpec[],
  rollout: RolloutFunction<TaskSpec>,
  o: RollOutOptions,
): Promise<StepGroups> {
  const n = o.samplesPerPrompt;
  const byRun = new Map<number, AttemptTask>();
  const last = new Map<string, RolloutResult>();
  const settled = () => ids.every((id) => queue.group(id)?.status !== 'open');
  // The lease deadline is past the runner's guard: the guard ends an attempt first, with its phase.
  const deadlineMs = Number.isFinite(o.guardMs) ? o.guardMs + 60_000 : undefined;
  async function* attempts(): AsyncGenerator<AttemptTask> {
    for (let k = 0; ; k++) {
      o.signal?.throwIfAborted();
      if (settled()) return;
      const wait = deadlineSignal(250, o.signal);
      const lease = await queue
        .lease({ worker: 'loop', slots: 1, deadlineMs, signal: wait.signal })
        .catch((error: unknown) => {
          if (o.signal?.aborted) throw error;
          if (wait.signal.aborted) return undefined; // re-check whether the step is settled
          throw error;
        })
        .finally(wait.clear);
      if (!lease) {
        k--;
        continue;
      }
      const payload = lease.payload as GroupPayload;
      const item: AttemptTask = {
        id: tasks[payload.task]!.id,
        task: tasks[payload.task]!,
        attempt: lease.attempts[0]!,
        groupIndex: payload.groupIndex,
      };
      byRun.set(k, item);
      yield item;
    }
  }
  const run = runRollouts(
    attempts(),
    (item, ctx) => {
      const ids = refOf(item, n);
      // The attempt's signal aborts when it can no longer commit (its group dropped, its deadline).
      const signal = AbortSignal.any([ctx.signal, item.attempt.signal]);
      return rollout(item.task, { ...ctx, ...ids, signal });
    },
    {
      samplesPerPrompt: 1,
      concurrency: o.concurrency,
      guardMs: o.guardMs,
      ...(o.signal ? { signal: o.signal } : {}),
    },
  );
  o.onRun?.(run);
  for await (const raw of run) {
    const item = byRun.get(raw.rolloutId)!;
    byRun.delete(raw.rolloutId);
    const result = relabel(raw, item, n);
    // The run is stopping (a signal): an attempt it cut short is no result. Its lease is left as a crash
    // leaves it, so a resumed run runs that sibling again; a failure recorded here would drop its whole
    // group for good, siblings already graded included.
    if (!isScored(result) && o.signal?.aborted) continue;
    const key = `${item.attempt.group}/${item.attempt.slot}`;
    last.set(key, result);
    if (isScored(result)) {
      const { group, slot, attempt } = item.attempt;
      await o.onGraded?.({
        group,
        slot,
        attempt,
        rolloutId: result.rolloutId,
        status: result.status,
        reward: result.reward,
      });
      await queue
        .submit(item.attempt, {
          status: result.status,
          reward: result.reward,
          samples: result.samples,
          versions: versionsOf(result, queue.trainerVersion),
          meta: { result: { ...result, samples: [] } },
        })
        .catch((error: unknown) => {
          // Its group was dropped meanwhile (or its deadline passed): graded, but not trained on.
          if ((error as { code?: string }).code !== 'attempt_stale') throw error;
        });
    } else if (item.attempt.signal.aborted) {
      last.set(key, {
        ...result,
        status: 'aborted',
        error: { code: 'attempt_stale', message: String((item.attempt.signal.reason as Error)?.message) },
      });
    } else {
      await queue.fail(item.attempt, result.error);
    }
    o.onResult(last.get(key)!);
  }
  o.signal?.throwIfAborted();
  // Siblings of dropped groups: their last result, or an abort naming why they never finished.
  const unhanded: RolloutResult[] = [];
  let complete = 0;
  for (const [i, id] of ids.entries()) {
    const group = queue.group(id);
    if (group?.status === 'complete' || group?.status === 'handed') {
      complete++;
      continue;
    }
    const payload = (group?.payload ?? undefined) as GroupPayload | undefined;
    for (let slot = 0; slot < n; slot++) {
      const seen = last.get(`${id}/${slot}`);
      if (seen) {
        unhanded.push(isScored(seen) ? { ...seen, samples: [] } : seen);
        continue;
      }
      const groupIndex = payload?.groupIndex ?? i;
      const task = tasks[(payload?.task ?? 0) % tasks.length]!;
      const now = Date.now();
      unhanded.push({
        taskId: task.id,
        groupIndex,
        sampleIndex: slot,
        rolloutId: groupIndex * n + slot,
        status: 'aborted',
        error: {
          code: 'group_dropped',
          message: `its group was dropped (${group?.reason ?? 'before a restart'}) before this sibling finished`,
        },
        samples: [],
        turns: 0,
        timings: {},
        metadata: {},
        startedAt: now,
        endedAt: now,
      });
    }
  }
  return { complete, unhanded };
}

function refOf(item: AttemptTask, n: number) {
  const sampleIndex = item.attempt.slot;
  return { groupIndex: item.groupIndex, sampleIndex, rolloutId: item.groupIndex * n + sampleIndex };
}

/** The runner numbered attempts as it got them; give the result (and its rows) the sibling's ids. */
function relabel(result: RolloutResult, item: AttemptTask, n: number): RolloutResult {
  const ref = refOf(item, n);
  for (const row of result.samples) {
    row.group_index = ref.groupIndex;
    row.index = ref.rolloutId;
    row.rollout_id = ref.rolloutId;
  }
  return { ...result, ...ref };
}

/**
 * The weight versions of a result's rows, as the engine reported them. A row without a numbered
 * version (an engine whose weights were never versioned reports none, or SGLang's `default`) is counted
 * at the trainer's version when it was recorded.
 */
function versionsOf(result: ScoredRollout, trainerVersion: number): SampleVersions[] {
  return result.samples.map((s) => {
    const numbered = s.weight_versions.filter((v) => /^\d{1,15}$/.test(v)).map(Number);
    return { versions: numbered.length > 0 ? [...new Set(numbered)] : [trainerVersion] };
  });
}

/** A step's handed siblings as the scored rollouts they were, rows included. */
export function scoredOf(
  batch: Awaited<ReturnType<GroupQueue['take']>>,
): Array<{ rollout: ScoredRollout; staleness: Record<string, unknown> }> {
  const out: Array<{ rollout: ScoredRollout; staleness: Record<string, unknown> }> = [];
  for (const g of batch.groups) {
    for (const s of g.siblings) {
      const kept = s.meta.result as ScoredRollout | undefined;
      if (!kept) throw new VimeError('queue_corrupt', `group ${g.group} slot ${s.slot} has no result`);
      out.push({
        rollout: { ...kept, samples: s.samples },
        staleness: {
          span: s.span,
          lag: s.lag,
          trainer_version: batch.trainerVersion,
          queue_ms: g.queueMs,
          attempt: s.attempt,
        },
      });
    }
  }
  out.sort(
    (a, b) => a.rollout.groupIndex - b.rollout.groupIndex || a.rollout.sampleIndex - b.rollout.sampleIndex,
  );
  return out;
}
