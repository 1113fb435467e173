/**
 * What the coding-agent rollout server runs on: the dataset's tasks, the engines behind the capture proxy,
 * one warm pool per repo image, the run's metric sinks and its durable work units. `close` stops them all.
 */
import { join, resolve } from 'node:path';
import type { TaskSpec } from '@vime/core';
import { loadTokenizer } from '@vime/core/engine';
import type { CaptureProxy } from '@vime/core/proxy';
import { GroupQueue } from '@vime/core/queue';
import {
  bundledTokenizerDir,
  type Config,
  checkAgents,
  harnessSocket,
  openRunSinks,
  type RunEngines,
  readTasks,
  startEngines,
  startRunProxy,
  TurnLog,
} from '@vime/loop';
import type { MetricSink } from '@vime/metrics/sinks';
import { providerFor } from '@vime/sandbox';
import { SweEnvironments, SwePools } from '@vime/swe';

export interface ServeServices {
  dataset: string;
  /** The dataset's tasks by instance id. */
  known: Map<string, TaskSpec>;
  engines: RunEngines;
  proxy: CaptureProxy;
  /** Every turn the proxy captured, kept until its rollout's rows are audited. */
  turns: TurnLog;
  pools: SwePools;
  sinks: MetricSink;
  queue: GroupQueue;
  out: string;
  close(): Promise<void>;
}

export async function startServeServices(
  config: Config,
  attempts: number,
  log: (line: string) => void,
): Promise<ServeServices> {
  const { dataset, tasks } = await readTasks(config, { log });
  checkAgents(tasks, config); // a bad row agent, or a harness row on a local sandbox, fails here
  const environments = await SweEnvironments.forDataset(dataset);
  const tokenizer = await loadTokenizer(config.tokenizer ?? bundledTokenizerDir());
  const engines = await startEngines(config, tasks, tokenizer, log);
  // Claude Code and Codex reach the proxy only through its unix socket. slime's samples pick their agent
  // (`metadata.agent`), also on rows the dataset lacks, so a server whose sandboxes have the channel
  // always listens on one.
  const socket = await harnessSocket(config.sandbox !== 'local');
  const proxy = await startRunProxy(config, engines, tokenizer, socket.socketPath);
  const turns = TurnLog.memory();
  proxy.events.on('turn', (e) => turns.record(e.trajectoryId, e.turn));
  // slime updates the engines itself; the versions they report are logged and checked at hand-off.
  turns.weightLog = proxy.router.weightLog;
  const pools = new SwePools(providerFor(config.sandbox), tasks, {
    kind: config.sandbox,
    environments,
    replicas: config.poolReplicas,
    noPool: config.noPool,
    maxLivePerPool: config.poolReplicas + 2 * config.concurrency + 2,
  });
  // One metrics.jsonl line per served rollout (slime's rollout_id is the step), and TensorBoard files.
  const out = resolve(config.out ?? join('runs', `serve-${new Date().toISOString().replace(/[:.]/g, '-')}`));
  const engine =
    engines.standIns.length > 0 ? 'stand-in engine (scripted policy), not a model' : config.engineKind;
  const sinks = await openRunSinks(
    out,
    { runId: `serve-${Date.now().toString(36)}`, startedAt: Date.now(), config, engine },
    log,
    {
      wandbProject: config.wandbProject,
    },
  );
  // Every sample a durable unit: a request sent again (a lost reply, a restarted server on the same
  // --out) is answered with the recorded rows, never rolled out or graded twice.
  const queue = await GroupQueue.open(join(out, 'queue'), {
    maxAttempts: attempts,
    deadlineMs: config.rolloutGuardMs + 60_000,
    retainSteps: 4096,
  });
  const close = async () => {
    await queue.close();
    await sinks.close();
    await pools.close();
    await proxy.close();
    await socket.close();
    await engines.close();
  };
  return {
    dataset,
    known: new Map(tasks.map((t) => [t.id, t])),
    engines,
    proxy,
    turns,
    pools,
    sinks,
    queue,
    out,
    close,
  };
}
