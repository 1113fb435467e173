import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { deadlineSignal } from './signals.js';

/** A full garbage collection on a later turn of the event loop (when nothing on the stack holds the signals). */
async function collect(): Promise<void> {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  await new Promise((r) => setImmediate(r));
  gc();
}

/** What the loop waited on before: lost after a collection on Node 20. */
const builtin = (ms: number, source: AbortSignal) => AbortSignal.any([source, AbortSignal.timeout(ms)]);

describe('deadlineSignal', () => {
  it('fires after its deadline although nothing else holds it, across a garbage collection', async () => {
    const fired = { ours: 0, builtin: 0 };
    const waits = 50;
    for (let i = 0; i < waits; i++) {
      const { signal } = deadlineSignal(50, new AbortController().signal);
      signal.addEventListener('abort', () => fired.ours++, { once: true });
      builtin(50, new AbortController().signal).addEventListener('abort', () => fired.builtin++, {
        once: true,
      });
    }
    await collect();
    await new Promise((r) => setTimeout(r, 200));
    expect(fired.ours).toBe(waits);
    // The reason this exists (on Node 20; a later Node that keeps them is fine too).
    if (process.versions.node.startsWith('20.')) expect(fired.builtin).toBeLessThan(waits);
  });

  it('aborts with the first source’s reason, at once when one is already aborted, never past a timer’s range, and not after clear()', async () => {
    const a = new AbortController();
    const { signal } = deadlineSignal(60_000, undefined, a.signal);
    a.abort(new Error('stop'));
    expect(signal.reason).toEqual(new Error('stop'));
    expect(deadlineSignal(60_000, AbortSignal.abort('gone')).signal.reason).toBe('gone');
    const timedOut = deadlineSignal(10);
    await new Promise((r) => setTimeout(r, 50));
    expect((timedOut.signal.reason as DOMException).name).toBe('TimeoutError');
    const never = deadlineSignal(Number.POSITIVE_INFINITY);
    await new Promise((r) => setTimeout(r, 20));
    expect(never.signal.aborted).toBe(false);
    never.clear();
    const quiet = deadlineSignal(10);
    quiet.clear();
    await new Promise((r) => setTimeout(r, 50));
    expect(quiet.signal.aborted).toBe(false);
  });
});
