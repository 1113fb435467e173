/**
 * The tasks of a run, the way a user's SWE-smith file is read: the dataset (default: the offline task set,
 * published as a SWE-smith JSONL), its environments, one warm pool per repo image, and the baseline check
 * of every row (cached per task set).
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ConfigError, type TaskSpec } from '@vime/core';
import { DockerEngine, providerFor, type SandboxEmitter } from '@vime/sandbox';
import {
  buildOfflineDockerImage,
  buildOfflineTaskSet,
  loadJsonl,
  loadParquet,
  type RowVerdict,
  rowToTask,
  SweEnvironments,
  SwePools,
  validateDataset,
} from '@vime/swe';
import { checkAgents } from './agents.js';
import type { Config } from './config.js';

/** The run's tasks and where they came from. */
export interface RunTasks {
  /** The dataset file the tasks came from (the published offline set when none was given). */
  dataset: string;
  rows: number;
  tasks: TaskSpec[];
  pools: SwePools;
  /** The sandbox provider's events (`claim`: warm or on demand, with its latency). */
  sandboxEvents: SandboxEmitter;
  /** Rows left out by the baseline check, with the reason. */
  excluded: RowVerdict[];
}

/** The dataset file of a run: the user's, or the offline task set built (once) and published in `cacheDir`. */
export async function datasetPath(config: Config, cacheDir: string): Promise<string> {
  if (config.dataset) {
    const path = resolve(config.dataset);
    if (!existsSync(path))
      throw new ConfigError(
        `--dataset: ${config.dataset} does not exist; give a SWE-smith .jsonl or .parquet file`,
      );
    return path;
  }
  const set = await buildOfflineTaskSet({ dir: join(cacheDir, 'offline-tasks') });
  // Docker runs the rows' image: make the offline set's one when this engine lacks it.
  if (config.sandbox === 'docker') {
    const engine = new DockerEngine();
    try {
      await buildOfflineDockerImage(engine, set, { ifMissing: true });
    } finally {
      await engine.close();
    }
  }
  return set.jsonlPath;
}

/** The dataset's rows as tasks: every repo unless `--repo` filters, at most `--per-repo` each. */
export async function readTasks(
  config: Config,
  options: { cacheDir?: string | undefined; log: (line: string) => void },
): Promise<{ dataset: string; rows: number; tasks: TaskSpec[] }> {
  const dataset = await datasetPath(config, options.cacheDir ?? resolve('runs', '.cache'));
  const load = dataset.endsWith('.parquet') ? loadParquet : loadJsonl;
  const { rows, issues } = await load(dataset, {
    ...(config.repoFilter.length > 0 ? { repos: config.repoFilter } : {}),
    ...(config.perRepo > 0 ? { perRepo: config.perRepo } : {}),
    onInvalid: 'skip',
  });
  for (const issue of issues) options.log(`dataset row ${issue.row}: ${issue.message} (left out)`);
  if (rows.length === 0) {
    throw new ConfigError(
      `no tasks: ${dataset} has no valid rows${config.repoFilter.length ? ` for --repo ${config.repoFilter.join(', ')}` : ''}`,
    );
  }
  const tasks = rows.map((row) => rowToTask(row, config.poolSuffix ? { runSuffix: config.poolSuffix } : {}));
  // Every row's agent is known (and runnable on this sandbox) before anything is started.
  checkAgents(tasks, config);
  return { dataset, rows: rows.length, tasks };
}

/** The tasks with their environments and pools, after the baseline check of every row. */
export async function loadRunTasks(
  config: Config,
  options: {
    cacheDir?: string | undefined;
    labels: Record<string, string>;
    log: (line: string) => void;
    signal?: AbortSignal | undefined;
  },
): Promise<RunTasks> {
  const cacheDir = options.cacheDir ?? resolve('runs', '.cache');
  const { dataset, rows, tasks: all } = await readTasks(config, { cacheDir, log: options.log });
  const environments = await SweEnvironments.forDataset(dataset);
  const provider = providerFor(config.sandbox);
  const sandboxEvents = provider.events;
  const pools = new SwePools(provider, all, {
    kind: config.sandbox,
    environments,
    replicas: config.poolReplicas,
    noPool: config.noPool,
    labels: options.labels,
    // An agent sandbox and a grading sandbox per rollout in flight, plus the warm ones.
    maxLivePerPool: config.poolReplicas + 2 * config.concurrency + 2,
  });
  if (!config.validate) return { dataset, rows, tasks: all, pools, sandboxEvents, excluded: [] };
  try {
    const report = await validateDataset(all, pools, {
      concurrency: Math.max(1, Math.min(config.concurrency, 4)),
      cacheFile: join(cacheDir, 'validated', `${config.sandbox}-${basenameKey(dataset)}.json`),
      timeoutMs: config.gradeTimeoutMs,
      signal: options.signal,
    });
    options.log(
      report.cached
        ? `baseline check: ${report.valid.length} of ${all.length} rows pass (cached)`
        : `baseline check: ${report.valid.length} of ${all.length} rows pass (${(report.durationMs / 1000).toFixed(0)} s)`,
    );
    for (const v of report.invalid) options.log(`  excluded ${v.instanceId}: ${v.reason}`);
    if (report.valid.length === 0)
      throw new ConfigError(`no task of ${dataset} passes the baseline check (see the reasons above)`);
    return { dataset, rows, tasks: report.valid, pools, sandboxEvents, excluded: report.invalid };
  } catch (error) {
    await pools.close();
    throw error;
  }
}

const basenameKey = (path: string) => path.replace(/[^A-Za-z0-9._-]+/g, '_').slice(-120);
