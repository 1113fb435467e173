/**
 * `GroupQueue`: durable work units for asynchronous RL, in one directory owned by one process.
 *
 * - A prompt group of `n` siblings is the unit: created, leased, completed, handed to the trainer or
 *   dropped as a whole. Each sibling is recorded as it finishes; a group goes to the trainer only when
 *   every sibling is in.
 * - Workers lease sibling attempts with a deadline. A result is accepted only from the attempt that
 *   holds the slot, before its deadline, and answered with a receipt; asking again returns the same
 *   receipt, so a lost reply never makes anyone generate or grade again. An attempt that fails with an
 *   infra error, or runs past its deadline, gets a replacement (bounded) or its group is dropped with a
 *   counted reason: a group never hangs.
 * - An attempt can save a partial (the trajectory so far and the weight versions of its tokens); the
 *   next attempt of that sibling continues from it.
 * - The trainer takes a step's batch of complete groups (oldest weight version first), with every
 *   sample's version span and lag at consumption; a max-staleness bound drops (counted) or holds back
 *   work. Steps are recorded, so a restart, a rollback to a checkpoint or a debug replay gets exactly
 *   the batch the step trained on; `fork` starts a branch that shares the data before its cut.
 *
 * State: `group-state.ts` (pure); storage: `journal.ts`; decisions: `group-lease.ts`; trainer side:
 * `group-handoff.ts`; GC and forks: `group-retention.ts`.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { EventEmitter } from 'eventemitter3';
import { ConfigError, describeValue } from '../errors.js';
import { QueueError } from './format.js';
import type { SampleVersions } from './group-events.js';
import { buildBatch, takeBatch } from './group-handoff.js';
import { GroupIndex } from './group-index.js';
import {
  checkCreate,
  checkLease,
  checkResult,
  checkSamples,
  failureOf,
  type ResolvedOptions,
  resolveOptions,
  versionsOf,
} from './group-input.js';
import {
  attemptId,
  deadlineExpiry,
  pickGroup,
  planLease,
  receiptOf,
  restartExpiry,
  staleError,
} from './group-lease.js';
import { collectGarbage, forkBranch } from './group-retention.js';
import type { GroupState, SlotState } from './group-state.js';
import type {
  AttemptRef,
  Continuation,
  FailOutcome,
  GcReport,
  GroupLease,
  GroupQueueEvents,
  GroupQueueOptions,
  GroupQueueStats,
  LeaseOptions,
  PartialInput,
  Receipt,
  SiblingAttempt,
  SiblingInput,
  SiblingResult,
  TrainingBatch,
} from './group-types.js';
import { Journal } from './journal.js';
import { acquireLock } from './lock.js';

/** A durable queue of prompt groups as work units: leases, receipts, staleness and the step hand-off. */
export class GroupQueue extends EventEmitter<GroupQueueEvents> {
  readonly dir: string;
  readonly options: ResolvedOptions;
  /** @internal */ readonly journal: Journal;
  readonly #release: () => Promise<void>;
  readonly #index = new GroupIndex();
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  #gc: Promise<GcReport> | undefined;
  #serial: Promise<unknown> = Promise.resolve();

  private constructor(dir: string, options: ResolvedOptions, journal: Journal, release: () => Promise<void>) {
    super();
    this.dir = dir;
    this.options = options;
    this.journal = journal;
    this.#release = release;
  }

  /** Open (or create) the queue in `dir`. Attempts leased by a previous owner are expired (`restart`). */
  static async open(dir: string, options: GroupQueueOptions = {}): Promise<GroupQueue> {
    if (typeof dir !== 'string' || dir === '') {
      throw new ConfigError(`GroupQueue.open dir: expected a directory path, found ${describeValue(dir)}`);
    }
    const resolved = resolveOptions(options);
    await mkdir(dir, { recursive: true });
    const release = await acquireLock(join(dir, 'owner.lock'), 'owner');
    let queue: GroupQueue | undefined;
    try {
      const journal = await Journal.open(
        dir,
        { segmentBytes: resolved.segmentBytes, sync: resolved.sync },
        {
          flushed: (e) => queue?.emit('flush', e),
          touched: (groups) => {
            if (queue) queue.#touch(groups);
          },
        },
      );
      queue = new GroupQueue(dir, resolved, journal, release);
      await queue.#recover();
    } catch (error) {
      if (queue) await queue.close().catch(() => {});
      else await release();
      throw error;
    }
    return queue;
  }

