/**
 * `reapOrphans`: remove what crashed runs left behind, selected by run and/or age: host sandbox folders
 * with their processes, cgroups and mounts (also where the metadata is torn: a sandbox id carries its
 * run's tag), cgroups and launcher processes whose folder is gone, Docker containers, and Kubernetes pods and
 * agent-sandbox claims. Sandboxes whose
 * creating process is still alive are left alone unless `includeLive` is set.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, SandboxError } from '@vime/core';
import { DockerEngine, defaultDockerSocket } from './docker/engine-api.js';
import { cgroupHasProcesses, cgroupOwner, findCgroups, removeCgroupTree } from './host/cgroups.js';
import { cleanupSandboxDir, defaultRootDir, listSandboxDirs } from './host/state.js';
import type { KubeConnection } from './kubernetes/client.js';
import { reapKubernetes } from './kubernetes/reap.js';
import {
  CREATED_LABEL,
  idOfRun,
  isOwnerAlive,
  OWNER_LABEL,
  RUN_LABEL,
  runTag,
  SANDBOX_LABEL,
} from './lifecycle.js';
import { killByEnvPrefix, SANDBOX_MARKER_ENV } from './process-markers.js';
import type { SandboxEmitter } from './types.js';

/** Options of `reapOrphans`. */
export interface ReapOptions {
  /** Only sandboxes labelled with this run (`vime.run`). */
  run?: string | undefined;
  /** Only sandboxes created longer ago than this. */
  olderThanMs?: number | undefined;
  /** Also remove sandboxes whose creating process is still running (default false). */
  includeLive?: boolean | undefined;
  /** Host sandbox state folder (default `<tmpdir>/vime-sandboxes`). */
  rootDir?: string | undefined;
  /**
   * Docker engine to sweep: a client, a socket path, or false to skip. Default: the default socket when it
   * exists.
   */
  docker?: DockerEngine | string | false | undefined;
  /**
   * A Kubernetes namespace to sweep too (its pods and agent-sandbox claims with the run label): the
   * connection (`{}` for the default kubeconfig and namespace), or false/absent to skip it.
   */
  kubernetes?: KubeConnection | false | undefined;
  /** Report what would be removed without removing it. */
  dryRun?: boolean | undefined;
  events?: SandboxEmitter | undefined;
  signal?: AbortSignal | undefined;
}

/** A sandbox `reapOrphans` removed. */
export interface ReapedSandbox {
  id: string;
  provider: string;
  labels: Record<string, string>;
  reason: string;
}

/** What `reapOrphans` removed, and what it left because its run is alive. */
export interface ReapReport {
  removed: ReapedSandbox[];
  /** Matched by the filters but left alone because their run is still alive. */
  skippedLive: number;
  errors: Array<{ id: string; error: unknown }>;
}

function matches(
  labels: Record<string, string>,
  createdAt: number,
  options: ReapOptions,
): { match: boolean; reason: string } {
  const reasons: string[] = [];
  if (options.run !== undefined) {
    if (labels[RUN_LABEL] !== options.run) return { match: false, reason: '' };
    reasons.push(`run ${options.run}`);
  }
  if (options.olderThanMs !== undefined) {
    const age = Date.now() - createdAt;
    if (!(age > options.olderThanMs)) return { match: false, reason: '' };
    reasons.push(`age ${Math.round(age / 1000)} s`);
  }
  return { match: true, reason: reasons.join(', ') };
}

/** The options a selector stands for, checked: a run or an age is required. */
function reapOptionsOf(selector: string | number | ReapOptions): ReapOptions {
  const options: ReapOptions =
    typeof selector === 'string'
      ? { run: selector }
      : typeof selector === 'number'
        ? { olderThanMs: selector }
        : selector;
  if (options.run === undefined && options.olderThanMs === undefined) {
    throw new ConfigError('reapOrphans needs `run` (a vime.run label) or `olderThanMs`; neither was given');
  }
  if (options.olderThanMs !== undefined && !(options.olderThanMs >= 0)) {
    throw new ConfigError(`reapOrphans olderThanMs must be >= 0, got ${JSON.stringify(options.olderThanMs)}`);
  }
  return options;
}

