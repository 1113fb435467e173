/**
 * The state of a `GroupQueue`: a pure function of its journal. `applyEvent` folds one event into it;
 * nothing here does I/O or reads a clock, so a restarted owner, a fork and a read-only replay all
 * rebuild exactly the state the writer had. Decisions that depend on options are made by the writer
 * and arrive spelled out in the events (see `group-events.ts`).
 */
import { QueueError } from './format.js';
import type {
  AttemptKey,
  DataRef,
  DropReason,
  EventOf,
  EventType,
  SampleVersions,
  UnitEvent,
} from './group-events.js';

export interface LiveAttempt {
  attempt: number;
  lease: number;
  worker: string;
  /** Wall-clock ms (epoch) after which the attempt is stale. */
  deadline: number;
  at: number;
  /** The partial (by attempt) this attempt continues from. */
  from?: number | undefined;
}

export interface SiblingDone {
  attempt: number;
  ref: DataRef;
  status: 'completed' | 'truncated';
  reward: number;
  /** Oldest and newest weight version among its tokens (those of a partial it continued included). */
  lo: number | null;
  hi: number | null;
  at: number;
}

export interface PartialSaved {
  attempt: number;
  ref: DataRef;
  lo: number | null;
  hi: number | null;
  at: number;
}

export interface SlotState {
  /** The attempt number the next lease of this slot gets. */
  next: number;
  /** Attempts that failed or ran past their deadline. */
  tries: number;
  /** Attempts lost because the owner restarted. */
  lost: number;
  live?: LiveAttempt | undefined;
  done?: SiblingDone | undefined;
  partial?: PartialSaved | undefined;
}

export type GroupStatus = 'open' | 'complete' | 'handed' | 'dropped';

export interface GroupState {
  id: number;
  key?: string | undefined;
  n: number;
  payload: unknown;
  at: number;
  status: GroupStatus;
  slots: SlotState[];
  /** Whether any attempt was ever leased. */
  started: boolean;
  reason?: DropReason | undefined;
  /** When and at which seq the last sibling was recorded. */
  doneAt?: number | undefined;
  doneSeq?: number | undefined;
  step?: number | undefined;
}

export interface StepRecord {
  step: number;
  /** The trainer's weight version when it took the batch. */
  version: number;
  groups: number[];
  stale: Array<[number, number]>;
  at: number;
}

export interface CheckpointInfo {
  step: number;
  version: number;
  seq: number;
  at: number;
}

export interface UnitCounts {
  created: number;
  completed: number;
  handed: number;
  dropped: Record<DropReason, number>;
  /** Groups leased at least once. */
  started: number;
  attempts: number;
  /** Attempts that ended in an infra failure, past their deadline, or with the owner's restart. */
  failed: number;
  expired: number;
  lost: number;
  partials: number;
  /** Partials set aside instead of continued. */
  restarted: number;
}

export interface UnitState {
  seq: number;
  session: number;
  nextGroup: number;
  nextLease: number;
  groups: Map<number, GroupState>;
  keys: Map<string, number>;
  steps: Map<number, StepRecord>;
  trainer: { step: number; version: number };
  checkpoints: Map<number, CheckpointInfo>;
  counts: UnitCounts;
  branch?: { parent: string; fromStep: number; at: number } | undefined;
  /** Groups and steps pruned by GC (handed long ago, or dropped). */
  collected: { groups: number; steps: number };
}

export function emptyState(): UnitState {
  return {
    seq: 0,
    session: 0,
    nextGroup: 0,
    nextLease: 0,
    groups: new Map(),
    keys: new Map(),
    steps: new Map(),
    trainer: { step: 0, version: 0 },
    checkpoints: new Map(),
    counts: {
      created: 0,
      completed: 0,
      handed: 0,
      dropped: { infra_failed: 0, deadline: 0, restart: 0, stale: 0, cancelled: 0 },
      started: 0,
      attempts: 0,
      failed: 0,
      expired: 0,
      lost: 0,
      partials: 0,
      restarted: 0,
    },
    collected: { groups: 0, steps: 0 },
  };
}

