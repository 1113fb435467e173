/**
 * Waiting for a queue's state to change. A waiter wakes on the next `wake()`, or after a poll interval
 * (a change made by another process, or a deadline passing, is seen by looking again), and stops at
 * once when its signal aborts, leaving no timer or listener behind.
 */
export class ChangeWaiters {
  readonly #waiters = new Set<() => void>();

  /** Wake every waiter (something changed). */
  wake(): void {
    for (const wake of this.#waiters) wake();
  }

  /** Resolves on the next `wake()` or after `ms`; rejects with the signal's reason when it aborts. */
  next(signal: AbortSignal | undefined, ms: number): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<void>((resolve, reject) => {
      const settle = () => {
        clearTimeout(timer);
        this.#waiters.delete(done);
        signal?.removeEventListener('abort', onAbort);
      };
      const done = () => {
        settle();
        resolve();
      };
      const onAbort = () => {
        settle();
        reject(signal?.reason);
      };
      const timer = setTimeout(done, ms);
      this.#waiters.add(done);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Waiters now (each wait removes itself when it ends). */
  get size(): number {
    return this.#waiters.size;
  }
}
