/**
 * One warm pool per repo image, as the reference setup runs them: `emitPools` lists the distinct
 * (pool, image) pairs of a task list, each pool keeps `replicas` sandboxes warm (`SANDBOX_POOL_REPLICAS`)
 * unless pools are off (`SANDBOX_NO_POOL=1`), and a claim that finds no warm sandbox creates one on demand
 * from the row's own image, so a slow or partial warm-up never stalls the run. New sandboxes get the
 * image's environment (its workspace template) before they are handed out.
 */
import { ConfigError, type TaskSpec } from '@vime/core';
import {
  type OpOptions,
  type ResourceLimits,
  type Sandbox,
  type SandboxProvider,
  type SandboxSpec,
  WarmPool,
  type WarmPoolStats,
} from '@vime/sandbox';
import { emitPools } from './dataset.js';
import type { SandboxKind, SweEnvironments } from './environment.js';

/** Options of `SwePools`. */
export interface SwePoolsOptions {
  /** The backend `provider` is (decides how environments are put in place). */
  kind: SandboxKind;
  environments: SweEnvironments;
  /** Warm sandboxes per repo pool (`SANDBOX_POOL_REPLICAS`; default 0). */
  replicas?: number | undefined;
  /** No warm pools: every claim creates on demand (`SANDBOX_NO_POOL=1`). */
  noPool?: boolean | undefined;
  /** Most sandboxes alive per pool, warm and claimed (default replicas + 8). */
  maxLivePerPool?: number | undefined;
  /** Labels on every sandbox (the run label makes `reapOrphans` possible). */
  labels?: Record<string, string> | undefined;
  lifetimeMs?: number | undefined;
  /** Resource limits of every sandbox, agent and grading alike (default: the provider's). */
  limits?: ResourceLimits | undefined;
}

/** One repo image's warm pool stats. */
export interface SwePoolStats extends WarmPoolStats {
  image: string | undefined;
}

/** One warm pool per repo image: claim a sandbox of a task's image, release it. */
export class SwePools {
  readonly #provider: SandboxProvider;
  readonly #options: SwePoolsOptions;
  readonly #pools = new Map<string, WarmPool>();
  #closed = false;

  constructor(provider: SandboxProvider, tasks: readonly TaskSpec[], options: SwePoolsOptions) {
    const replicas = options.noPool ? 0 : (options.replicas ?? 0);
    if (!Number.isInteger(replicas) || replicas < 0) {
      throw new ConfigError(
        `pool replicas (SANDBOX_POOL_REPLICAS): expected a whole number >= 0, got ${JSON.stringify(options.replicas)}`,
      );
    }
    this.#provider = provider;
    this.#options = { ...options, replicas };
    const byPool = new Map(tasks.map((t) => [t.pool ?? t.id, t]));
    for (const { pool } of emitPools(tasks)) this.#pool(byPool.get(pool)!);
  }

  /** Pool names, in the order the dataset first names them. */
  get names(): string[] {
    return [...this.#pools.keys()];
  }

  /** Resolves once every pool has its warm sandboxes. */
  async ready(options: OpOptions = {}): Promise<void> {
    await Promise.all([...this.#pools.values()].map((p) => p.ready(options)));
  }

  /** A fresh sandbox for `task`, in its repo's environment: warm when one is idle, else created on demand. */
  claim(task: TaskSpec, options: OpOptions = {}): Promise<Sandbox> {
    if (this.#closed) throw new ConfigError('these pools are closed');
    return this.#pool(task).claim(options);
  }

  /**
   * A sandbox for `task` created on demand with extra spec fields (a harness's proxy channel and
   * read-only binds), in its repo's environment; never from or into the warm pool.
   */
  async create(task: TaskSpec, extra: Partial<SandboxSpec>, options: OpOptions = {}): Promise<Sandbox> {
    if (this.#closed) throw new ConfigError('these pools are closed');
    const { kind, environments, labels = {}, lifetimeMs, limits } = this.#options;
    const spec: SandboxSpec = { ...environments.specFor(task, kind, labels), ...extra };
    if (lifetimeMs !== undefined) spec.lifetimeMs = lifetimeMs;
    if (limits !== undefined) spec.limits = limits;
    const sandbox = await this.#provider.create(spec, options);
    try {
      await environments.prepare(sandbox, task, kind, options);
    } catch (error) {
      await sandbox.terminate();
      throw error;
    }
    return sandbox;
  }

  /** Sandboxes are single-use: terminate it (its pool refills). */
  async release(sandbox: Sandbox): Promise<void> {
    await sandbox.terminate();
  }

  /** Each pool's stats. */
  stats(): SwePoolStats[] {
    return [...this.#pools.values()].map((p) => ({ ...p.stats(), image: this.#images.get(p.name) }));
  }

  /** Warm and on-demand claims over every pool. */
  totals(): { warmHits: number; fallbacks: number } {
    return this.stats().reduce(
      (t, s) => ({ warmHits: t.warmHits + s.warmHits, fallbacks: t.fallbacks + s.fallbacks }),
      { warmHits: 0, fallbacks: 0 },
    );
  }

  /** Close every pool, terminating its sandboxes. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#pools.values()].map((p) => p.close()));
  }

  readonly #images = new Map<string, string | undefined>();

  /** The pool of a task's repo image; a task outside the dataset's pools gets a pool of its own image. */
  #pool(task: TaskSpec): WarmPool {
    const name = task.pool ?? task.id;
    const existing = this.#pools.get(name);
    if (existing) return existing;
    const { kind, environments, replicas = 0, labels = {}, lifetimeMs, limits } = this.#options;
    const spec = environments.specFor(task, kind, labels);
    if (lifetimeMs !== undefined) spec.lifetimeMs = lifetimeMs;
    if (limits !== undefined) spec.limits = limits;
    const pool = new WarmPool(this.#provider, {
      name,
      spec,
      size: replicas,
      maxLive: this.#options.maxLivePerPool ?? replicas + 8,
      prepare: (sandbox, op) => environments.prepare(sandbox, task, kind, op),
    });
    this.#pools.set(name, pool);
    this.#images.set(name, task.image);
    return pool;
  }
}