/** Oldest and newest version over the samples' versions (null when no sample has any). */
export function versionRange(versions: ReadonlyArray<SampleVersions>): [number | null, number | null] {
  let lo: number | null = null;
  let hi: number | null = null;
  for (const v of versions) {
    for (const x of v.versions) {
      if (lo === null || x < lo) lo = x;
      if (hi === null || x > hi) hi = x;
    }
  }
  return [lo, hi];
}

const min = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.min(a, b));
const max = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.max(a, b));

/** Oldest weight version among a group's recorded tokens (results and partials). */
export function oldestVersion(group: GroupState): number | null {
  let lo: number | null = null;
  for (const s of group.slots) lo = min(lo, min(s.done?.lo ?? null, s.partial?.lo ?? null));
  return lo;
}

const bad = (why: string, seq: number) =>
  new QueueError(`journal record ${seq}: ${why}`, { code: 'queue_corrupt', data: { seq } });

function slotOf(state: UnitState, [g, slot]: AttemptKey, seq: number): [GroupState, SlotState] {
  const group = state.groups.get(g);
  const s = group?.slots[slot];
  if (!group || !s) throw bad(`no slot ${slot} of group ${g}`, seq);
  return [group, s];
}

/** The slot if `key` is its live attempt, else undefined (a stale attempt changes nothing). */
function liveSlot(state: UnitState, key: AttemptKey, seq: number): [GroupState, SlotState] | undefined {
  // A group GC already collected (handed long ago, or dropped) has no live attempt.
  if (!state.groups.has(key[0]) && key[0] < state.nextGroup) return undefined;
  const [group, s] = slotOf(state, key, seq);
  return s.live?.attempt === key[2] && group.status === 'open' ? [group, s] : undefined;
}

export function dropGroup(state: UnitState, group: GroupState, reason: DropReason): void {
  if (group.status === 'dropped' || group.status === 'handed') return;
  group.status = 'dropped';
  group.reason = reason;
  for (const s of group.slots) s.live = undefined;
  state.counts.dropped[reason]++;
}

/** Where an event was read: its record's seq, the time it was written, where it is stored. */
interface Origin {
  seq: number;
  time: number;
  ref: DataRef;
}

/** How one type of event changes the state; returns the groups it touched. */
type Fold<T extends EventType> = (state: UnitState, event: EventOf<T>, at: Origin) => number[];

function foldCreate(state: UnitState, event: EventOf<'create'>, { seq, time }: Origin): number[] {
  if (state.groups.has(event.group)) throw bad(`group ${event.group} created twice`, seq);
  const slots: SlotState[] = Array.from({ length: event.n }, () => ({ next: 0, tries: 0, lost: 0 }));
  state.groups.set(event.group, {
    id: event.group,
    key: event.key,
    n: event.n,
    payload: event.payload,
    at: time,
    status: 'open',
    slots,
    started: false,
  });
  if (event.key !== undefined) state.keys.set(event.key, event.group);
  state.nextGroup = Math.max(state.nextGroup, event.group + 1);
  state.counts.created++;
  return [event.group];
}

function foldLease(state: UnitState, event: EventOf<'lease'>, { seq, time }: Origin): number[] {
  const c = state.counts;
  state.nextLease = Math.max(state.nextLease, event.lease + 1);
  const touched = new Set<number>();
  for (const key of event.attempts) {
    const [group, s] = slotOf(state, key, seq);
    if (event.restart?.includes(key[1]) && s.partial) {
      s.partial = undefined;
      c.restarted++;
    }
    s.live = {
      attempt: key[2],
      lease: event.lease,
      worker: event.worker,
      deadline: event.deadline,
      at: time,
      from: s.partial?.attempt,
    };
    s.next = key[2] + 1;
    if (!group.started) c.started++;
    group.started = true;
    c.attempts++;
    touched.add(group.id);
  }
  return [...touched];
}

