/**
 * Warm pools over any provider: pre-created sandboxes handed out by `claim()`, an on-demand create when
 * none is ready (counted as a fallback), background refill, a bound on live sandboxes (creating + idle +
 * claimed: a semaphore around create→terminate, not around requests) and on the creation rate.
 */
import { ConfigError, SandboxError } from '@vime/core';
import { sleep } from '@vime/core/utils';
import { poolName } from './names.js';
import type { OpOptions, Sandbox, SandboxEmitter, SandboxProvider, SandboxSpec } from './types.js';

/** The label that names a sandbox's warm pool. */
export const POOL_LABEL = 'vime.pool';
/** Background creates failing in a row after which `ready()` gives up (the first may be a fluke). */
const READY_FAILURES = 3;

/** Options of `WarmPool`. */
export interface WarmPoolOptions {
  /** What every sandbox of the pool is created from. */
  spec: SandboxSpec;
  /** Sandboxes kept ready (default 0: every claim creates on demand). */
  size?: number | undefined;
  /** Most sandboxes alive at once, counting creating, idle and claimed ones (default max(2 × size, 4)). */
  maxLive?: number | undefined;
  /** Most creations started per second, warm refills and cold claims together (default unlimited). */
  createsPerSecond?: number | undefined;
  /**
   * Most background refills in flight at once (default 8), so a burst of on-demand creates is not
   * starved by a herd of refills.
   */
  refillConcurrency?: number | undefined;
  /** Pool name (default derived from the image); see `poolName`. */
  name?: string | undefined;
  /** Check `isAlive` before handing out a warm sandbox (default true). */
  checkAlive?: boolean | undefined;
  /** Emitter for `claim` and `warning` events (default: the provider's). */
  events?: SandboxEmitter | undefined;
  /**
   * Run on every new sandbox before it is handed out or kept warm (e.g. copy a repository template into the
   * work dir), so warm claims pay nothing for it. A failure terminates the sandbox and fails that create.
   */
  prepare?: ((sandbox: Sandbox, options: OpOptions) => Promise<void>) | undefined;
}

/** A warm pool's size, idle sandboxes and claims so far. */
export interface WarmPoolStats {
  name: string;
  size: number;
  maxLive: number;
  idle: number;
  creating: number;
  claimed: number;
  live: number;
  /** Claims served from the warm set. */
  warmHits: number;
  /** Claims that fell back to an on-demand create. */
  fallbacks: number;
  /** Warm sandboxes found dead at claim time and replaced. */
  deadOnClaim: number;
  /** Failed background refills. */
  refillFailures: number;
}

type Grant = { kind: 'idle'; sandbox: Sandbox } | { kind: 'slot' };

interface Waiter {
  grant: (g: Grant) => void;
  fail: (error: unknown) => void;
}

/** A token bucket; `take` waits for a token. */
class RateLimiter {
  private tokens: number;
  private last = performance.now();
  constructor(private readonly perSecond: number) {
    this.tokens = Math.max(1, perSecond);
  }
  async take(signal?: AbortSignal): Promise<void> {
    for (;;) {
      const now = performance.now();
      this.tokens = Math.min(
        Math.max(1, this.perSecond),
        this.tokens + ((now - this.last) / 1000) * this.perSecond,
      );
      this.last = now;
      if (this.tokens >= 1) {
        this.tokens -= 1;
        return;
      }
      const waitMs = ((1 - this.tokens) / this.perSecond) * 1000;
      await sleep(waitMs, signal);
    }
  }
}

/**
 * Sandboxes created ahead of time from one spec: a claim takes a warm one, or creates one when none is ready.
 */
export class WarmPool {
  readonly name: string;
  readonly events: SandboxEmitter;
  private readonly provider: SandboxProvider;
  private readonly spec: SandboxSpec;
  private readonly checkAlive: boolean;
  private readonly limiter: RateLimiter | undefined;
  private readonly refillConcurrency: number;
  private readonly prepare: WarmPoolOptions['prepare'];
  private size: number;
  private maxLive: number;
  private readonly idle: Sandbox[] = [];
  private readonly claimed = new Map<string, Sandbox>();
  /** Ids of everything this pool created and has not seen terminate. */
  private readonly owned = new Set<string>();
  private creating = 0;
  private creatingWarm = 0;
  private live = 0;
  private readonly waiters: Waiter[] = [];
  private closed = false;
  private refillBackoffMs = 0;
  /** Background creates failed since the last one that succeeded, and the latest cause. */
  private refillFailuresInARow = 0;
  private refillError: unknown;
  private refillTimer: NodeJS.Timeout | undefined;
  private readonly inflight = new Set<Promise<unknown>>();
  private readonly counters = { warmHits: 0, fallbacks: 0, deadOnClaim: 0, refillFailures: 0 };
  private readonly onTerminate: (e: { id: string }) => void;

