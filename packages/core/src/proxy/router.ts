/**
 * The engine router inside the capture layer: sessions stick to their engine while it is healthy (its
 * prefix cache holds their history), new sessions go to the least-loaded healthy engine, each engine has
 * an in-flight cap, and engines are health-checked on an interval, at once when a request to them fails,
 * and whenever `checkNow` is called (the proxy calls it at every rollout completion). A dead engine stops
 * receiving turns; its sessions move to another engine on their next turn and are readmitted nowhere
 * else. A circuit breaker is open while no engine is healthy.
 */
import { EventEmitter } from 'eventemitter3';
import type { Engine, PauseMode, WeightUpdateRequest } from '../engine/types.js';
import { ConfigError, EngineError } from '../errors.js';
import { describeCause } from '../utils/http.js';
import type { Logger } from '../utils/logger.js';
import { WeightUpdateLog } from './weight-log.js';

/** Options of the engine router. */
export interface EngineRouterOptions {
  /** Most requests in flight on one engine; more wait for one of its slots (default 256). */
  maxInFlightPerEngine?: number | undefined;
  /** Background health checks every this many ms (default 30 s; checks also run on failures and `checkNow`). */
  healthIntervalMs?: number | undefined;
  /** One health check's timeout (default 5 s). */
  healthTimeoutMs?: number | undefined;
  /** Down engines are probed this often, for readmission (default 1 s). */
  recoveryProbeMs?: number | undefined;
  /** How long a turn waits for a healthy engine before it fails as an infrastructure failure (default 60 s). */
  unavailableDeadlineMs?: number | undefined;
  logger?: Logger | undefined;
}

/** One engine as the router sees it: health, requests in flight and sessions. */
export interface EngineStatus {
  url: string;
  kind: Engine['kind'];
  healthy: boolean;
  /** Sessions placed on this engine. */
  sessions: number;
  inFlight: number;
  /** Requests waiting for one of its slots. */
  waiting: number;
  /** Why it was last marked down. */
  lastError: string | undefined;
  /** The last weight version it reported. */
  weightVersion: string | undefined;
}

/** What started a health check. */
export type CheckTrigger = 'interval' | 'completion' | 'failure' | 'probe' | 'added' | 'manual';

/** The events of the engine router. */
export interface RouterEvents {
  /** An engine stopped taking requests (a failed check or request). */
  'engine:down': (event: { url: string; cause: string; trigger: CheckTrigger }) => void;
  /** An engine takes requests again, or for the first time. */
  'engine:up': (event: { url: string; readmitted: boolean; trigger: CheckTrigger }) => void;
  /** An engine joined the router. */
  'engine:added': (event: { url: string }) => void;
  /** An engine left the router. */
  'engine:removed': (event: { url: string }) => void;
  /** A session left its engine (down or removed) for another one. */
  'session:moved': (event: { sessionId: string; from: string; to: string }) => void;
  /** No engine is healthy: stop claiming sandboxes and starting rollouts. */
  'breaker:open': (event: { causes: Record<string, string> }) => void;
  /** An engine answered again after every engine was down. */
  'breaker:close': (event: { url: string; openMs: number }) => void;
}

/** A slot on one engine for one request; `release` frees it. */
export interface EngineLease {
  engine: Engine;
  /** Give the engine slot back. */
  release(): void;
}

interface Member {
  engine: Engine;
  owned: boolean;
  healthy: boolean;
  removed: boolean;
  sessions: number;
  inFlight: number;
  waiters: Array<() => void>;
  checking: Promise<boolean> | undefined;
  lastError: string | undefined;
  weightVersion: string | undefined;
}

interface Settings {
  maxInFlightPerEngine: number;
  healthIntervalMs: number;
  healthTimeoutMs: number;
  recoveryProbeMs: number;
  unavailableDeadlineMs: number;
  logger: Logger | undefined;
}

/** The engine router. `startCaptureProxy` builds one over its engines; it is `proxy.router`. */
export class EngineRouter {
  readonly events = new EventEmitter<RouterEvents>();
  /** The versions each engine served, and from when (see `WeightUpdateLog`). */
  readonly weightLog = new WeightUpdateLog();
  readonly #members = new Map<string, Member>();
  readonly #bindings = new Map<string, Member>();
  readonly #options: Settings;
  readonly #changes = new Set<() => void>();
  #interval: NodeJS.Timeout | undefined;
  #probe: NodeJS.Timeout | undefined;
  #openedAt: number | undefined;
  #closed = false;

