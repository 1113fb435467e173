/**
 * The rollout server's durable work units: each slime sample (by `group_index` and `index`) is a
 * `GroupQueue` unit of one sibling. Its result is recorded with a receipt before the reply goes out, so
 * a request sent again (the reply was lost, the server restarted) is answered with the recorded rows:
 * no second rollout, no second grade. An infra failure gets a replacement attempt while attempts remain,
 * then the unit is dropped (counted as `infra_failed`) and answered with a failure row. Answered units
 * are handed off at once (one step each) and kept for `retain` more answers, then collected.
 */
import { errorMarker, hasErrorMarker, type Sample, VimeError } from '@vime/core';
import type { GroupQueue, SampleVersions } from '@vime/core/queue';
import { deadlineSignal, sleep } from '@vime/core/utils';

/** What a sample unit answered: its rows, and whether they came from the queue. */
export interface UnitRun {
  rows: Sample[];
  /** Answered from the queue: recorded by an earlier request. */
  replayed: boolean;
}

/** The unit key of a slime sample, or undefined when it carries no index (then it is not a unit). */
export function unitKey(sample: Sample): string | undefined {
  if (sample.index === undefined || sample.index === null) return undefined;
  return `sample/${sample.group_index ?? '-'}/${sample.index}`;
}

const unitDroppedMarker = errorMarker('UnitDropped');

/** The error a dropped unit answers with (the caller turns it into a failure row). */
export class UnitDropped extends VimeError {
  readonly [unitDroppedMarker] = true;
  constructor(
    message: string,
    readonly attempts: number,
    cause?: unknown,
  ) {
    super('rollout_failed', message, { cause });
  }

  /** Whether `value` is a `UnitDropped`, from any copy of this package. */
  static override isInstance(value: unknown): value is UnitDropped {
    return hasErrorMarker(value, unitDroppedMarker);
  }
}

/**
 * Run the unit `key`: answer its recorded rows, or lease an attempt, run it, and record the rows. Throws
 * `UnitDropped` once it has no attempt left (or `shouldRetry` says the error is the request's own).
 */
export async function runSampleUnit(
  queue: GroupQueue,
  key: string,
  attemptOnce: (signal: AbortSignal) => Promise<Sample[]>,
  o: {
    signal: AbortSignal;
    deadlineMs: number;
    retryDelayMs: number;
    shouldRetry: (error: unknown) => boolean;
    onRetry: () => void;
  },
): Promise<UnitRun> {
  const id = await queue.create({ n: 1, key });
  let tries = 0;
  for (;;) {
    o.signal.throwIfAborted();
    const done = await queue.result(id, 0);
    if (done) return { rows: done.samples, replayed: tries === 0 };
    const group = queue.group(id);
    // Collected: dropped, or answered more than `retainSteps` answers ago. Either way not run again.
    if (!group) throw new UnitDropped(`${key} was dropped or answered long ago, and collected`, tries);
    if (group.status === 'dropped') throw new UnitDropped(`${key} was dropped (${group.reason})`, tries);
    // Not free: another request for the same sample runs it now; its result is answered to both.
    const wait = deadlineSignal(250, o.signal);
    const lease = await queue
      .lease({ group: id, worker: 'server', deadlineMs: o.deadlineMs, signal: wait.signal })
      .catch((error: unknown) => {
        if (o.signal.aborted) throw error;
        return undefined;
      })
      .finally(wait.clear);
    if (!lease) continue;
    const attempt = lease.attempts[0]!;
    tries++;
    let rows: Sample[];
    try {
      rows = await attemptOnce(AbortSignal.any([o.signal, attempt.signal]));
    } catch (error) {
      if (o.signal.aborted) throw error;
      // The request's own error (bad input): another attempt cannot fix it.
      if (!o.shouldRetry(error)) {
        await queue.drop(id);
        throw new UnitDropped((error as Error).message, tries, error);
      }
      const failure = VimeError.isInstance(error) ? error : undefined;
      const outcome = await queue.fail(attempt, {
        code: failure?.code ?? 'rollout_error',
        message: (error as Error).message,
      });
      if (outcome.outcome === 'drop') throw new UnitDropped((error as Error).message, tries, error);
      o.onRetry();
      await sleep(o.retryDelayMs * 2 ** (tries - 1), o.signal);
      continue;
    }
    const reward = rows.find((r) => typeof r.reward === 'number')?.reward;
    // Rows without a reward are not a graded result: answered, not recorded.
    if (typeof reward !== 'number' || rows.length === 0) return { rows, replayed: false };
    await queue.submit(attempt, { reward, samples: rows, versions: rows.map(versionsOf) }).catch((error) => {
      if ((error as { code?: string | undefined }).code !== 'attempt_stale') throw error;
    });
    return { rows, replayed: false };
  }
}

/** A row's numbered weight versions (SGLang's `default`, or none: version 0). */
function versionsOf(row: Sample): SampleVersions {
  const numbered = row.weight_versions.filter((v) => /^\d{1,15}$/.test(v)).map(Number);
  return { versions: numbered.length > 0 ? [...new Set(numbered)] : [0] };
}

/** Hand answered units off (one step each), so GC keeps only the last `retain`. */
export async function handOffAnswered(queue: GroupQueue): Promise<void> {
  while (queue.stats.ready > 0) {
    const step = queue.trainerStep + 1;
    await queue.take(step, { groups: 1 });
    await queue.commit(step, { version: queue.trainerVersion });
  }
}