  constructor(provider: SandboxProvider, options: WarmPoolOptions) {
    const size = options.size ?? 0;
    if (!Number.isInteger(size) || size < 0) {
      throw new ConfigError(`WarmPool size must be a whole number >= 0, got ${JSON.stringify(options.size)}`);
    }
    const maxLive = options.maxLive ?? Math.max(2 * size, 4);
    if (!Number.isInteger(maxLive) || maxLive < 1) {
      throw new ConfigError(
        `WarmPool maxLive must be a whole number >= 1, got ${JSON.stringify(options.maxLive)}`,
      );
    }
    if (size > maxLive) {
      throw new ConfigError(
        `WarmPool size ${size} exceeds maxLive ${maxLive}: a pool cannot keep more sandboxes warm than it may ` +
          'have alive; raise maxLive or lower size',
      );
    }
    if (options.createsPerSecond !== undefined && !(options.createsPerSecond > 0)) {
      throw new ConfigError(
        `WarmPool createsPerSecond must be > 0, got ${JSON.stringify(options.createsPerSecond)}`,
      );
    }
    this.provider = provider;
    this.name = options.name ?? poolName(options.spec.image ?? `${provider.name}-default`);
    this.spec = { ...options.spec, labels: { ...options.spec.labels, [POOL_LABEL]: this.name } };
    this.size = size;
    this.maxLive = maxLive;
    this.checkAlive = options.checkAlive ?? true;
    this.events = options.events ?? provider.events;
    this.limiter =
      options.createsPerSecond === undefined ? undefined : new RateLimiter(options.createsPerSecond);
    this.refillConcurrency = Math.max(1, options.refillConcurrency ?? 8);
    this.prepare = options.prepare;
    // However a sandbox ends (release, its own terminate, lifetime, signal), its slot comes back.
    this.onTerminate = (e) => this.forget(e.id);
    provider.events.on('terminate', this.onTerminate);
    this.fill();
  }

  /** The pool's size, idle sandboxes and claims so far. */
  stats(): WarmPoolStats {
    return {
      name: this.name,
      size: this.size,
      maxLive: this.maxLive,
      idle: this.idle.length,
      creating: this.creating,
      claimed: this.claimed.size,
      live: this.live,
      ...this.counters,
    };
  }

