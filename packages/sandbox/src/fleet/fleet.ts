/**
 * `fleetProvider`: one `SandboxProvider` that places sandboxes over several backends (each any provider:
 * remote Docker engines, local ones), with a capacity per backend, a creation-rate limit per backend that
 * also honours a backend's `429 Retry-After`, a cap on sandboxes being created at once, and health: a
 * backend whose creates fail is drained and tried again later, and one that stops answering fails its
 * sandboxes' operations as `sandbox_backend_lost` (an infrastructure failure of their rollouts).
 */
import { ConfigError, SandboxError } from '@vime/core';
import { EventEmitter } from 'eventemitter3';
import { BACKEND_LOST, SandboxRateLimited } from '../errors.js';
import { defaultRunId, RUN_LABEL } from '../lifecycle.js';
import { checkLifetime } from '../limits.js';
import type { ReapOptions, ReapReport } from '../reap.js';
import type {
  OpOptions,
  Sandbox,
  SandboxEmitter,
  SandboxEvents,
  SandboxProvider,
  SandboxSpec,
} from '../types.js';
import { BackendState, type FleetBackend, type FleetBackendStats, validateBackends } from './backend.js';
import { Slots } from './limiter.js';
import { FleetSandbox } from './sandbox.js';

export type { FleetBackend, FleetBackendStats } from './backend.js';

/** Label naming the fleet backend a sandbox runs on. */
export const BACKEND_LABEL = 'vime.backend';

/** Options of `fleetProvider`. */
export interface FleetOptions {
  backends: readonly FleetBackend[];
  /**
   * Lifetime of every sandbox whose spec names none, in ms, kept by the backend where it can (Docker: the
   * engine removes the container then, even when this process is gone). Make it longer than the rollout
   * guard plus grading, so that only a sandbox nobody ended reaches it.
   */
  lifetimeMs: number;
  /** The `vime.run` label of every sandbox whose spec names none (default: this process's run id). */
  run?: string | undefined;
  /** Sandboxes being created at once across the fleet, waiting for a backend's token included (default 8). */
  maxStarting?: number | undefined;
  /** Consecutive failed creates that drain a backend (default 2). */
  drainAfter?: number | undefined;
  /** How long a drained backend rests before one create tries it again (default 30 s). */
  retryDrainedMs?: number | undefined;
  /** Backends one create tries before it fails (default 3). A 429 does not count as a try. */
  createAttempts?: number | undefined;
  /** How often backends with live sandboxes are pinged, ms (default 5 s; those with a `ping`). */
  pingIntervalMs?: number | undefined;
  /** How long a ping may take before its backend counts as lost, ms (default 10 s: a busy engine is slow, not lost). */
  pingTimeoutMs?: number | undefined;
  events?: SandboxEmitter | undefined;
}

/** A provider over several backends. */
export interface FleetProvider extends SandboxProvider {
  /** Each backend's capacity, load and health. */
  stats(): FleetBackendStats[];
  /** `reapOrphans` on every backend (a run or an age is required), one report; a backend without `reap` is an error in it. */
  reapOrphans(selector: string | number | ReapOptions): Promise<ReapReport>;
  /** Stops the pings and closes the backends' clients (live sandboxes are the caller's to terminate first). */
  close(): Promise<void>;
}

const EVENT_NAMES: Array<keyof SandboxEvents> = [
  'create',
  'claim',
  'exec',
  'terminate',
  'leak-reaped',
  'warning',
];

function positiveInt(value: number | undefined, fallback: number, field: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1) {
    throw new ConfigError(`fleetProvider ${field} must be a whole number >= 1, got ${JSON.stringify(value)}`);
  }
  return value;
}

/** One provider over several backends; see the package README's "Fleet" section. */
export function fleetProvider(options: FleetOptions): FleetProvider {
  validateBackends(options.backends);
  checkLifetime(options.lifetimeMs, 'fleetProvider lifetimeMs');
  if (options.lifetimeMs === undefined) {
    throw new ConfigError(
      'fleetProvider lifetimeMs is required: longer than the rollout guard plus grading, e.g. lifetimeMs: 2 * 3600_000',
    );
  }
  return new Fleet(options);
}

class Fleet implements FleetProvider {
  readonly name = 'fleet';
  readonly events: SandboxEmitter;
  readonly #backends: BackendState[];
  readonly #starting: Slots;
  readonly #run: string;
  readonly #lifetimeMs: number;
  readonly #drainAfter: number;
  readonly #retryDrainedMs: number;
  readonly #attempts: number;
  readonly #pinger: NodeJS.Timeout;
  readonly #pingTimeoutMs: number;
  #pinging = false;
  #waiters: Array<() => void> = [];