  constructor(engines: readonly Engine[], options: EngineRouterOptions = {}) {
    const positive = (name: keyof EngineRouterOptions, value: number | undefined, fallback: number) => {
      if (value === undefined) return fallback;
      if (!(typeof value === 'number' && value > 0)) {
        throw new ConfigError(`router option ${name}: expected a number > 0, found ${String(value)}`);
      }
      return value;
    };
    this.#options = {
      maxInFlightPerEngine: positive('maxInFlightPerEngine', options.maxInFlightPerEngine, 256),
      healthIntervalMs: positive('healthIntervalMs', options.healthIntervalMs, 30_000),
      healthTimeoutMs: positive('healthTimeoutMs', options.healthTimeoutMs, 5_000),
      recoveryProbeMs: positive('recoveryProbeMs', options.recoveryProbeMs, 1_000),
      unavailableDeadlineMs: positive('unavailableDeadlineMs', options.unavailableDeadlineMs, 60_000),
      logger: options.logger,
    };
    for (const engine of engines) this.#add(engine, false);
    if (Number.isFinite(this.#options.healthIntervalMs)) {
      this.#interval = setInterval(() => void this.checkNow('interval'), this.#options.healthIntervalMs);
      this.#interval.unref();
    }
  }

  /** Every engine, healthy or not, in the order they were added. */
  status(): EngineStatus[] {
    return [...this.#members.values()].map((m) => ({
      url: m.engine.url,
      kind: m.engine.kind,
      healthy: m.healthy,
      sessions: m.sessions,
      inFlight: m.inFlight,
      waiting: m.waiters.length,
      lastError: m.lastError,
      weightVersion: m.weightVersion,
    }));
  }

  /** The smallest top-log-probs cap of the routed engines (`Engine.maxTopLogprobs`) and whose it is. */
  topLogprobsLimit(): { limit: number; url: string } | undefined {
    let low: { limit: number; url: string } | undefined;
    for (const { engine } of this.#members.values()) {
      const cap = engine.maxTopLogprobs;
      if (cap !== undefined && (low === undefined || cap < low.limit)) low = { limit: cap, url: engine.url };
    }
    return low;
  }

  /** Engines currently taking requests. */
  get healthyCount(): number {
    let n = 0;
    for (const m of this.#members.values()) if (m.healthy) n++;
    return n;
  }

  /** Open while no engine is healthy. */
  get breakerOpen(): boolean {
    return this.#openedAt !== undefined;
  }

  /** The engine a session is placed on, if any. */
  engineOf(sessionId: string): string | undefined {
    return this.#bindings.get(sessionId)?.engine.url;
  }

  /** Add an engine at run time; it receives new sessions once it answers its first health check. */
  add(engine: Engine, options: { owned?: boolean | undefined } = {}): void {
    if (this.#closed) throw new ConfigError('the router is closed');
    if (this.#members.has(engine.url)) {
      throw new ConfigError(`engine ${engine.url} is already routed; remove it first to replace it`);
    }
    const member = this.#add(engine, options.owned ?? false);
    member.healthy = false;
    member.lastError = 'not checked yet';
    void this.#check(member, 'added');
  }

  /**
   * Remove an engine at run time: it gets no new requests at once; requests in flight on it finish, and
   * its sessions move to another engine on their next turn. Resolves once its in-flight requests ended.
   */
  async remove(url: string): Promise<void> {
    const member = this.#members.get(url);
    if (!member) {
      const known = [...this.#members.keys()].join(', ') || 'none';
      throw new ConfigError(`no routed engine ${url}; routed engines: ${known}`);
    }
    member.removed = true;
    this.#members.delete(url);
    this.#setHealthy(member, false, 'removed', 'manual');
    this.events.emit('engine:removed', { url });
    while (member.inFlight > 0) await this.#nextChange();
    if (member.owned) await member.engine.close();
  }

  /**
   * A slot on the session's engine: its sticky engine while that one is healthy, else the least-loaded
   * healthy engine. Waits for a slot when the engine is at its cap, and for a healthy engine while there
   * is none, up to `unavailableDeadlineMs`; then fails with a retryable `EngineError` naming each cause.
   */
  async acquire(sessionId: string, options: { signal?: AbortSignal | undefined } = {}): Promise<EngineLease> {
    const { signal } = options;
    let unavailableSince: number | undefined;
    for (;;) {
      signal?.throwIfAborted();
      if (this.#closed) throw new EngineError('the router is closed', { isRetryable: false });
      let member = this.#bindings.get(sessionId);
      if (member?.checking) {
        await member.checking;
        continue;
      }
      if (member && (member.removed || !member.healthy)) {
        this.#unbind(sessionId, member);
        const to = this.#leastLoaded();
        if (to) {
          this.#bind(sessionId, to);
          this.events.emit('session:moved', { sessionId, from: member.engine.url, to: to.engine.url });
        }
        member = to;
      } else if (!member) {
        member = this.#leastLoaded();
        if (member) this.#bind(sessionId, member);
      }
      if (!member) {
        unavailableSince ??= performance.now();
        const waited = performance.now() - unavailableSince;
        if (waited >= this.#options.unavailableDeadlineMs) throw this.#unavailable(waited);
        await this.#nextChange(signal, this.#options.unavailableDeadlineMs - waited);
        continue;
      }
      if (member.inFlight < this.#options.maxInFlightPerEngine) {
        member.inFlight++;
        return this.#lease(member);
      }
      await this.#slotFreed(member, signal);
    }
  }

  /** Place a new session on the engine at `url` (it still moves if that engine goes down). */
  place(sessionId: string, url: string): void {
    const member = this.#members.get(url);
    if (!member) {
      const known = [...this.#members.keys()].join(', ') || 'none';
      throw new ConfigError(`session ${sessionId}: engine ${url} is not routed; routed engines: ${known}`);
    }
    const bound = this.#bindings.get(sessionId);
    if (bound) this.#unbind(sessionId, bound);
    this.#bind(sessionId, member);
  }

  /** The session ended: its engine no longer counts it. */
  release(sessionId: string): void {
    const member = this.#bindings.get(sessionId);
    if (member) this.#unbind(sessionId, member);
  }

  /** A request to `engine` failed: check it now. Resolves with whether it is still healthy. */
  reportFailure(engine: Engine, error: unknown): Promise<boolean> {
    const member = this.#members.get(engine.url);
    if (!member || member.engine !== engine) return Promise.resolve(false);
    this.#options.logger?.debug?.(`request to ${engine.url} failed; checking its health`, {
      error: describeCause(error),
    });
    return this.#check(member, 'failure', describeCause(error));
  }

  /** The weight version an engine reported with a result (logged when it changed). */
  noteVersion(engine: Engine, version: string | undefined): void {
    const member = this.#members.get(engine.url);
    if (!member || version === undefined) return;
    member.weightVersion = version;
    this.weightLog.record(engine.url, version, 'reported');
  }

  /**
   * Weights the caller loaded into engines itself (a trainer hook) are in force from now on: `version` is
   * logged for the engines at `urls` (default: every routed engine). Tokens of engines that report no
   * version (vLLM) received from now on carry it; call this while generation is paused (or with no
   * turn in flight), or chunks received between the engine's switch and this call keep the old version.
   */
  noteWeightUpdate(version: string, options: { urls?: readonly string[] | undefined } = {}): void {
    if (typeof version !== 'string' || version === '') {
      throw new ConfigError(
        `noteWeightUpdate: version must be a non-empty string, found ${JSON.stringify(version)}`,
      );
    }
    const urls = options.urls ?? [...this.#members.keys()];
    for (const url of urls) {
      const member = this.#members.get(url);
      if (!member) {
        const known = [...this.#members.keys()].join(', ') || 'none';
        throw new ConfigError(`noteWeightUpdate: engine ${url} is not routed; routed engines: ${known}`);
      }
    }
    for (const url of urls) {
      this.#members.get(url)!.weightVersion = version;
      this.weightLog.record(url, version, 'noted');
    }
  }

  /** Health-check every engine now, down ones included (readmission). */
  async checkNow(trigger: CheckTrigger = 'manual'): Promise<void> {
    await Promise.all([...this.#members.values()].map((m) => this.#check(m, trigger)));
  }

  /** Resolves at once while an engine is healthy; otherwise when one becomes healthy (the breaker closes). */
  async whenAvailable(options: { signal?: AbortSignal | undefined } = {}): Promise<void> {
    while (this.healthyCount === 0) {
      if (this.#closed) throw new EngineError('the router is closed', { isRetryable: false });
      await this.#nextChange(options.signal);
    }
  }

  /**
   * Update every engine's weights from disk: pause generation (SGLang's `abort` mode by default, so
   * in-flight turns come back with their partial output and the proxy continues them on the new
   * weights), load, continue. Engines without weight controls (vLLM) fail with a `ConfigError`.
   */
  async updateWeights(
    request: WeightUpdateRequest & { pauseMode?: PauseMode | undefined },
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<void> {
    const members = [...this.#members.values()].filter((m) => m.healthy);
    const missing = members.filter((m) => !m.engine.weights).map((m) => m.engine.url);
    if (missing.length > 0) {
      throw new ConfigError(`engines without weight-update controls (not SGLang): ${missing.join(', ')}`);
    }
    const { pauseMode = 'abort', ...update } = request;
    await Promise.all(
      members.map(async (m) => {
        const weights = m.engine.weights!;
        await weights.pauseGeneration({ mode: pauseMode, signal: options.signal });
        try {
          await weights.updateWeightsFromDisk(update, { signal: options.signal });
          m.weightVersion = update.weightVersion ?? m.weightVersion;
          // Logged while paused: every chunk received after the resume is the new version's.
          if (update.weightVersion !== undefined)
            this.weightLog.record(m.engine.url, update.weightVersion, 'update');
        } finally {
          await weights.continueGeneration({ signal: options.signal });
        }
      }),
    );
  }

  /** Stop the health checks and close every engine. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#interval) clearInterval(this.#interval);
    if (this.#probe) clearTimeout(this.#probe);
    this.#wakeAll();
    for (const m of this.#members.values()) for (const w of m.waiters.splice(0)) w();
    await Promise.all([...this.#members.values()].filter((m) => m.owned).map((m) => m.engine.close()));
  }

  #add(engine: Engine, owned: boolean): Member {
    const member: Member = {
      engine,
      owned,
      healthy: true,
      removed: false,
      sessions: 0,
      inFlight: 0,
      waiters: [],
      checking: undefined,
      lastError: undefined,
      weightVersion: undefined,
    };
    this.#members.set(engine.url, member);
    this.events.emit('engine:added', { url: engine.url });
    return member;
  }

  #lease(member: Member): EngineLease {
    let released = false;
    return {
      engine: member.engine,
      release: () => {
        if (released) return;
        released = true;
        member.inFlight--;
        member.waiters.shift()?.();
        if (member.removed) this.#wakeAll();
      },
    };
  }

  #bind(sessionId: string, member: Member): void {
    this.#bindings.set(sessionId, member);
    member.sessions++;
  }

  #unbind(sessionId: string, member: Member): void {
    this.#bindings.delete(sessionId);
    member.sessions = Math.max(0, member.sessions - 1);
  }

  /** Fewest sessions, then fewest requests in flight; ties go to the engine added first. */
  #leastLoaded(): Member | undefined {
    let best: Member | undefined;
    for (const m of this.#members.values()) {
      if (!m.healthy || m.removed) continue;
      if (
        !best ||
        m.sessions < best.sessions ||
        (m.sessions === best.sessions && m.inFlight < best.inFlight)
      ) {
        best = m;
      }
    }
    return best;
  }

  #check(member: Member, trigger: CheckTrigger, failure?: string): Promise<boolean> {
    if (member.checking) return member.checking;
    const run = (async () => {
      let ok = false;
      let cause = failure ?? 'health check failed';
      try {
        ok = await member.engine.health({ signal: AbortSignal.timeout(this.#options.healthTimeoutMs) });
        // A down engine still failing keeps the cause that took it down (a refused connection says more).
        if (!ok && !failure && !member.healthy && member.lastError) cause = member.lastError;
        else if (!ok)
          cause = `${member.engine.url}/health did not answer 200${failure ? ` (after: ${failure})` : ''}`;
      } catch (error) {
        cause = `${member.engine.url}/health: ${describeCause(error)}`;
      }
      if (!member.removed) this.#setHealthy(member, ok, cause, trigger);
      return ok && !member.removed;
    })().finally(() => {
      member.checking = undefined;
      this.#wakeAll();
    });
    member.checking = run;
    return run;
  }

  #setHealthy(member: Member, healthy: boolean, cause: string, trigger: CheckTrigger): void {
    const was = member.healthy;
    const readmitted = member.lastError !== 'not checked yet';
    member.healthy = healthy;
    member.lastError = healthy ? undefined : cause;
    if (was && !healthy) {
      this.#options.logger?.warn?.(`engine ${member.engine.url} is down: ${cause}`);
      this.events.emit('engine:down', { url: member.engine.url, cause, trigger });
      // Requests waiting for its slots go elsewhere.
      for (const w of member.waiters.splice(0)) w();
    } else if (!was && healthy) {
      this.#options.logger?.info?.(`engine ${member.engine.url} is healthy`);
      this.events.emit('engine:up', { url: member.engine.url, readmitted, trigger });
    }
    this.#updateBreaker(member);
    this.#wakeAll();
  }

  #updateBreaker(changed: Member): void {
    const healthy = this.healthyCount;
    if (healthy === 0 && this.#members.size > 0 && this.#openedAt === undefined) {
      this.#openedAt = performance.now();
      const causes: Record<string, string> = {};
      for (const m of this.#members.values()) causes[m.engine.url] = m.lastError ?? 'unknown';
      this.events.emit('breaker:open', { causes });
    } else if (healthy > 0 && this.#openedAt !== undefined) {
      const openMs = performance.now() - this.#openedAt;
      this.#openedAt = undefined;
      this.events.emit('breaker:close', { url: changed.engine.url, openMs });
    }
    this.#scheduleProbe();
  }

  /**
   * While an engine is down, the down ones are probed every `recoveryProbeMs`, so a restarted engine is
   * readmitted in time for new sessions (and, with the breaker open, nothing else would trigger a check).
   * Healthy engines are not probed: they are checked on the interval, at completions and on failures.
   */
  #scheduleProbe(): void {
    const down = () => [...this.#members.values()].filter((m) => !m.healthy && !m.removed);
    if (this.#closed || this.#probe || down().length === 0) return;
    this.#probe = setTimeout(() => {
      void Promise.all(down().map((m) => this.#check(m, 'probe'))).finally(() => {
        this.#probe = undefined;
        this.#scheduleProbe();
      });
    }, this.#options.recoveryProbeMs);
    this.#probe.unref();
  }

  #unavailable(waitedMs: number): EngineError {
    const causes = [...this.#members.values()].map((m) => `${m.engine.url}: ${m.lastError ?? 'unknown'}`);
    return new EngineError(
      `no healthy engine for ${seconds(waitedMs)} (deadline ${seconds(this.#options.unavailableDeadlineMs)}): ${causes.join('; ') || 'no engines routed'}`,
      { isRetryable: true, data: { reason: 'no_healthy_engine', causes } },
    );
  }

  /** Resolve when `member` frees a slot (or goes down). */
  #slotFreed(member: Member, signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const wake = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = () => {
        const i = member.waiters.indexOf(wake);
        if (i >= 0) member.waiters.splice(i, 1);
        reject(signal?.reason);
      };
      member.waiters.push(wake);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Resolve at the next health change, slot release or removal (or after `timeoutMs`). */
  #nextChange(signal?: AbortSignal, timeoutMs?: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.#changes.delete(done);
        resolve();
      };
      const onAbort = () => {
        clearTimeout(timer);
        this.#changes.delete(done);
        reject(signal?.reason);
      };
      const timer =
        timeoutMs === undefined ? undefined : setTimeout(done, Math.max(0, Math.min(timeoutMs, 2 ** 31 - 1)));
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#changes.add(done);
    });
  }

  #wakeAll(): void {
    for (const w of [...this.#changes]) w();
  }
}

function seconds(ms: number): string {
  return `${ms < 10_000 ? (ms / 1000).toFixed(1) : Math.round(ms / 1000)} s`;
}
