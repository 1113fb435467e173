/**
 * A `GroupQueue`'s in-memory indexes over its state: open groups with a free slot (fresh or started),
 * complete groups, the attempts leased in this process (with the signals that tell their workers when
 * they can no longer commit), and the waiters for the next change.
 */
import { ChangeWaiters } from './changes.js';
import { QueueError } from './format.js';
import { attemptId } from './group-lease.js';
import type { GroupState, UnitState } from './group-state.js';
import type { AttemptRef } from './group-types.js';

export interface LeasedAttempt {
  ref: AttemptRef;
  deadline: number;
  controller: AbortController;
}

export class GroupIndex {
  readonly freshFree = new Set<number>();
  readonly startedFree = new Set<number>();
  readonly ready = new Set<number>();
  readonly live = new Map<string, LeasedAttempt>();
  readonly #changes = new ChangeWaiters();
  /** Last status seen per group not yet handed off (to report each change once). */
  readonly #status = new Map<number, GroupState['status']>();

  /** Re-index `groups` after an event; returns those that became complete or dropped. */
  touch(state: UnitState, groups: Iterable<number>): GroupState[] {
    const changed: GroupState[] = [];
    for (const id of groups) {
      const group = state.groups.get(id);
      const before = this.#status.get(id);
      this.freshFree.delete(id);
      this.startedFree.delete(id);
      this.ready.delete(id);
      if (group?.status === 'open' && group.slots.some((s) => !s.live && !s.done)) {
        (group.started ? this.startedFree : this.freshFree).add(id);
      } else if (group?.status === 'complete') this.ready.add(id);
      group?.slots.forEach((s, slot) => {
        for (let a = 0; a < s.next; a++) {
          const key = attemptId(id, slot, a);
          const live = this.live.get(key);
          if (!live || s.live?.attempt === a) continue;
          this.live.delete(key);
          // A delivered attempt is done, not stale: nothing to abort (and no error to build per sibling).
          if (s.done?.attempt !== a)
            live.controller.abort(new QueueError(`attempt ${key} ended`, { code: 'attempt_stale' }));
        }
      });
      if (!group || group.status === 'handed') this.#status.delete(id);
      else this.#status.set(id, group.status);
      if (group && before !== undefined && group.status !== before) changed.push(group);
    }
    this.wake();
    return changed;
  }

  wake(): void {
    this.#changes.wake();
  }

  /** Resolves on the next change (or after `ms`, to recheck deadlines), rejects on abort. */
  changed(signal: AbortSignal | undefined, ms = 1000): Promise<void> {
    return this.#changes.next(signal, ms);
  }

  /** Abort every attempt leased here (the queue closes). */
  abortAll(reason: QueueError): void {
    for (const { controller } of this.live.values()) controller.abort(reason);
    this.live.clear();
    this.wake();
  }
}