  constructor(options: FleetOptions) {
    this.events = options.events ?? (new EventEmitter() as SandboxEmitter);
    this.#backends = options.backends.map((b) => new BackendState(b));
    this.#starting = new Slots(positiveInt(options.maxStarting, 8, 'maxStarting'));
    this.#drainAfter = positiveInt(options.drainAfter, 2, 'drainAfter');
    this.#retryDrainedMs = positiveInt(options.retryDrainedMs, 30_000, 'retryDrainedMs');
    this.#attempts = positiveInt(options.createAttempts, 3, 'createAttempts');
    this.#run = options.run ?? defaultRunId();
    this.#lifetimeMs = options.lifetimeMs;
    for (const b of this.#backends) {
      if (b.spec.provider.events === this.events) continue;
      // Passed on as they come (untyped: each name's payload goes out under the same name).
      const from = b.spec.provider.events as unknown as EventEmitter;
      const to = this.events as unknown as EventEmitter;
      for (const name of EVENT_NAMES) from.on(name, (e: unknown) => to.emit(name, e));
    }
    const every = positiveInt(options.pingIntervalMs, 5_000, 'pingIntervalMs');
    this.#pingTimeoutMs = positiveInt(options.pingTimeoutMs, 10_000, 'pingTimeoutMs');
    this.#pinger = setInterval(() => void this.#pingAll(), every);
    this.#pinger.unref();
  }

  stats(): FleetBackendStats[] {
    return this.#backends.map((b) => b.stats());
  }