  /**
   * Resolves once `size` sandboxes are idle (or the signal aborts). Rejects, naming the pool and the
   * cause, once `READY_FAILURES` background creates in a row have failed: a provider or `prepare` that
   * cannot make a sandbox would otherwise keep it waiting forever (fewer failures are retried).
   */
  async ready(options: OpOptions = {}): Promise<void> {
    while (this.idle.length < this.size && !this.closed) {
      options.signal?.throwIfAborted();
      if (this.refillFailuresInARow >= READY_FAILURES) {
        const cause = this.refillError;
        throw new SandboxError(
          `pool ${this.name} cannot fill: creating a sandbox failed: ${cause instanceof Error ? cause.message : String(cause)}`,
          { code: SandboxError.isInstance(cause) ? cause.code : 'setup_failed', cause },
        );
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** A ready, alive sandbox: warm when one is idle, otherwise created on demand. */
  async claim(options: OpOptions = {}): Promise<Sandbox> {
    const started = performance.now();
    for (;;) {
      const grant = await this.acquire(options.signal);
      if (grant.kind === 'idle') {
        const sandbox = grant.sandbox;
        this.claimed.set(sandbox.id, sandbox);
        this.fill();
        if (this.checkAlive && !(await sandbox.isAlive(options).catch(() => false))) {
          this.counters.deadOnClaim++;
          void sandbox.terminate();
          continue;
        }
        this.counters.warmHits++;
        this.events.emit('claim', {
          id: sandbox.id,
          pool: this.name,
          warm: true,
          latencyMs: performance.now() - started,
        });
        return sandbox;
      }
      const sandbox = await this.createInSlot(options.signal);
      this.claimed.set(sandbox.id, sandbox);
      this.counters.fallbacks++;
      this.events.emit('claim', {
        id: sandbox.id,
        pool: this.name,
        warm: false,
        latencyMs: performance.now() - started,
      });
      return sandbox;
    }
  }

  /** Give a claimed sandbox back. Sandboxes are single-use: it is terminated and its slot refilled. */
  async release(sandbox: Sandbox): Promise<void> {
    await sandbox.terminate();
  }

  /** Change how many sandboxes are kept warm; extra idle ones are terminated. */
  async resize(size: number, maxLive?: number): Promise<void> {
    if (!Number.isInteger(size) || size < 0) {
      throw new ConfigError(`WarmPool.resize size must be a whole number >= 0, got ${JSON.stringify(size)}`);
    }
    if (size > (maxLive ?? this.maxLive)) {
      throw new ConfigError(
        `WarmPool.resize size ${size} exceeds maxLive ${maxLive ?? this.maxLive}; pass a larger maxLive`,
      );
    }
    this.size = size;
    if (maxLive !== undefined) this.maxLive = maxLive;
    const excess = this.idle.splice(size);
    await Promise.all(excess.map((s) => s.terminate()));
    this.pump();
    this.fill();
  }

  /** Stop keeping sandboxes warm and terminate the idle ones; claimed sandboxes and claims keep working. */
  async drain(): Promise<void> {
    this.size = 0;
    if (this.refillTimer) clearTimeout(this.refillTimer);
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
    await Promise.all(this.idle.splice(0).map((s) => s.terminate()));
  }

  /** Drain, fail waiting claims, and terminate every sandbox of the pool, claimed ones included. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.waiters.splice(0)) {
      w.fail(new SandboxError(`pool ${this.name} was closed`, { code: 'pool_closed' }));
    }
    await this.drain();
    await Promise.all([...this.claimed.values()].map((s) => s.terminate()));
    this.provider.events.off('terminate', this.onTerminate);
  }

  private acquire(signal?: AbortSignal): Promise<Grant> {
    if (this.closed)
      return Promise.reject(new SandboxError(`pool ${this.name} is closed`, { code: 'pool_closed' }));
    signal?.throwIfAborted();
    const idle = this.idle.shift();
    if (idle) return Promise.resolve({ kind: 'idle', sandbox: idle });
    if (this.live < this.maxLive) {
      this.live++;
      return Promise.resolve({ kind: 'slot' });
    }
    return new Promise<Grant>((resolve, reject) => {
      const onAbort = () => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(signal?.reason);
      };
      const waiter: Waiter = {
        grant: (g) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(g);
        },
        fail: (e) => {
          signal?.removeEventListener('abort', onAbort);
          reject(e);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** Hand idle sandboxes and free slots to waiting claims, oldest first. */
  private pump(): void {
    while (this.waiters.length > 0) {
      const idle = this.idle.shift();
      if (idle) {
        this.waiters.shift()!.grant({ kind: 'idle', sandbox: idle });
      } else if (this.live < this.maxLive) {
        this.live++;
        this.waiters.shift()!.grant({ kind: 'slot' });
      } else {
        return;
      }
    }
  }

  /** Create a sandbox in a slot already counted in `live`; gives the slot back on failure. */
  private async createInSlot(signal: AbortSignal | undefined, warm = false): Promise<Sandbox> {
    this.creating++;
    const task = (async () => {
      await this.limiter?.take(signal);
      const op = signal ? { signal } : {};
      const sandbox = await this.provider.create(this.spec, op);
      try {
        await this.prepare?.(sandbox, op);
      } catch (error) {
        await sandbox.terminate();
        throw error;
      }
      return sandbox;
    })();
    this.inflight.add(task);
    try {
      const sandbox = await task;
      this.owned.add(sandbox.id);
      return sandbox;
    } catch (error) {
      this.live--;
      this.pump();
      // A failed refill retries on its backoff timer instead.
      if (!warm) this.fill();
      throw error;
    } finally {
      this.creating--;
      this.inflight.delete(task);
    }
  }

  /** Start background creations until `size` sandboxes are idle or being made (claims waiting go first). */
  private fill(): void {
    while (
      !this.closed &&
      this.refillTimer === undefined &&
      this.waiters.length === 0 &&
      this.idle.length + this.creatingWarm < this.size &&
      this.creatingWarm < this.refillConcurrency &&
      this.live < this.maxLive
    ) {
      this.live++;
      this.creatingWarm++;
      void this.createInSlot(undefined, true).then(
        (sandbox) => {
          this.creatingWarm--;
          this.refillBackoffMs = 0;
          this.refillFailuresInARow = 0;
          if (this.closed || this.idle.length >= this.size) {
            void sandbox.terminate();
            return;
          }
          this.idle.push(sandbox);
          this.pump();
          this.fill();
        },
        (error) => {
          this.creatingWarm--;
          this.counters.refillFailures++;
          this.refillFailuresInARow++;
          this.refillError = error;
          this.events.emit('warning', {
            message: `pool ${this.name}: background create failed`,
            cause: error,
          });
          // Back off so a broken provider is not hammered; claims still create on demand meanwhile.
          if (this.refillTimer !== undefined || this.closed) return;
          this.refillBackoffMs = Math.min(30_000, Math.max(250, this.refillBackoffMs * 2));
          this.refillTimer = setTimeout(() => {
            this.refillTimer = undefined;
            this.fill();
          }, this.refillBackoffMs);
          this.refillTimer.unref();
        },
      );
    }
  }

  private forget(id: string): void {
    if (!this.owned.delete(id)) return;
    this.claimed.delete(id);
    const i = this.idle.findIndex((s) => s.id === id);
    if (i >= 0) this.idle.splice(i, 1);
    this.live--;
    this.pump();
    this.fill();
  }
}
