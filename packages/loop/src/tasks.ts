/**
 * The tasks of a run, the way a user's SWE-smith file is read: the dataset (default: the offline task set,
 * published as a SWE-smith JSONL), its environments, one warm pool per repo image, and the baseline check
 * of every row (cached per task set).
 */
import { join, resolve } from 'node:path';
import { ConfigError, type TaskSpec } from '@vime/core';
import type { AgentKind } from '@vime/harness';
import { DockerEngine, providerFor, type SandboxEmitter } from '@vime/sandbox';
import {
  buildOfflineDockerImage,
  buildOfflineTaskSet,
  DatasetError,
  loadDataset,
  problemLine,
  type RowVerdict,
  rowToTask,
  SweEnvironments,
  SwePools,
  validateDataset,
} from '@vime/swe';
import { checkAgents } from './agents.js';
import type { Config } from './config/schema.js';
import { prepareImages } from './images.js';

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
  // The user's file is checked by the loader, which says what is wrong with it and how to fix it.
  if (config.dataset) return resolve(config.dataset);
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

/**
 * The agents `mix` gives to tasks whose row names none, in dataset order: a smooth weighted round-robin,
 * so every prefix of the tasks is as close to the weights as whole tasks allow, and a run is reproducible.
 * A prompt's siblings share its task, so a GRPO group compares samples of one agent.
 */
export function mixAgents(tasks: readonly TaskSpec[], mix: Partial<Record<AgentKind, number>>): TaskSpec[] {
  const weights = Object.entries(mix).filter(([, w]) => (w ?? 0) > 0) as Array<[AgentKind, number]>;
  const total = weights.reduce((t, [, w]) => t + w, 0);
  const credit = new Map(weights.map(([k]) => [k, 0]));
  return tasks.map((task) => {
    if (task.metadata.agent != null) return task;
    for (const [k, w] of weights) credit.set(k, credit.get(k)! + w);
    const [pick] = [...credit.entries()].reduce((best, e) => (e[1] > best[1] ? e : best));
    credit.set(pick, credit.get(pick)! - total);
    return { ...task, metadata: { ...task.metadata, agent: pick } };
  });
}

/**
 * The dataset's rows as tasks: every repo unless `--repo` filters, at most `--per-repo` each. A file
 * that cannot be used, or a malformed row (unless `invalidRows: 'skip'`), stops here with a
 * `DatasetError` naming the file, the row and instance, the column and the fix.
 */
export async function readTasks(
  config: Config,
  options: { cacheDir?: string | undefined; log: (line: string) => void },
): Promise<{ dataset: string; rows: number; tasks: TaskSpec[] }> {
  const dataset = await datasetPath(config, options.cacheDir ?? resolve('runs', '.cache'));
  const shown = config.dataset ?? dataset;
  const { rows, issues } = await loadDataset(dataset, {
    ...(config.repoFilter.length > 0 ? { repos: config.repoFilter } : {}),
    ...(config.perRepo > 0 ? { perRepo: config.perRepo } : {}),
    onInvalid: 'skip',
    shown,
  });
  const problems = issues.map((issue) => ({ ...issue, file: shown }));
  if (problems.length > 0 && config.invalidRows === 'stop')
    throw new DatasetError(problems, {
      more: `\`vime-swe validate ${shown}\` lists every one; fix them, or pass --invalid-rows skip to leave such rows out`,
    });
  for (const problem of problems) options.log(`${problemLine(problem)} (left out)`);
  if (rows.length === 0) {
    throw new ConfigError(
      `no tasks: ${shown} has no valid rows${config.repoFilter.length ? ` for --repo ${config.repoFilter.join(', ')}` : ''}`,
    );
  }
  let tasks = rows.map((row) => rowToTask(row, config.poolSuffix ? { runSuffix: config.poolSuffix } : {}));
  if (config.agentMix) tasks = mixAgents(tasks, config.agentMix);
  // Every row's agent is known (and runnable on this sandbox) before anything is started.
  checkAgents(tasks, config);
  return { dataset, rows: rows.length, tasks };
}

/**
 * The tasks with their environments and pools, after the baseline check of every row; `read` is what
 * `readTasks` gave, when the caller read the dataset first (to check the engines before any sandbox).
 */
export async function loadRunTasks(
  config: Config,
  options: {
    cacheDir?: string | undefined;
    labels: Record<string, string>;
    log: (line: string) => void;
    signal?: AbortSignal | undefined;
    read?: Awaited<ReturnType<typeof readTasks>> | undefined;
  },
): Promise<RunTasks> {
  const cacheDir = options.cacheDir ?? resolve('runs', '.cache');
  const {
    dataset,
    rows,
    tasks: all,
  } = options.read ?? (await readTasks(config, { cacheDir, log: options.log }));
  const environments = await SweEnvironments.forDataset(dataset);
  const imageStore = await prepareImages(config, all, environments, {
    log: options.log,
    signal: options.signal,
    bars: !config.quiet && process.stderr.isTTY,
  });
  const provider = providerFor(config.sandbox, { imageStore });
  const sandboxEvents = provider.events;
  const pools = new SwePools(provider, all, {
    kind: config.sandbox,
    environments,
    replicas: config.poolReplicas,
    noPool: config.noPool,
    labels: options.labels,
    limits: config.sandboxLimits,
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