/**
 * `reapOrphans` of one Docker engine's containers only, nothing of this host: for a remote engine (a fleet
 * backend). An engine that cannot be reached is reported in `errors`.
 */
export async function reapEngineOrphans(
  engine: DockerEngine,
  selector: string | number | Omit<ReapOptions, 'docker' | 'rootDir'>,
): Promise<ReapReport> {
  const options = reapOptionsOf(selector);
  const report: ReapReport = { removed: [], skippedLive: 0, errors: [] };
  try {
    await reapContainers(engine, options, report, (s) => {
      report.removed.push(s);
      options.events?.emit('leak-reaped', s);
    });
  } catch (error) {
    report.errors.push({ id: `docker engine ${engine.address}`, error });
  }
  return report;
}

/**
 * Remove leftovers of crashed runs. `reapOrphans('run-…')` is short for `reapOrphans({ run: 'run-…' })`,
 * `reapOrphans(ms)` for `reapOrphans({ olderThanMs: ms })`.
 * At least one of `run` and `olderThanMs` is required, so a call can never sweep everything by accident.
 */
export async function reapOrphans(selector: string | number | ReapOptions): Promise<ReapReport> {
  const options = reapOptionsOf(selector);
  const report: ReapReport = { removed: [], skippedLive: 0, errors: [] };
  const reaped = (s: ReapedSandbox) => {
    report.removed.push(s);
    options.events?.emit('leak-reaped', s);
  };

  const rootDir = options.rootDir ?? defaultRootDir();
  for (const { dir, meta, mtimeMs } of await listSandboxDirs(rootDir)) {
    options.signal?.throwIfAborted();
    const id = dir.slice(dir.lastIndexOf('/') + 1);
    // Torn or missing metadata (a crash mid-write, a damaged disk): the id still names the run.
    const labels =
      meta?.labels ??
      (options.run !== undefined && idOfRun(id, options.run) ? { [RUN_LABEL]: options.run } : {});
    const { match, reason } = matches(labels, meta?.createdAt ?? mtimeMs, options);
    if (!match) continue;
    if (!options.includeLive && meta && isOwnerAlive(labels[OWNER_LABEL])) {
      report.skippedLive++;
      continue;
    }
    if (!options.dryRun) {
      try {
        await cleanupSandboxDir(dir, meta, { scan: true });
      } catch (error) {
        report.errors.push({ id, error });
        continue;
      }
    }
    reaped({
      id,
      provider: meta?.provider ?? 'unknown',
      labels,
      reason: meta ? reason : `${reason}, torn metadata`,
    });
  }

  // Cgroups and launcher processes whose folder is gone (a cleanup cut short, a removed state folder).
  const selects = (id: string) => (options.run === undefined ? true : idOfRun(id, options.run));
  const orphans = findCgroups(
    (name) => /^vime-sbx-[0-9a-f]{8}-[0-9a-f]{12}$/.test(name) && selects(name.slice(5)),
  );
  const byId = new Map<string, Array<{ dir: string; createdAt: number }>>();
  for (const cg of orphans) {
    const id = cg.dir.slice(cg.dir.lastIndexOf('/') + 6);
    if (existsSync(join(rootDir, id))) continue;
    byId.set(id, [...(byId.get(id) ?? []), cg]);
  }
  // Ids whose cgroups belong to a live sandbox under another root folder: their processes stay too.
  const elsewhere = new Set<string>();
  for (const [id, cgs] of byId) {
    const createdAt = Math.min(...cgs.map((c) => c.createdAt));
    const labels = options.run === undefined ? {} : { [RUN_LABEL]: options.run };
    const { match, reason } = matches(labels, createdAt, options);
    if (!match) continue;
    // A cgroup without a folder here may belong to a live sandbox under another root folder (several
    // bubblewrap backends of one run, a per-exec one empty between commands): selected by age alone it
    // goes only when empty, and in any case only when its owner is gone.
    if (options.run === undefined && cgs.some((c) => cgroupHasProcesses(c.dir))) continue;
    if (!options.includeLive && cgs.some((c) => isOwnerAlive(cgroupOwner(c.dir)))) {
      report.skippedLive++;
      elsewhere.add(id);
      continue;
    }
    if (!options.dryRun) {
      try {
        for (const cg of cgs) await removeCgroupTree(cg.dir);
      } catch (error) {
        report.errors.push({ id, error });
        continue;
      }
    }
    reaped({ id, provider: 'unknown', labels, reason: `${reason}, cgroup without a sandbox folder` });
  }
  if (options.run !== undefined && !options.dryRun) {
    // Launchers and local processes of the run that outlived their folder (a live sandbox has one).
    killByEnvPrefix(
      SANDBOX_MARKER_ENV,
      `sbx-${runTag(options.run)}-`,
      (id) => !existsSync(join(rootDir, id)) && !elsewhere.has(id),
    );
  }

  const engine =
    options.docker === false
      ? undefined
      : options.docker instanceof DockerEngine
        ? options.docker
        : typeof options.docker === 'string'
          ? new DockerEngine(options.docker)
          : existsSync(defaultDockerSocket())
            ? new DockerEngine()
            : undefined;
  if (engine) {
    try {
      await reapContainers(engine, options, report, reaped);
    } catch (error) {
      // The host's leftovers are reaped already; say why the containers could not be.
      report.errors.push({ id: `docker engine ${engine.address}`, error });
    } finally {
      if (!(options.docker instanceof DockerEngine)) await engine.close();
    }
  }
  if (options.kubernetes) {
    try {
      const swept = await reapKubernetes(options.kubernetes, {
        run: options.run,
        includeLive: options.includeLive,
        dryRun: options.dryRun,
        matches: (labels, createdAt) => matches(labels, createdAt, options),
      });
      for (const r of swept.removed) reaped({ ...r, provider: 'kubernetes' });
      report.skippedLive += swept.skippedLive;
      report.errors.push(...swept.errors);
    } catch (error) {
      report.errors.push({ id: 'kubernetes', error });
    }
  }
  return report;
}

