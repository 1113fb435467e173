import { describe, expect, it } from 'vitest';
import { ChangeWaiters } from './changes.js';

describe('ChangeWaiters', () => {
  it('wakes every waiter on a change, and forgets them', async () => {
    const changes = new ChangeWaiters();
    const woken = [changes.next(undefined, 60_000), changes.next(undefined, 60_000)];
    expect(changes.size).toBe(2);
    changes.wake();
    await Promise.all(woken);
    expect(changes.size).toBe(0);
  });

  it('resolves after the poll interval when nothing changes', async () => {
    const changes = new ChangeWaiters();
    const t0 = performance.now();
    await changes.next(undefined, 20);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(15);
    expect(changes.size).toBe(0);
  });

  it("rejects with the signal's reason as soon as it aborts, and leaves no waiter behind", async () => {
    const changes = new ChangeWaiters();
    const controller = new AbortController();
    const waiting = changes.next(controller.signal, 60_000);
    const reason = new Error('stop');
    controller.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    expect(changes.size).toBe(0);
    await expect(changes.next(controller.signal, 60_000)).rejects.toBe(reason);
    expect(changes.size).toBe(0);
  });
});