  /** The exact batch `step` trained on, read from a queue directory without opening it (debug replay). */
  static async replay(dir: string, step: number): Promise<TrainingBatch> {
    const journal = await Journal.inspect(dir);
    try {
      return await buildBatch(journal, step, true);
    } finally {
      await journal.close();
    }
  }

  async #recover(): Promise<void> {
    const s = this.journal.state;
    this.#touch([...this.journal.state.groups.keys()].sort((a, b) => a - b));
    this.journal.append({ type: 'open', session: s.session + 1 });
    const { lost, drops } = restartExpiry(s, this.options.maxLost);
    if (lost.length > 0) {
      const { written } = this.journal.append({ type: 'expire', attempts: lost, reason: 'restart', drops });
      this.emit('expire', {
        attempts: lost.map(([group, slot, attempt]) => ({ group, slot, attempt })),
        reason: 'restart',
      });
      await written;
    }
    await this.journal.snapshot();
  }

  /** The damaged tail cut off when the queue was opened, if there was one. */
  get recovered(): { segment: string; truncatedBytes: number } | undefined {
    return this.journal.recovered;
  }

  #touch(groups: number[]): void {
    for (const group of this.#index.touch(this.journal.state, groups)) {
      if (group.status === 'complete') this.emit('complete', { group: group.id });
      if (group.status === 'dropped') this.emit('drop', { group: group.id, reason: group.reason! });
    }
  }

  /** @internal Resolves on the next state change (or after `ms`), rejects on abort. */
  changed(signal: AbortSignal | undefined, ms?: number): Promise<void> {
    return this.#index.changed(signal, ms);
  }

  // Rollout side ---------------------------------------------------------------------------------

  /** Groups created so far (ids are 0, 1, 2, …). */
  get created(): number {
    return this.journal.state.nextGroup;
  }

  /** The group created with `key`, while the queue still holds it. */
  groupOf(key: string): number | undefined {
    return this.journal.state.keys.get(key);
  }

  /** A copy of a group's state (undefined once collected). */
  group(id: number): GroupState | undefined {
    const g = this.journal.state.groups.get(id);
    return g && structuredClone(g);
  }

  /**
   * Create a group of `n` siblings for one prompt; `payload` (JSON-like) is what a worker needs to run
   * it. With a `key`, creating it again returns the same group. Resolves once it is durable.
   */
  async create(input: { n: number; payload?: unknown; key?: string | undefined }): Promise<number> {
    this.#check('create');
    const { n, payload = null, key } = input ?? ({} as typeof input);
    checkCreate(n, key);
    const existing = key === undefined ? undefined : this.groupOf(key);
    if (existing !== undefined) {
      await this.journal.writtenThrough(this.journal.state.seq);
      return existing;
    }
    const group = this.journal.state.nextGroup;
    const { written } = this.journal.append({ type: 'create', group, n, payload, ...(key ? { key } : {}) });
    await written;
    return group;
  }

  /**
   * Lease attempts for the free siblings of one group (at most `slots`), each with a deadline. Groups
   * with recorded siblings or partials come first (oldest weight version first), then fresh groups
   * in creation order. Waits for work unless `wait: false` (then: undefined when there is none).
   */
  async lease(options: LeaseOptions = {}): Promise<GroupLease | undefined> {
    const {
      worker = 'worker',
      slots = Number.POSITIVE_INFINITY,
      deadlineMs = this.options.deadlineMs,
      wait = true,
      group: only,
      signal,
    } = options;
    checkLease(slots, deadlineMs);
    for (;;) {
      signal?.throwIfAborted();
      this.#check('lease');
      this.#sweep();
      const group = this.#pick(only);
      if (group) return this.#leaseGroup(group, worker, slots, deadlineMs);
      if (!wait) return undefined;
      await this.changed(signal);
    }
  }

  #pick(only?: number): GroupState | undefined {
    const state = this.journal.state;
    const among = (free: Set<number>) => (only === undefined ? free : free.has(only) ? [only] : []);
    const { startedFree, freshFree } = this.#index;
    const { group, stale } = pickGroup(state, among(startedFree), among(freshFree), this.options);
    // Their recorded tokens are already too old to be handed off: stop spending work on them.
    for (const id of stale) this.journal.append({ type: 'drop', group: id, reason: 'stale' });
    return group;
  }

  async #leaseGroup(group: GroupState, worker: string, max: number, deadlineMs: number): Promise<GroupLease> {
    const state = this.journal.state;
    const { attempts, restart, continued } = planLease(state, group, max, this.options);
    const deadline = Date.now() + deadlineMs;
    const lease = state.nextLease;
    // Deferred: a lease lost with a crash is an attempt that never started (whatever it records later
    // comes after the lease in the journal).
    const event = { type: 'lease', lease, worker, deadline, attempts } as const;
    this.journal.append(restart.length > 0 ? { ...event, restart } : event, undefined, { defer: true });
    const out: SiblingAttempt[] = [];
    for (const [g, slot, attempt] of attempts) {
      const controller = new AbortController();
      this.#index.live.set(attemptId(g, slot, attempt), {
        ref: { group: g, slot, attempt },
        deadline,
        controller,
      });
      const saved = continued.get(slot);
      let partial: Continuation | undefined;
      if (saved) {
        const record = await this.journal.read(saved.ref);
        partial = {
          attempt: saved.attempt,
          samples: record.samples,
          versions: (record.meta.versions ?? []) as SampleVersions[],
          state: record.meta.state,
        };
      }
      out.push({
        group: g,
        slot,
        attempt,
        lease,
        deadline,
        signal: controller.signal,
        ...(partial ? { partial } : {}),
      });
    }
    this.#schedule();
    return {
      group: group.id,
      key: group.key,
      n: group.n,
      payload: group.payload,
      lease,
      worker,
      deadline,
      attempts: out,
    };
  }

  /** The slot an attempt names, and whether the attempt still holds it (expiring it if overdue). */
  #holder(a: AttemptRef, what: string): { group: GroupState; slot: SlotState } {
    this.#check(what);
    const state = this.journal.state;
    const group = state.groups.get(a?.group);
    const slot = group?.slots[a?.slot];
    if (!group && Number.isInteger(a?.group) && a.group >= 0 && a.group < state.nextGroup) {
      throw staleError(a, undefined, undefined);
    }
    if (!group || !slot || !Number.isInteger(a.attempt)) {
      throw new ConfigError(`GroupQueue.${what}: ${describeValue(a)} names no sibling attempt of this queue`);
    }
    return { group, slot };
  }

  /** True when `a` holds its slot now; an overdue attempt is expired first. */
  #holds(a: AttemptRef, slot: SlotState): boolean {
    if (slot.live?.attempt !== a.attempt) return false;
    if (Date.now() <= slot.live.deadline) return true;
    this.#sweep();
    return false;
  }

  /**
   * Record a sibling's result. Resolves with a receipt once it is durable; submitting again for the
   * same attempt returns the same receipt (`duplicate`). A stale attempt is refused (`attempt_stale`).
   */
  async submit(a: AttemptRef, result: SiblingInput): Promise<Receipt> {
    const { group, slot } = this.#holder(a, 'submit');
    if (slot.done?.attempt === a.attempt) {
      await this.journal.writtenThrough(slot.done.ref[2]);
      return receiptOf(a, slot.done.ref[2], true);
    }
    if (!this.#holds(a, slot) || group.status !== 'open') throw staleError(a, group, slot);
    const status = checkResult(result);
    const samples = checkSamples(result.samples, 'submit');
    const versions = versionsOf(samples, result.versions, 'GroupQueue.submit');
    const { ref, written } = this.journal.append(
      {
        type: 'sibling',
        a: [a.group, a.slot, a.attempt],
        status,
        reward: result.reward,
        versions,
        ...(result.meta ? { meta: result.meta } : {}),
      },
      samples,
    );
    await written;
    return receiptOf(a, ref[2], false);
  }

  /** Save an attempt's progress so the next attempt of the sibling can continue from it. */
  async savePartial(a: AttemptRef, partial: PartialInput): Promise<void> {
    const { group, slot } = this.#holder(a, 'savePartial');
    if (!this.#holds(a, slot) || group.status !== 'open') throw staleError(a, group, slot);
    const samples = checkSamples(partial?.samples, 'savePartial');
    const versions = versionsOf(samples, partial.versions, 'GroupQueue.savePartial');
    const { written } = this.journal.append(
      {
        type: 'partial',
        a: [a.group, a.slot, a.attempt],
        versions,
        ...(partial.state !== undefined ? { state: partial.state } : {}),
      },
      samples,
    );
    await written;
  }

  /**
   * An attempt failed with an infra error (no reward: never a 0). The sibling gets a replacement while
   * attempts remain (`maxAttempts`), else the group is dropped (`infra_failed`).
   */
  async fail(
    a: AttemptRef,
    error: { code: string; message: string; phase?: string | undefined },
  ): Promise<FailOutcome> {
    const { group, slot } = this.#holder(a, 'fail');
    if (!this.#holds(a, slot) || group.status !== 'open') return { outcome: 'stale' };
    const failure = failureOf(error);
    const drop = slot.tries + 1 >= this.options.maxAttempts;
    const { written } = this.journal.append({
      type: 'fail',
      a: [a.group, a.slot, a.attempt],
      error: failure,
      ...(drop ? { drop: 'infra_failed' as const } : {}),
    });
    await written;
    return drop ? { outcome: 'drop', reason: 'infra_failed' } : { outcome: 'replace' };
  }

  /** Drop a group that is not handed off yet (reason `cancelled`). */
  async drop(group: number): Promise<void> {
    this.#check('drop');
    const g = this.journal.state.groups.get(group);
    if (!g || g.status === 'handed' || g.status === 'dropped') return;
    await this.journal.append({ type: 'drop', group, reason: 'cancelled' }).written;
  }

  /** The receipt of a sibling's accepted result, once durable (a worker whose reply was lost asks here). */
  receipt(group: number, slot: number): Receipt | undefined {
    const done = this.journal.state.groups.get(group)?.slots[slot]?.done;
    if (!done || done.ref[2] > this.journal.durable) return undefined;
    return receiptOf({ group, slot, attempt: done.attempt }, done.ref[2], true);
  }

  /** A sibling's accepted result, read back (samples and meta), once durable. */
  async result(group: number, slot: number): Promise<SiblingResult | undefined> {
    const receipt = this.receipt(group, slot);
    if (!receipt) return undefined;
    const done = this.journal.state.groups.get(group)!.slots[slot]!.done!;
    const record = await this.journal.read(done.ref);
    return {
      receipt,
      reward: done.reward,
      samples: record.samples,
      meta: (record.meta.meta ?? {}) as Record<string, unknown>,
    };
  }

  // Deadlines ------------------------------------------------------------------------------------

  /** Expire every attempt past its deadline (one event), then schedule the next check. */
  #sweep(): void {
    if (this.#closed) return;
    const { expired, drops } = deadlineExpiry(
      this.journal.state,
      this.#index.live.values(),
      Date.now(),
      this.options.maxAttempts,
    );
    if (expired.length > 0) {
      this.journal.append({ type: 'expire', attempts: expired, reason: 'deadline', drops });
      this.emit('expire', {
        attempts: expired.map(([group, slot, attempt]) => ({ group, slot, attempt })),
        reason: 'deadline',
      });
    }
    this.#schedule();
  }

  #schedule(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#closed) return;
    let next = Number.POSITIVE_INFINITY;
    for (const { deadline } of this.#index.live.values()) next = Math.min(next, deadline);
    if (!Number.isFinite(next)) return;
    this.#timer = setTimeout(() => this.#sweep(), Math.max(0, next - Date.now()) + 1);
    this.#timer.unref();
  }

  // Trainer side ---------------------------------------------------------------------------------

  /** The last step committed (0 before the first) and the weight version it published. */
  get trainerStep(): number {
    return this.journal.state.trainer.step;
  }

  /** The trainer's weight version as last recorded. */
  get trainerVersion(): number {
    return this.journal.state.trainer.version;
  }

  /** Checkpointed steps still retained. */
  get checkpoints(): number[] {
    return [...this.journal.state.checkpoints.keys()].sort((a, b) => a - b);
  }

  /**
   * The batch of `step` (the trainer's next step): `groups` complete groups, oldest weight version
   * first, groups over `maxStaleness` dropped and counted. A step taken before (a restart, a rollback)
   * returns exactly the batch it had. Waits until enough groups are complete.
   */
  take(step: number, options: { groups: number; signal?: AbortSignal | undefined }): Promise<TrainingBatch> {
    return this.#serialized(() => {
      this.#check('take');
      return takeBatch(this, step, options, this.#index.ready);
    });
  }

  /** Step `step` is trained; `version` (default: the step number) is the weight version it publishes. */
  commit(step: number, options: { version?: number | undefined } = {}): Promise<void> {
    return this.#serialized(async () => {
      this.#check('commit');
      const t = this.journal.state.trainer;
      if (Number.isInteger(step) && step <= t.step) return;
      if (step !== t.step + 1 || !this.journal.state.steps.has(step)) {
        throw new ConfigError(
          `GroupQueue.commit step: expected ${t.step + 1} (the step taken after the last commit, ${t.step}), found ${describeValue(step)}`,
        );
      }
      const version = options.version ?? step;
      if (!Number.isInteger(version) || version < 0) {
        throw new ConfigError(
          `GroupQueue.commit version: expected an integer ≥ 0, found ${describeValue(version)}`,
        );
      }
      await this.journal.append({ type: 'commit', step, version }).written;
      if (this.options.autoGc) await this.#collect();
    });
  }

  /** Record a consistent cut at the trainer's current step (with its weight version), to roll back or fork to. */
  checkpoint(): Promise<number> {
    return this.#serialized(async () => {
      this.#check('checkpoint');
      const step = this.journal.state.trainer.step;
      await this.journal.append({ type: 'checkpoint', step }).written;
      return step;
    });
  }

  /** Stop retaining a checkpoint; GC then frees what only it needed. */
  releaseCheckpoint(step: number): Promise<void> {
    return this.#serialized(async () => {
      this.#check('releaseCheckpoint');
      if (!this.journal.state.checkpoints.has(step)) return;
      await this.journal.append({ type: 'release', step }).written;
    });
  }

  /**
   * Roll the trainer back to a checkpointed step: its step and weight version return to the cut, and
   * the steps after it are replayed, batch by batch, exactly as they were. Repeatable.
   */
  rollback(step: number): Promise<void> {
    return this.#serialized(async () => {
      this.#check('rollback');
      if (!this.journal.state.checkpoints.has(step)) {
        throw new ConfigError(
          `GroupQueue.rollback step: ${describeValue(step)} has no checkpoint; checkpoints: ${this.checkpoints.join(', ') || 'none'}`,
        );
      }
      await this.journal.append({ type: 'rollback', to: step }).written;
    });
  }

  /** The exact batch a recorded step trained on (debug replay; nothing changes). */
  replay(step: number): Promise<TrainingBatch> {
    this.#check('replay');
    return buildBatch(this.journal, step, true);
  }

  /**
   * Start a branch in `dir` at `fromStep` (a checkpoint, or the trainer's current step). The branch
   * shares the data written before the cut (hard links), has the steps up to `fromStep` as its
   * history, and goes on on its own; GC in either keeps what it needs.
   */
  fork(dir: string, options: { fromStep: number }): Promise<void> {
    return this.#serialized(() => {
      this.#check('fork');
      return forkBranch(this.journal, this.dir, dir, options?.fromStep);
    });
  }

  /** Delete what no checkpoint and no replayable step needs (`commit` does it with `autoGc`). */
  gc(): Promise<GcReport> {
    return this.#serialized(() => this.#collect());
  }

  #collect(): Promise<GcReport> {
    this.#gc ??= collectGarbage(this.journal, this.options.retainSteps, (groups) =>
      this.#touch(groups),
    ).finally(() => {
      this.#gc = undefined;
    });
    return this.#gc.then((report) => {
      this.emit('gc', report);
      return report;
    });
  }

  /** Counts of groups and siblings by state. */
  get stats(): GroupQueueStats {
    const c = this.journal.state.counts;
    return {
      ...c,
      dropped: { ...c.dropped },
      open: this.#index.freshFree.size + this.#index.startedFree.size,
      ready: this.#index.ready.size,
      inFlight: this.#index.live.size,
    };
  }

  #serialized<T>(run: () => Promise<T>): Promise<T> {
    const next = this.#serial.then(run);
    this.#serial = next.catch(() => {});
    return next;
  }

  #check(what: string): void {
    if (this.#closed)
      throw new QueueError(`GroupQueue.${what}: the queue is closed`, { code: 'queue_closed' });
    this.journal.check();
  }

  /** Wait for queued writes, abort live attempts' signals, release the lock. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#index.wake();
    await this.#serial;
    this.#index.abortAll(new QueueError('the GroupQueue was closed', { code: 'queue_closed' }));
    await this.journal.close();
    await this.#release();
  }
}