async function reapContainers(
  engine: DockerEngine,
  options: ReapOptions,
  report: ReapReport,
  reaped: (s: ReapedSandbox) => void,
): Promise<void> {
  const filters = { label: [options.run === undefined ? RUN_LABEL : `${RUN_LABEL}=${options.run}`] };
  const containers = await engine.json<
    Array<{ Id: string; Created: number; Labels: Record<string, string> }>
  >('GET', '/containers/json', {
    query: { all: true, filters: JSON.stringify(filters) },
    signal: options.signal,
  });
  for (const c of containers) {
    const labels = c.Labels ?? {};
    const createdAt = Number(labels[CREATED_LABEL] ?? c.Created * 1000);
    const { match, reason } = matches(labels, createdAt, options);
    if (!match) continue;
    if (!options.includeLive && isOwnerAlive(labels[OWNER_LABEL])) {
      report.skippedLive++;
      continue;
    }
    const id = labels[SANDBOX_LABEL] ?? c.Id.slice(0, 12);
    if (!options.dryRun) {
      try {
        await engine.request('DELETE', `/containers/${c.Id}`, {
          query: { force: true, v: true },
          ok: [404, 409], // 409: the engine is removing it already (AutoRemove)
          signal: options.signal,
        });
      } catch (error) {
        report.errors.push({
          id,
          error: SandboxError.isInstance(error) ? error : new SandboxError(String(error)),
        });
        continue;
      }
    }
    reaped({ id, provider: 'docker', labels, reason });
  }
}
