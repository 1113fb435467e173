/** One fleet backend: what a user configures, and the fleet's bookkeeping of its load and health. */
import { ConfigError } from '@vime/core';
import type { ReapOptions, ReapReport } from '../reap.js';
import type { SandboxProvider } from '../types.js';
import { CreationLimiter } from './limiter.js';

/** A backend of a fleet: any provider, with its capacity and creation rate. */
export interface FleetBackend {
  /** Its name in labels (`vime.backend`), events, stats and errors; unique in the fleet. */
  name: string;
  provider: SandboxProvider;
  /** Most sandboxes alive or being created on it at once. */
  capacity: number;
  /** Creates per second it is sent at most (token bucket; default: no limit). */
  createsPerSecond?: number | undefined;
  /** Creates it may be sent back to back before the rate applies (default 1). */
  burst?: number | undefined;
  /**
   * Whether it answers at all (e.g. the engine's `GET /_ping`). The fleet pings backends with live
   * sandboxes, and asks it when a sandbox's operation fails; without one only a `sandbox_unavailable`
   * error counts as the backend being lost.
   */
  ping?: ((signal: AbortSignal) => Promise<void>) | undefined;
  /** Removes what a run left on it (`fleet.reapOrphans` calls each backend's). */
  reap?: ((options: ReapOptions) => Promise<ReapReport>) | undefined;
  /** Closes its client (`fleet.close()`). */
  close?: (() => Promise<void>) | undefined;
}

/** A backend's state as `fleet.stats()` reports it. */
export interface FleetBackendStats {
  name: string;
  capacity: number;
  /** Sandboxes created on it and not terminated. */
  live: number;
  /** Creates placed on it and in flight (waiting for its token, or being created). */
  starting: number;
  /** Whether it takes creates now (not drained, not lost). */
  healthy: boolean;
  /** It stopped answering; its sandboxes' operations fail as `sandbox_backend_lost`. */
  lost: boolean;
  created: number;
  failed: number;
  /** 429 answers it gave. */
  rateLimited: number;
}

export class BackendState {
  readonly spec: FleetBackend;
  readonly limiter: CreationLimiter;
  live = 0;
  reserved = 0;
  /** Consecutive failed creates. */
  failures = 0;
  /** While drained: when (performance.now()) one create may try it again. */
  drainedUntil: number | undefined;
  /** A drained backend's one trial create is in flight. */
  probing = false;
  /** Aborted when the backend is found lost; replaced when it creates again. */
  lost = new AbortController();
  #created = 0;
  #failed = 0;
  #rateLimited = 0;

  constructor(spec: FleetBackend) {
    this.spec = spec;
    this.limiter = new CreationLimiter(spec.createsPerSecond, spec.burst ?? 1);
  }

  /** Live and reserved sandboxes over capacity. */
  load(): number {
    return (this.live + this.reserved) / this.spec.capacity;
  }

  eligible(now: number): boolean {
    if (this.live + this.reserved >= this.spec.capacity) return false;
    return this.drainedUntil === undefined || (now >= this.drainedUntil && !this.probing);
  }

  reserve(now: number): void {
    this.reserved++;
    if (this.drainedUntil !== undefined && now >= this.drainedUntil) this.probing = true;
  }

  succeeded(): void {
    this.reserved--;
    this.live++;
    this.#created++;
    this.failures = 0;
    this.drainedUntil = undefined;
    this.probing = false;
    if (this.lost.signal.aborted) this.lost = new AbortController();
  }

  /** Counts a failed create; true when it drains the backend (now, or again after a failed trial). */
  failed(drainAfter: number, retryMs: number): boolean {
    this.#failed++;
    this.failures++;
    if (this.failures < drainAfter && this.drainedUntil === undefined) return false;
    this.drainedUntil = performance.now() + retryMs;
    return true;
  }

  rateLimited(retryAfterMs: number | undefined): void {
    this.#rateLimited++;
    // At least 50 ms: a "retry after 0" must not turn into a busy loop of refused creates.
    this.limiter.pause(Math.max(retryAfterMs ?? 1000, 50));
  }

  markLost(retryMs: number): void {
    this.drainedUntil = performance.now() + retryMs;
  }

  stats(): FleetBackendStats {
    return {
      name: this.spec.name,
      capacity: this.spec.capacity,
      live: this.live,
      starting: this.reserved,
      healthy: this.drainedUntil === undefined,
      lost: this.lost.signal.aborted,
      created: this.#created,
      failed: this.#failed,
      rateLimited: this.#rateLimited,
    };
  }
}

/** Bad backends are a `ConfigError` naming the backend, the field, the value and the fix. */
export function validateBackends(backends: readonly FleetBackend[] | undefined): void {
  if (!Array.isArray(backends) || backends.length === 0) {
    throw new ConfigError(
      'fleetProvider backends must name at least one backend: { name, provider, capacity }',
    );
  }
  const names = new Set<string>();
  for (const [i, b] of backends.entries()) {
    const where = `fleetProvider backends[${i}]`;
    if (typeof b?.name !== 'string' || b.name === '' || names.has(b.name)) {
      throw new ConfigError(
        `${where}.name must be a unique non-empty string, got ${JSON.stringify(b?.name)}`,
      );
    }
    names.add(b.name);
    if (typeof b.provider?.create !== 'function') {
      throw new ConfigError(
        `${where}.provider (${b.name}) must be a SandboxProvider, e.g. dockerProvider({ host, tls })`,
      );
    }
    if (!Number.isInteger(b.capacity) || b.capacity < 1) {
      throw new ConfigError(
        `${where}.capacity (${b.name}) must be a whole number >= 1, got ${JSON.stringify(b.capacity)}`,
      );
    }
    const rate = b.createsPerSecond;
    if (rate !== undefined && !(typeof rate === 'number' && Number.isFinite(rate) && rate > 0)) {
      throw new ConfigError(
        `${where}.createsPerSecond (${b.name}) must be a number > 0, got ${JSON.stringify(rate)}; leave it out for no limit`,
      );
    }
    if (b.burst !== undefined && !(Number.isInteger(b.burst) && b.burst >= 1)) {
      throw new ConfigError(
        `${where}.burst (${b.name}) must be a whole number >= 1, got ${JSON.stringify(b.burst)}`,
      );
    }
  }
}
