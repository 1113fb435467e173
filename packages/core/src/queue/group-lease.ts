/**
 * The decisions of a `GroupQueue`'s rollout side, as pure functions of its state: which group a worker
 * leases next, which slots it gets and which partials it continues, which attempts a restart or a
 * deadline ends, and why an attempt is stale. The queue writes their outcome as events.
 */
import { QueueError } from './format.js';
import type { AttemptKey, DropReason } from './group-events.js';
import type { ResolvedOptions } from './group-input.js';
import {
  type GroupState,
  oldestVersion,
  type PartialSaved,
  type SlotState,
  type UnitState,
} from './group-state.js';
import type { AttemptRef, Receipt } from './group-types.js';

export const attemptId = (g: number, slot: number, attempt: number) => `${g}/${slot}/${attempt}`;

export const receiptOf = (a: AttemptRef, seq: number, duplicate: boolean): Receipt => ({
  id: attemptId(a.group, a.slot, a.attempt),
  group: a.group,
  slot: a.slot,
  attempt: a.attempt,
  seq,
  duplicate,
});

type Policy = Pick<ResolvedOptions, 'maxStaleness' | 'onStale' | 'groupsPerStep' | 'partials'>;

const tooStale = (state: UnitState, lo: number | null, o: Policy) =>
  o.onStale === 'drop' && lo !== null && state.trainer.version - lo > o.maxStaleness;

/**
 * The next group to lease: one already started (recorded siblings or partials, oldest version first;
 * those already too stale to hand off are returned in `stale`, to drop), else the oldest fresh one,
 * unless `onStale: 'wait'` holds fresh work back because what is started would reach the trainer too late.
 */
export function pickGroup(
  state: UnitState,
  startedFree: Iterable<number>,
  freshFree: Iterable<number>,
  o: Policy,
): { group: GroupState | undefined; stale: number[] } {
  const version = state.trainer.version;
  const started = [...startedFree].map((id) => state.groups.get(id)!);
  const order = (g: GroupState) => oldestVersion(g) ?? version;
  started.sort((a, b) => order(a) - order(b) || a.id - b.id);
  const stale: number[] = [];
  for (const group of started) {
    if (!tooStale(state, oldestVersion(group), o)) return { group, stale };
    stale.push(group.id);
  }
  const fresh = freshFree[Symbol.iterator]().next();
  if (fresh.done) return { group: undefined, stale };
  if (o.onStale === 'wait' && Number.isFinite(o.maxStaleness)) {
    const c = state.counts;
    const dropped = Object.values(c.dropped).reduce((a, b) => a + b, 0);
    const allowed = (state.trainer.step + o.maxStaleness + 1) * o.groupsPerStep!;
    if (c.started - dropped >= allowed) return { group: undefined, stale };
  }
  return { group: state.groups.get(fresh.value), stale };
}

/** The free slots of `group` a lease takes (at most `max`), the partials set aside, the ones continued. */
export function planLease(
  state: UnitState,
  group: GroupState,
  max: number,
  o: Policy,
): { attempts: AttemptKey[]; restart: number[]; continued: Map<number, PartialSaved> } {
  const free: number[] = [];
  group.slots.forEach((s, i) => {
    if (!s.live && !s.done && free.length < max) free.push(i);
  });
  const restart = free.filter((i) => {
    const p = group.slots[i]!.partial;
    return p !== undefined && (o.partials === 'restart' || tooStale(state, p.lo, o));
  });
  const continued = new Map<number, PartialSaved>();
  for (const i of free) {
    const p = group.slots[i]!.partial;
    if (p && !restart.includes(i)) continued.set(i, p);
  }
  return { attempts: free.map((i) => [group.id, i, group.slots[i]!.next]), restart, continued };
}

/** Attempts a restart of the owner ended, and the groups that lost one too many. */
export function restartExpiry(
  state: UnitState,
  maxLost: number,
): { lost: AttemptKey[]; drops: Array<[number, DropReason]> } {
  const lost: AttemptKey[] = [];
  const drops: Array<[number, DropReason]> = [];
  for (const group of state.groups.values()) {
    if (group.status !== 'open') continue;
    let drop = false;
    group.slots.forEach((slot, i) => {
      if (!slot.live) return;
      lost.push([group.id, i, slot.live.attempt]);
      if (slot.lost + 1 >= maxLost) drop = true;
    });
    if (drop) drops.push([group.id, 'restart']);
  }
  return { lost, drops };
}

/** Of `attempts`, those still live but past their deadline, and the groups whose sibling ran out of attempts. */
export function deadlineExpiry(
  state: UnitState,
  attempts: Iterable<{ ref: AttemptRef; deadline: number }>,
  now: number,
  maxAttempts: number,
): { expired: AttemptKey[]; drops: Array<[number, DropReason]> } {
  const expired: AttemptKey[] = [];
  const drops: Array<[number, DropReason]> = [];
  for (const { ref, deadline } of attempts) {
    if (deadline > now) continue;
    const group = state.groups.get(ref.group);
    const slot = group?.slots[ref.slot];
    if (group?.status !== 'open' || slot?.live?.attempt !== ref.attempt) continue;
    expired.push([ref.group, ref.slot, ref.attempt]);
    if (slot.tries + 1 >= maxAttempts && !drops.some(([g]) => g === ref.group))
      drops.push([ref.group, 'deadline']);
  }
  return { expired, drops };
}

/** Why attempt `a` can no longer commit (`attempt_stale`); `group` undefined: collected by GC. */
export function staleError(
  a: AttemptRef,
  group: GroupState | undefined,
  slot: SlotState | undefined,
): QueueError {
  const why = !group
    ? 'its group was handed off or dropped, and collected'
    : group.status === 'dropped'
      ? `its group was dropped (${group.reason})`
      : slot?.done
        ? `attempt ${slot.done.attempt} already delivered this sibling`
        : slot?.live
          ? `attempt ${slot.live.attempt} holds the slot now`
          : 'its lease ended (deadline or restart)';
  const receipt = slot?.done ? { receipt: attemptId(a.group, a.slot, slot.done.attempt) } : {};
  return new QueueError(
    `attempt ${attemptId(a.group, a.slot, a.attempt)} is stale: ${why}; its result is not recorded`,
    {
      code: 'attempt_stale',
      data: { group: a.group, slot: a.slot, attempt: a.attempt, ...receipt },
    },
  );
}
