/**
 * Creation shaping of one fleet backend: a token bucket (as GCRA: at most `burst` creations back to back,
 * then one every `1 / perSecond` s), paused while the backend asked for a break (`Retry-After`).
 */
import { setTimeout as sleep } from 'node:timers/promises';

export class CreationLimiter {
  /** Milliseconds between creations at the steady rate (0: unlimited). */
  readonly #intervalMs: number;
  /** How far ahead of the steady rate a creation may go: `(burst - 1)` intervals. */
  readonly #toleranceMs: number;
  /** The theoretical arrival time of the next creation, `performance.now()` milliseconds. */
  #nextAt = Number.NEGATIVE_INFINITY;
  #pausedUntil = Number.NEGATIVE_INFINITY;

  constructor(perSecond: number | undefined, burst = 1) {
    this.#intervalMs = perSecond === undefined ? 0 : 1000 / perSecond;
    this.#toleranceMs = (burst - 1) * this.#intervalMs;
  }

  /** Milliseconds until a creation may go (0: now). */
  waitMs(now = performance.now()): number {
    return Math.max(0, this.#nextAt - this.#toleranceMs - now, this.#pausedUntil - now);
  }

  /**
   * Wait for a token, then run `start` in the same tick as the token is taken: what the backend sees is
   * shaped by this bucket, not by when a continuation happens to run.
   */
  async run<T>(start: () => T, signal?: AbortSignal): Promise<T> {
    for (;;) {
      signal?.throwIfAborted();
      const now = performance.now();
      const wait = this.waitMs(now);
      if (wait <= 0) {
        this.#nextAt = Math.max(this.#nextAt, now) + this.#intervalMs;
        return start();
      }
      // A timer may fire a fraction of a millisecond early: the loop checks again.
      await sleep(Math.max(1, Math.ceil(wait)), undefined, { signal });
    }
  }

  /** No creation for `ms` (a 429's `Retry-After`). */
  pause(ms: number): void {
    this.#pausedUntil = Math.max(this.#pausedUntil, performance.now() + ms);
  }
}

/** A counting semaphore whose waiters go first come, first served and leave when their signal aborts. */
export class Slots {
  #free: number;
  #held = 0;
  readonly #waiters: Array<() => void> = [];

  constructor(count: number) {
    this.#free = count;
  }

  /** Slots held now. */
  get held(): number {
    return this.#held;
  }

  async acquire(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.#free > 0 && this.#waiters.length === 0) {
      this.#free--;
      this.#held++;
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const grant = () => {
        signal?.removeEventListener('abort', onAbort);
        this.#held++;
        resolve();
      };
      const onAbort = () => {
        const i = this.#waiters.indexOf(grant);
        if (i >= 0) this.#waiters.splice(i, 1);
        reject(signal?.reason);
      };
      this.#waiters.push(grant);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  release(): void {
    this.#held--;
    const next = this.#waiters.shift();
    if (next) next();
    else this.#free++;
  }
}
