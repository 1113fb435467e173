/**
 * `RolloutQueue`: the step hand-off between a rollout loop and a trainer, on a `SampleQueue`.
 *
 * The rollout side appends each scored rollout of a training step as a typed record keyed by (step,
 * group, sample), then ends the step, handing over the step's failed rollouts with the end marker. The
 * trainer side takes a whole step (its scored rollouts with their samples, by group, and its failed
 * ones), trains, and commits the step. Either side may run in its own process and be killed at any
 * point:
 * - A restarted rollout side skips what `has(step, ref)` reports and ends the step again (a no-op when
 *   it was ended).
 * - The committed step is saved with the queue cursor, atomically. After a restart, records of steps
 *   up to it (read but not yet collected) are dropped, and records of later steps that were read ahead
 *   are read again: the cursor never moves past a record of a step that was not committed.
 * - The end marker carries the number of scored rollouts, so a step is taken only when all of them
 *   arrived, in whatever order they were appended.
 */
import { z } from 'zod';
import { ConfigError, describeValue } from '../errors.js';
import { RolloutResultSchema, type ScoredRollout, type UnscoredRollout } from '../rollout.js';
import { parseWith } from '../validate.js';
import { QueueError } from './format.js';
import { SampleQueue, type SampleQueueOptions } from './queue.js';
import type { QueueRecord } from './reader.js';
import type { AppendResult } from './writer.js';

/** Which rollout of a step: the prompt group and the sample within it (as `runRollouts` numbers them). */
export interface RolloutSlot {
  groupIndex: number;
  sampleIndex: number;
}

/** The scored rollouts of one prompt group of a step, in sample order. */
export interface RolloutGroup {
  groupIndex: number;
  taskId: string;
  rollouts: ScoredRollout[];
}

export interface StepBatch {
  step: number;
  /** Every scored rollout of the step, by group then sample, with its samples. */
  rollouts: ScoredRollout[];
  /** The same rollouts by prompt group. */
  groups: RolloutGroup[];
  /** Rollouts that failed or were aborted: no reward, no samples. */
  failed: UnscoredRollout[];
}

const [completed, truncated, failed, aborted] = RolloutResultSchema.options;
const ScoredSchema = z.discriminatedUnion('status', [
  completed.omit({ samples: true }),
  truncated.omit({ samples: true }),
]);
const UnscoredSchema = z.discriminatedUnion('status', [
  failed.omit({ samples: true }),
  aborted.omit({ samples: true }),
]);
const Step = z.number().int().nonnegative();
const RolloutMetaSchema = z.object({ step: Step, result: ScoredSchema });
const EndMetaSchema = z.object({
  step: Step,
  count: z.number().int().nonnegative(),
  failed: z.array(UnscoredSchema),
});

const rolloutKey = (step: number, groupIndex: number, sampleIndex: number) =>
  `rollout/${step}/${groupIndex}/${sampleIndex}`;
const endKey = (step: number) => `end/${step}`;
const KEY = /^(?:rollout\/(\d+)\/\d+\/\d+|end\/(\d+))$/;

/** The step of a key this module wrote, and whether it is an end marker. */
function parseKey(key: string): { step: number; end: boolean } | undefined {
  const m = KEY.exec(key);
  if (!m) return undefined;
  return m[2] === undefined ? { step: Number(m[1]), end: false } : { step: Number(m[2]), end: true };
}

function checkStep(step: number, what: string): void {
  if (!Number.isInteger(step) || step < 0) {
    throw new ConfigError(`RolloutQueue.${what} step: expected an integer ≥ 0, found ${describeValue(step)}`);
  }
}

interface Pending {
  /** Lowest seq of the step's records read so far (the cursor must not pass it uncommitted). */
  firstSeq: number;
  rollouts: Map<string, ScoredRollout>;
  end: { count: number; failed: UnscoredRollout[] } | undefined;
}

export class RolloutQueue {
  /** The underlying queue (for its events, `dir`, `recovered`). */
  readonly queue: SampleQueue;
  // Rollout side: rollouts per step in the queue, steps ended, appends in flight per step.
  readonly #counts = new Map<number, number>();
  readonly #ended = new Set<number>();
  readonly #inflight = new Map<number, Set<Promise<unknown>>>();
  // Trainer side: records read but not handed off, by step.
  readonly #pending = new Map<number, Pending>();
  #serial: Promise<unknown> = Promise.resolve();

