/**
 * The worker over a `GroupQueue`: runs the open siblings of a set of prompt groups with `runRollouts`,
 * each as a leased attempt with a deadline. A graded sibling is submitted and answered with a receipt, so
 * a restart never runs it again; a sibling that fails for infrastructure reasons gets a replacement
 * (`maxAttempts` of the queue) or its group is dropped, counted by reason. Only complete groups reach the
 * trainer (`take`).
 *
 * Every sibling ends with one result: graded (handed off, or kept out because its group was dropped),
 * failed (its last attempt's error), or aborted (its group was dropped before it finished).
 */
import { VimeError } from '../errors.js';
import { isScored, type RolloutResult, type ScoredRollout } from '../rollout.js';
import type { RolloutFunction } from '../runner/options.js';
import { type RolloutRun, runRollouts } from '../runner/run.js';
import { deadlineSignal } from '../utils/signals.js';
import type { SampleVersions } from './group-events.js';
import type { SiblingAttempt } from './group-types.js';
import type { GroupQueue } from './groups.js';

/** What a group's payload must say for the worker: its index in the run and which task it asks. */
export interface GroupWork {
  groupIndex: number;
  /** Index into the worker's `tasks`. */
  task: number;
}

/** One sibling attempt as the runner sees it (a task of its own). */
interface AttemptTask<T> {
  id: string;
  task: T;
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

/** What `runGroups` leaves for the hand-off. */
export interface GroupsOutcome {
  /** The groups that are complete (handed off by `take`). */
  complete: number;
  /** Final results of siblings of dropped groups (not trained on). */
  unhanded: RolloutResult[];
}

/** Options of `runGroups`. */
export interface RunGroupsOptions<T> {
  samplesPerPrompt: number;
  concurrency: number;
  guardMs: number;
  signal?: AbortSignal | undefined;
  /** Each attempt's result as it finishes (after the queue recorded it). */
  onResult: (result: RolloutResult) => void;
  /** A graded attempt, before it is submitted: the ledger of every reward computed (awaited). */
  onGraded?: ((grade: GradeEntry) => Promise<void>) | undefined;
  /** Called with the run once it exists (progress bars). */
  onRun?: ((run: RolloutRun<AttemptTask<T>>) => void) | undefined;
}

/**
 * Run the open siblings of `ids` until every group is complete or dropped. Returns what the step's
 * hand-off needs; `stats.skipped` of the run is always 0 (the queue decides what runs).
 */
export async function runGroups<T extends { id: string }>(
  queue: GroupQueue,
  ids: number[],
  tasks: readonly T[],
  rollout: RolloutFunction<T>,
  o: RunGroupsOptions<T>,
): Promise<GroupsOutcome> {
  const n = o.samplesPerPrompt;
  const byRun = new Map<number, AttemptTask<T>>();
  const last = new Map<string, RolloutResult>();
  const settled = () => ids.every((id) => queue.group(id)?.status !== 'open');
  // The lease deadline is past the runner's guard: the guard ends an attempt first, with its phase.
  const deadlineMs = Number.isFinite(o.guardMs) ? o.guardMs + 60_000 : undefined;
  async function* attempts(): AsyncGenerator<AttemptTask<T>> {
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
      const payload = lease.payload as GroupWork;
      const item: AttemptTask<T> = {
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
          if ((error as { code?: string | undefined }).code !== 'attempt_stale') throw error;
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
    const payload = (group?.payload ?? undefined) as GroupWork | undefined;
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

function refOf(item: AttemptTask<unknown>, n: number) {
  const sampleIndex = item.attempt.slot;
  return { groupIndex: item.groupIndex, sampleIndex, rolloutId: item.groupIndex * n + sampleIndex };
}

/** The runner numbered attempts as it got them; give the result (and its rows) the sibling's ids. */
function relabel(result: RolloutResult, item: AttemptTask<unknown>, n: number): RolloutResult {
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