  async create(spec: SandboxSpec, options: OpOptions = {}): Promise<Sandbox> {
    const { signal } = options;
    const labels = { ...spec.labels, [RUN_LABEL]: spec.labels?.[RUN_LABEL] ?? this.#run };
    const placed: SandboxSpec = { ...spec, labels, lifetimeMs: spec.lifetimeMs ?? this.#lifetimeMs };
    await this.#starting.acquire(signal);
    try {
      const tried = new Set<BackendState>();
      const failures: string[] = [];
      let last: unknown;
      while (failures.length < this.#attempts) {
        const b = await this.#place(tried, signal);
        try {
          const inner = await b.limiter.run(
            () =>
              b.spec.provider.create(
                { ...placed, labels: { ...labels, [BACKEND_LABEL]: b.spec.name } },
                options,
              ),
            signal,
          );
          b.succeeded();
          return new FleetSandbox(inner, this.#hostFor(b));
        } catch (error) {
          b.reserved--;
          if (b.probing) b.probing = false;
          this.#notify();
          if (signal?.aborted || ConfigError.isInstance(error)) throw error;
          if (SandboxError.isInstance(error) && error.code === 'sandbox_shutting_down') throw error;
          if (SandboxRateLimited.isInstance(error)) {
            b.rateLimited(error.retryAfterMs);
            this.events.emit('warning', {
              message: `fleet backend ${b.spec.name} asked for a break of ${error.retryAfterMs ?? 1000} ms (429)`,
              code: 'rate_limited',
              cause: error,
              data: { backend: b.spec.name, retryAfterMs: error.retryAfterMs },
            });
            continue;
          }
          tried.add(b);
          last = error;
          failures.push(`${b.spec.name}: ${(error as Error)?.message ?? String(error)}`);
          if (b.failed(this.#drainAfter, this.#retryDrainedMs)) this.#drained(b, error, 'backend_drained');
        }
      }
      throw new SandboxError(
        `no fleet backend could create the sandbox (${failures.length} tries): ${failures.join('; ')}`,
        { code: 'sandbox_unavailable', cause: last, data: { tries: failures.length } },
      );
    } finally {
      this.#starting.release();
    }
  }

  /**
   * A backend with room for one more sandbox, reserved: first the one whose token comes soonest, then the
   * least loaded; a backend this create already failed on only when no other is eligible. Waits while none is.
   */
  async #place(tried: Set<BackendState>, signal: AbortSignal | undefined): Promise<BackendState> {
    for (;;) {
      signal?.throwIfAborted();
      const now = performance.now();
      const eligible = this.#backends.filter((b) => b.eligible(now));
      const fresh = eligible.filter((b) => !tried.has(b));
      const pick = (fresh.length > 0 ? fresh : eligible).sort(
        (x, y) => x.limiter.waitMs(now) - y.limiter.waitMs(now) || x.load() - y.load(),
      )[0];
      if (pick) {
        pick.reserve(now);
        return pick;
      }
      // Nothing eligible: wait for a slot to free or the first drained backend's retry time.
      const retryAt = Math.min(...this.#backends.map((b) => b.drainedUntil ?? Number.POSITIVE_INFINITY));
      await this.#changed(signal, Number.isFinite(retryAt) ? Math.max(1, retryAt - now) : undefined);
    }
  }

  #changed(signal: AbortSignal | undefined, timeoutMs: number | undefined): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.#waiters = this.#waiters.filter((w) => w !== done);
        resolve();
      };
      const onAbort = () => {
        done();
        reject(signal?.reason);
      };
      const timer = timeoutMs === undefined ? undefined : setTimeout(done, timeoutMs);
      this.#waiters.push(done);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  #notify(): void {
    for (const w of this.#waiters) w();
  }

  #drained(b: BackendState, cause: unknown, code: 'backend_drained' | 'backend_lost'): void {
    this.events.emit('warning', {
      message: `fleet backend ${b.spec.name} is ${code === 'backend_lost' ? 'lost' : 'drained'}; tried again in ${this.#retryDrainedMs} ms`,
      code,
      cause,
      data: { backend: b.spec.name },
    });
  }

  #hostFor(b: BackendState) {
    // The backend's life this sandbox belongs to: lost once, its sandboxes stay lost after it comes back.
    const lost = b.lost.signal;
    return {
      backend: b.spec.name,
      lostSignal: () => lost,
      classify: (_id: string, error: unknown) => (lost.aborted ? lost.reason : this.#classify(b, error)),
      check: async () => {
        if (!lost.aborted && b.spec.ping) {
          await this.#ping(b).catch((error: unknown) => this.#lose(b, error));
        }
        if (lost.aborted) throw lost.reason;
      },
      released: () => {
        b.live--;
        this.#notify();
      },
    };
  }

  /** An operation's failure: the backend-lost error when its backend does not answer, else the error itself. */
  async #classify(b: BackendState, error: unknown): Promise<unknown> {
    if (b.lost.signal.aborted) return b.lost.signal.reason;
    if (ConfigError.isInstance(error)) return error;
    const code = SandboxError.isInstance(error) ? error.code : undefined;
    if (code === 'sandbox_terminated' || code === 'not_found' || code === 'file_too_large') return error;
    // The engine could not be reached (refused, reset, TLS): lost. A ping is no counter-proof, since an
    // engine shutting down still answers on connections it has open. Any other failure: lost if no ping answers.
    const answers =
      code === 'sandbox_unavailable'
        ? false
        : b.spec.ping
          ? await this.#ping(b).then(
              () => true,
              () => false,
            )
          : true;
    if (answers) return error;
    this.#lose(b, error);
    return b.lost.signal.reason;
  }

  /** Mark a backend lost: drained, and its sandboxes' operations in flight aborted with the lost error. */
  #lose(b: BackendState, cause: unknown): void {
    if (b.lost.signal.aborted) return;
    b.markLost(this.#retryDrainedMs);
    b.lost.abort(
      new SandboxError(
        `fleet backend ${b.spec.name} stopped answering (${(cause as Error)?.message ?? String(cause)}): its sandboxes are lost, an infrastructure failure of their rollouts, not anything they did`,
        { code: BACKEND_LOST, cause, data: { backend: b.spec.name } },
      ),
    );
    this.#drained(b, cause, 'backend_lost');
  }

  /** One round of pings (none while the last is still out). */
  async #pingAll(): Promise<void> {
    if (this.#pinging) return;
    this.#pinging = true;
    try {
      await Promise.all(
        this.#backends
          .filter((b) => b.spec.ping && b.live > 0 && !b.lost.signal.aborted)
          .map((b) => this.#ping(b).catch((error) => this.#lose(b, error))),
      );
    } finally {
      this.#pinging = false;
    }
  }

  #ping(b: BackendState): Promise<void> {
    return b.spec.ping?.(AbortSignal.timeout(this.#pingTimeoutMs)) ?? Promise.resolve();
  }

  async reapOrphans(selector: string | number | ReapOptions): Promise<ReapReport> {
    const options: ReapOptions =
      typeof selector === 'string'
        ? { run: selector }
        : typeof selector === 'number'
          ? { olderThanMs: selector }
          : selector;
    const report: ReapReport = { removed: [], skippedLive: 0, errors: [] };
    for (const b of this.#backends) {
      if (!b.spec.reap) {
        report.errors.push({
          id: `fleet backend ${b.spec.name}`,
          error: new SandboxError(`fleet backend ${b.spec.name} has no reap: give it one to sweep it`),
        });
        continue;
      }
      const r = await b.spec.reap({ ...options, events: options.events ?? this.events });
      report.removed.push(...r.removed);
      report.skippedLive += r.skippedLive;
      report.errors.push(...r.errors);
    }
    return report;
  }

  async close(): Promise<void> {
    clearInterval(this.#pinger);
    await Promise.all(this.#backends.map((b) => b.spec.close?.()));
  }
}
