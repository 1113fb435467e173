/**
 * The trainer side of a `GroupQueue`: choosing a step's batch (complete groups, oldest weight version
 * first, stale ones dropped and counted) and reading a recorded batch back, with every sibling's
 * version span and lag at consumption. A step's choice is recorded before the batch is returned, so
 * whatever happens next the step always gets the same batch.
 */
import { ConfigError, describeValue } from '../errors.js';
import { QueueError } from './format.js';
import type { SampleVersions } from './group-events.js';
import { oldestVersion, type StepRecord } from './group-state.js';
import type { HandedGroup, HandedSibling, TrainingBatch } from './group-types.js';
import type { GroupQueue } from './groups.js';
import type { Journal } from './journal.js';

export async function takeBatch(
  queue: GroupQueue,
  step: number,
  options: { groups: number; signal?: AbortSignal | undefined },
  ready: ReadonlySet<number>,
): Promise<TrainingBatch> {
  const { journal } = queue;
  const state = journal.state;
  const want = options?.groups;
  // 0: a step whose groups were all dropped is still a step (recorded, committed, replayed).
  if (!Number.isInteger(want) || want < 0) {
    throw new ConfigError(
      `GroupQueue.take options.groups: expected an integer ≥ 0, found ${describeValue(want)}`,
    );
  }
  if (step !== state.trainer.step + 1) {
    throw new ConfigError(
      `GroupQueue.take step: expected ${state.trainer.step + 1} (the step after the last commit, ${state.trainer.step}), found ${describeValue(step)}`,
    );
  }
  if (state.steps.has(step)) return buildBatch(journal, step, true);
  const { maxStaleness, onStale } = queue.options;
  for (;;) {
    options.signal?.throwIfAborted();
    journal.check();
    const version = state.trainer.version;
    const candidates = [...ready].map((id) => state.groups.get(id)!);
    const order = (g: (typeof candidates)[number]) => oldestVersion(g) ?? version;
    candidates.sort((a, b) => order(a) - order(b) || a.doneSeq! - b.doneSeq!);
    const chosen: number[] = [];
    const stale: Array<[number, number]> = [];
    for (const g of candidates) {
      const lag = version - order(g);
      if (onStale === 'drop' && lag > maxStaleness) stale.push([g.id, lag]);
      else if (chosen.length < want) chosen.push(g.id);
    }
    if (chosen.length === want) {
      const { written } = journal.append({ type: 'take', step, version, groups: chosen, stale });
      queue.emit('take', { step, groups: chosen, stale: stale.length });
      // The batch is decoded while its record is flushed; it is returned only once the choice is durable.
      const [batch] = await Promise.all([buildBatch(journal, step, false), written]);
      return batch;
    }
    await queue.changed(options.signal);
  }
}

const span = (lo: number | null, hi: number | null) =>
  lo === null || hi === null ? null : { min: lo, max: hi };

/** The recorded batch of `step`, read back from the records its groups point to. */
export async function buildBatch(journal: Journal, step: number, replay: boolean): Promise<TrainingBatch> {
  const state = journal.state;
  const record: StepRecord | undefined = state.steps.get(step);
  if (!record) {
    const kept = [...state.steps.keys()].sort((a, b) => a - b);
    throw new ConfigError(
      `GroupQueue step ${describeValue(step)} has no recorded batch (steps kept: ${kept.length > 0 ? `${kept[0]}..${kept.at(-1)}` : 'none'}; older ones were collected, keep them with a checkpoint or retainSteps)`,
    );
  }
  const groups: HandedGroup[] = [];
  for (const id of record.groups) {
    const group = state.groups.get(id);
    if (!group) {
      throw new QueueError(`step ${step} names group ${id}, which the queue no longer holds`, {
        code: 'queue_corrupt',
      });
    }
    // Read concurrently: a step's siblings are many small records.
    const siblings: HandedSibling[] = await Promise.all(
      group.slots.map(async (s, slot) => {
        const done = s.done!;
        const stored = await journal.read(done.ref);
        return {
          slot,
          attempt: done.attempt,
          status: done.status,
          reward: done.reward,
          samples: stored.samples,
          versions: (stored.meta.versions ?? []) as SampleVersions[],
          span: span(done.lo, done.hi),
          lag: done.lo === null ? null : record.version - done.lo,
          meta: (stored.meta.meta ?? {}) as Record<string, unknown>,
        };
      }),
    );
    const lo = oldestVersion(group);
    let hi: number | null = null;
    for (const s of group.slots) if (s.done?.hi != null) hi = Math.max(hi ?? 0, s.done.hi);
    groups.push({
      group: id,
      key: group.key,
      payload: group.payload,
      siblings,
      span: span(lo, hi),
      lag: lo === null ? null : record.version - lo,
      queueMs: Math.max(0, record.at - (group.doneAt ?? record.at)),
      ageMs: Math.max(0, record.at - group.at),
    });
  }
  return {
    step,
    trainerVersion: record.version,
    replay,
    groups,
    stale: record.stale.map(([group, lag]) => ({ group, lag })),
  };
}