function foldPartial(state: UnitState, event: EventOf<'partial'>, { seq, time, ref }: Origin): number[] {
  const found = liveSlot(state, event.a, seq);
  if (!found) return [];
  const [lo, hi] = versionRange(event.versions);
  found[1].partial = { attempt: event.a[2], ref, lo, hi, at: time };
  state.counts.partials++;
  return [found[0].id];
}

function foldSibling(state: UnitState, event: EventOf<'sibling'>, { seq, time, ref }: Origin): number[] {
  const found = liveSlot(state, event.a, seq);
  if (!found) return [];
  const [group, s] = found;
  let [lo, hi] = versionRange(event.versions);
  // a continuation's tokens include those of the partial it continued
  if (s.live?.from !== undefined && s.partial?.attempt === s.live.from) {
    lo = min(lo, s.partial.lo);
    hi = max(hi, s.partial.hi);
  }
  s.done = { attempt: event.a[2], ref, status: event.status, reward: event.reward, lo, hi, at: time };
  s.live = undefined;
  s.partial = undefined;
  if (group.slots.every((x) => x.done)) {
    group.status = 'complete';
    group.doneAt = time;
    group.doneSeq = seq;
    state.counts.completed++;
  }
  return [group.id];
}

function foldFail(state: UnitState, event: EventOf<'fail'>, { seq }: Origin): number[] {
  const found = liveSlot(state, event.a, seq);
  if (!found) return [];
  const [group, s] = found;
  s.live = undefined;
  s.tries++;
  state.counts.failed++;
  if (event.drop) dropGroup(state, group, event.drop);
  return [group.id];
}

function foldExpire(state: UnitState, event: EventOf<'expire'>, { seq }: Origin): number[] {
  const c = state.counts;
  const touched = new Set<number>();
  for (const key of event.attempts) {
    const found = liveSlot(state, key, seq);
    if (!found) continue;
    const [group, s] = found;
    s.live = undefined;
    if (event.reason === 'deadline') {
      s.tries++;
      c.expired++;
      c.failed++;
    } else {
      s.lost++;
      c.lost++;
    }
    touched.add(group.id);
  }
  for (const [g, reason] of event.drops) {
    const group = state.groups.get(g);
    if (group) dropGroup(state, group, reason);
    touched.add(g);
  }
  return [...touched];
}

function foldDrop(state: UnitState, event: EventOf<'drop'>, { seq }: Origin): number[] {
  const group = state.groups.get(event.group);
  if (group) dropGroup(state, group, event.reason);
  else if (event.group >= state.nextGroup) throw bad(`no group ${event.group} to drop`, seq);
  return [event.group];
}

function foldTake(state: UnitState, event: EventOf<'take'>, { seq, time }: Origin): number[] {
  state.steps.set(event.step, {
    step: event.step,
    version: event.version,
    groups: event.groups,
    stale: event.stale,
    at: time,
  });
  for (const g of event.groups) {
    const group = state.groups.get(g);
    if (group?.status !== 'complete')
      throw bad(`step ${event.step} takes group ${g}, which is not complete`, seq);
    group.status = 'handed';
    group.step = event.step;
    state.counts.handed++;
  }
  for (const [g] of event.stale) {
    const group = state.groups.get(g);
    if (group) dropGroup(state, group, 'stale');
  }
  return [...event.groups, ...event.stale.map(([g]) => g)];
}

function foldRollback(state: UnitState, event: EventOf<'rollback'>, { seq }: Origin): number[] {
  const to = state.checkpoints.get(event.to);
  if (!to) throw bad(`rollback to step ${event.to}, which has no checkpoint`, seq);
  state.trainer = { step: to.step, version: to.version };
  return [];
}