  private constructor(queue: SampleQueue) {
    this.queue = queue;
  }

  static async open(dir: string, options: SampleQueueOptions = {}): Promise<RolloutQueue> {
    const rq = new RolloutQueue(await SampleQueue.open(dir, options));
    if (rq.queue.mode !== 'consumer') {
      for (const key of rq.queue.keys()) {
        const parsed = parseKey(key);
        if (!parsed) continue;
        if (parsed.end) rq.#ended.add(parsed.step);
        else rq.#counts.set(parsed.step, (rq.#counts.get(parsed.step) ?? 0) + 1);
      }
    }
    return rq;
  }

  // Rollout side --------------------------------------------------------------------------------

  /** Whether the rollout in `slot` of `step` is in the queue (skip it when resuming). */
  has(step: number, slot: RolloutSlot): boolean {
    return this.queue.has(rolloutKey(step, slot.groupIndex, slot.sampleIndex));
  }

  /** Scored rollouts of `step` in the queue. */
  count(step: number): number {
    this.#producerSide('count');
    return this.#counts.get(step) ?? 0;
  }

  /** Whether `step` was ended (all its rollouts are in the queue). */
  ended(step: number): boolean {
    this.#producerSide('ended');
    return this.#ended.has(step);
  }

  /** Append one scored rollout of `step`, with its samples. Resolves when it is durable. */
  append(step: number, result: ScoredRollout): Promise<AppendResult> {
    try {
      checkStep(step, 'append');
      if (result?.status !== 'completed' && result?.status !== 'truncated') {
        throw new ConfigError(
          `RolloutQueue.append result.status: expected 'completed' or 'truncated', found ${describeValue((result as { status?: unknown } | undefined)?.status)}; pass failed and aborted rollouts to endStep(step, { failed })`,
        );
      }
      if (this.#ended.has(step)) {
        throw new QueueError(`RolloutQueue.append: step ${step} was already ended; its rollouts are final`, {
          code: 'step_ended',
        });
      }
      const { samples, ...rest } = result;
      const key = rolloutKey(step, result.groupIndex, result.sampleIndex);
      const appended = this.queue.append(key, samples, { meta: { step, result: rest } }).then((r) => {
        if (!r.duplicate) this.#counts.set(step, (this.#counts.get(step) ?? 0) + 1);
        return r;
      });
      const inflight = this.#inflight.get(step) ?? new Set();
      this.#inflight.set(step, inflight);
      inflight.add(appended);
      const forget = () => inflight.delete(appended);
      appended.then(forget, forget);
      return appended;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * End `step`: every scored rollout of it is in the queue (appends still in flight are waited for);
   * `failed` are its failed and aborted rollouts, handed to the trainer side with the end marker.
   */
  async endStep(
    step: number,
    options: { failed?: ReadonlyArray<UnscoredRollout> | undefined } = {},
  ): Promise<void> {
    checkStep(step, 'endStep');
    await Promise.allSettled([...(this.#inflight.get(step) ?? [])]);
    const failed = (options.failed ?? []).map(({ samples: _, error, ...rest }) => ({
      ...rest,
      // `cause` can be anything (an Error): keep what a report needs.
      error: { code: error.code, message: error.message, ...(error.phase ? { phase: error.phase } : {}) },
    }));
    const count = this.#counts.get(step) ?? 0;
    await this.queue.append(endKey(step), [], { meta: { step, count, failed } });
    this.#ended.add(step);
  }

  // Trainer side --------------------------------------------------------------------------------

  /** The last step committed (`undefined` before the first commit). */
  get committedStep(): number | undefined {
    const step = this.queue.committedMetadata?.step;
    return typeof step === 'number' ? step : undefined;
  }

  /**
   * Wait until `step` was ended and all its rollouts were read, and return them, typed. Records of
   * later steps read meanwhile are kept for their turn; records of committed steps are dropped.
   */
  takeStep(step: number, options: { signal?: AbortSignal | undefined } = {}): Promise<StepBatch> {
    return this.#serialized(async () => {
      checkStep(step, 'takeStep');
      const committed = this.committedStep;
      if (committed !== undefined && step <= committed) {
        throw new ConfigError(
          `RolloutQueue.takeStep step: ${step} was already handed off (the committed step is ${committed}); take a later step`,
        );
      }
      for (;;) {
        const pending = this.#pending.get(step);
        if (pending?.end && pending.rollouts.size >= pending.end.count) {
          if (pending.rollouts.size > pending.end.count) {
            throw new QueueError(
              `step ${step} was ended with ${pending.end.count} rollouts but the queue holds ${pending.rollouts.size}`,
              { code: 'queue_corrupt' },
            );
          }
          return batchOf(step, pending);
        }
        const batch = await this.queue.read({ wait: true, signal: options.signal });
        for (const record of batch.records) this.#accept(record);
      }
    });
  }

  /**
   * Commit `step`: it and every earlier step are handed off and never delivered again. The cursor
   * moves up to the first record of a later step still waiting. Committing a step at or below the
   * committed one is a no-op.
   */
  commitStep(step: number): Promise<void> {
    return this.#serialized(async () => {
      checkStep(step, 'commitStep');
      const committed = this.committedStep;
      if (committed !== undefined && step <= committed) return;
      let next = this.queue.readPosition;
      for (const [s, pending] of this.#pending) {
        if (s <= step) this.#pending.delete(s);
        else next = Math.min(next, pending.firstSeq);
      }
      await this.queue.commit(next, { metadata: { step } });
    });
  }

  #accept(record: QueueRecord): void {
    const parsed = parseKey(record.key);
    if (!parsed) {
      throw new QueueError(
        `record ${record.seq} has key ${JSON.stringify(record.key)}, which RolloutQueue did not write; a RolloutQueue directory holds only its own records`,
        { code: 'queue_corrupt' },
      );
    }
    const committed = this.committedStep;
    if (committed !== undefined && parsed.step <= committed) return; // handed off before a restart
    const where = `record ${record.seq} (${record.key}) meta`;
    let pending = this.#pending.get(parsed.step);
    if (!pending) {
      pending = { firstSeq: record.seq, rollouts: new Map(), end: undefined };
      this.#pending.set(parsed.step, pending);
    }
    if (parsed.end) {
      const meta = parseWith(EndMetaSchema, record.meta, 'end of step', {
        root: where,
        code: 'queue_corrupt',
      });
      pending.end = { count: meta.count, failed: meta.failed.map((r) => ({ ...r, samples: [] })) };
    } else {
      const { result } = parseWith(RolloutMetaSchema, record.meta, 'rollout', {
        root: where,
        code: 'queue_corrupt',
      });
      pending.rollouts.set(record.key, { ...result, samples: record.samples });
    }
  }

  #producerSide(what: string): void {
    if (this.queue.mode === 'consumer') {
      throw new ConfigError(
        `RolloutQueue.${what} is a producer operation; open the queue with mode 'producer' or 'both'`,
      );
    }
  }

  #serialized<T>(run: () => Promise<T>): Promise<T> {
    const next = this.#serial.then(run);
    this.#serial = next.catch(() => {});
    return next;
  }

  async close(): Promise<void> {
    await this.queue.close();
  }
}

function batchOf(step: number, pending: Pending): StepBatch {
  const rollouts = [...pending.rollouts.values()].sort(
    (a, b) => a.groupIndex - b.groupIndex || a.sampleIndex - b.sampleIndex,
  );
  const groups: RolloutGroup[] = [];
  for (const r of rollouts) {
    const last = groups.at(-1);
    if (last?.groupIndex === r.groupIndex) last.rollouts.push(r);
    else groups.push({ groupIndex: r.groupIndex, taskId: r.taskId, rollouts: [r] });
  }
  const failed = [...pending.end!.failed].sort(
    (a, b) => a.groupIndex - b.groupIndex || a.sampleIndex - b.sampleIndex,
  );
  return { step, rollouts, groups, failed };
}