const FOLDS: { [T in EventType]: Fold<T> } = {
  open: (state, event) => {
    state.session = event.session;
    return [];
  },
  create: foldCreate,
  lease: foldLease,
  partial: foldPartial,
  sibling: foldSibling,
  fail: foldFail,
  expire: foldExpire,
  drop: foldDrop,
  take: foldTake,
  commit: (state, event) => {
    state.trainer = { step: event.step, version: event.version };
    return [];
  },
  checkpoint: (state, event, { seq, time }) => {
    state.checkpoints.set(event.step, { step: event.step, version: state.trainer.version, seq, at: time });
    return [];
  },
  release: (state, event) => {
    state.checkpoints.delete(event.step);
    return [];
  },
  rollback: foldRollback,
};

/**
 * Fold one event (read from record `seq`, written at `time`, stored at `ref`) into the state. Returns
 * the groups it touched, for the caller's indexes.
 */
export function applyEvent(
  state: UnitState,
  event: UnitEvent,
  seq: number,
  time: number,
  ref: DataRef,
): number[] {
  state.seq = seq;
  const fold = FOLDS[event.type] as Fold<EventType>;
  return fold(state, event as EventOf<EventType>, { seq, time, ref });
}

/**
 * The last step whose batch nothing can ask for again: before every retained checkpoint (a rollback
 * replays what follows it) and the trainer's step, less `retainSteps` kept for debug replay.
 */
export function horizonOf(state: UnitState, retainSteps: number): number {
  let h = state.trainer.step;
  for (const step of state.checkpoints.keys()) h = Math.min(h, step);
  return h - retainSteps;
}

/** Whether a group's data is no longer needed by this state. */
export function collectable(group: GroupState, horizon: number): boolean {
  return group.status === 'dropped' || (group.status === 'handed' && group.step! <= horizon);
}

/** Every record this state still reads: results and partials of groups not yet collectable. */
export function refsOf(state: UnitState, horizon: number): DataRef[] {
  const refs: DataRef[] = [];
  for (const group of state.groups.values()) {
    if (collectable(group, horizon)) continue;
    for (const s of group.slots) {
      if (s.done) refs.push(s.done.ref);
      if (s.partial) refs.push(s.partial.ref);
    }
  }
  return refs;
}

/**
 * Forget the groups and steps nothing can ask for again (see `horizonOf`); returns the groups pruned.
 * Not an event: pruning is idempotent, and the state snapshot written after it makes it durable.
 */
export function pruneState(state: UnitState, horizon: number): number[] {
  const pruned: number[] = [];
  for (const group of state.groups.values()) {
    if (!collectable(group, horizon)) continue;
    // Its key stays: creating the group again must still find it (and not run it twice).
    state.groups.delete(group.id);
    pruned.push(group.id);
  }
  for (const step of state.steps.keys()) {
    if (step > horizon) continue;
    state.steps.delete(step);
    state.collected.steps++;
  }
  state.collected.groups += pruned.length;
  return pruned;
}

/**
 * The state a branch forked at `step` starts from: steps after it are not in its history, so their
 * groups are complete again (the branch hands them off in its own steps), and so are checkpoints.
 */
export function cutAt(state: UnitState, step: number): void {
  for (const [s, record] of state.steps) {
    if (s <= step) continue;
    for (const g of record.groups) {
      const group = state.groups.get(g);
      if (group?.status === 'handed') {
        group.status = 'complete';
        group.step = undefined;
        state.counts.handed--;
      }
    }
    for (const [g] of record.stale) {
      const group = state.groups.get(g);
      if (group?.reason === 'stale') {
        group.status = 'complete';
        group.reason = undefined;
        state.counts.dropped.stale--;
      }
    }
    state.steps.delete(s);
  }
  for (const s of [...state.checkpoints.keys()]) if (s > step) state.checkpoints.delete(s);
}

export type { EventOf };
