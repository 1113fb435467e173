/**
 * The coding-agent rollout behind slime: a Vime rollout server (`startRolloutServer`)
 * whose every request is one slime sample carrying a SWE-smith row in its `metadata`. Each request runs one
 * coding-agent rollout against the given engines, graded in a fresh sandbox, and answers with the
 * rollout's training rows. Settings come from the same flags and env vars as the loop (`--help`), so the
 * Job Group's `AGENT_MAX_TURNS`, `AGENT_EVAL_TIMEOUT_SEC`, `SANDBOX_POOL_REPLICAS`, … take effect.
 *
 *   vime-rollout-server \
 *     --engine-url http://sglang-0.$SKYPILOT_JOBGROUP_NAME:30000 [--dataset rows.jsonl] [--port 8600] [--host 0.0.0.0]
 */

import { join, resolve } from 'node:path';
import {
  ConfigError,
  createSample,
  type RolloutResult,
  type Sample,
  type TaskSpec,
  VimeError,
} from '@vime/core';
import { loadTokenizer } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { GroupQueue } from '@vime/core/queue';
import type { RolloutOutcome } from '@vime/core/runner';
import {
  bundledTokenizerDir,
  type Config,
  checkAgents,
  harnessSocket,
  loopRollout,
  openRunSinks,
  parseConfig,
  readTasks,
  runEntry,
  startEngines,
  usage,
} from '@vime/loop';
import { rolloutRecordOf } from '@vime/metrics/sinks';
import { providerFor } from '@vime/sandbox';
import { rowToTask, SweEnvironments, SwePools, SweSmithRowSchema } from '@vime/swe';
import { startRolloutServer } from './rollout-server.js';

const SERVER_USAGE = `Usage: vime-rollout-server [--host H] [--port N] [--attempts N] [loop flags]

Serves coding-agent rollouts to slime's custom generate function (POST /rollout; GET /config shows the
settings in effect). --host (default 0.0.0.0) and --port (default 8600) place the server; --attempts
(default 3) is how often a rollout that fails for infrastructure reasons is tried, each time in a fresh
sandbox, before it is answered as failed. Each sample is a durable unit in <out>/queue: a request sent
again (a lost reply, a restart on the same --out) gets the recorded rows, with no second rollout or
grade. Every other flag and env var is the loop's:

${usage
  .split('\n')
  .slice(usage.split('\n').findIndex((l) => l.startsWith('Flags')))
  .join('\n')}`;

await runEntry('vime-rollout-server', async () => {
  const argv = process.argv.slice(2);
  const server = splitServerFlags(argv);
  const config = parseConfig(server.rest, process.env);
  if (config === 'help') {
    console.log(SERVER_USAGE);
    return 0;
  }
  if (config.engineUrls.length === 0) {
    throw new ConfigError(
      'give the engines with --engine-url URL (repeatable) or VIME_ENGINE_URLS="url1 url2"',
    );
  }
  const port = Number(server.port ?? 8600);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new ConfigError(`--port: ${JSON.stringify(server.port)} is not a port`);

  const { dataset, tasks } = await readTasks(config, { log: (line) => console.error(line) });
  const known = new Map(tasks.map((t) => [t.id, t]));
  checkAgents(tasks, config); // a bad row agent, or a harness row on a local sandbox, fails here
  const environments = await SweEnvironments.forDataset(dataset);
  const tokenizer = await loadTokenizer(config.tokenizer ?? bundledTokenizerDir());
  const engines = await startEngines(config, tasks, tokenizer, (line) => console.error(line));
  // Claude Code and Codex reach the proxy only through its unix socket. slime's samples pick their agent
  // (`metadata.agent`), also on rows the dataset lacks, so a server whose sandboxes have the channel
  // always listens on one.
  const socket = await harnessSocket(config.sandbox !== 'local');
  const proxy = await startCaptureProxy({
    engine: engines.engines,
    tokenizer,
    socketPath: socket.socketPath,
    onWeightUpdate: config.onWeightUpdate,
    router: {
      healthIntervalMs: config.engineHealthIntervalMs,
      unavailableDeadlineMs: config.engineDeadlineMs,
    },
  });
  const pools = new SwePools(providerFor(config.sandbox), tasks, {
    kind: config.sandbox,
    environments,
    replicas: config.poolReplicas,
    noPool: config.noPool,
    maxLivePerPool: config.poolReplicas + 2 * config.concurrency + 2,
  });

  // One metrics.jsonl line per served rollout (slime's rollout_id is the step), and TensorBoard files.
  const out = resolve(config.out ?? join('runs', `serve-${new Date().toISOString().replace(/[:.]/g, '-')}`));
  const sinks = await openRunSinks(
    out,
    {
      runId: `serve-${Date.now().toString(36)}`,
      startedAt: Date.now(),
      config,
      engine:
        engines.standIns.length > 0 ? 'stand-in engine (scripted policy), not a model' : config.engineKind,
    },
    (line) => console.error(line),
    { wandbProject: config.wandbProject },
  );
  const record = (step: number, result: RolloutResult) => void sinks.rollout(rolloutRecordOf(step, result));
  // Every sample a durable unit: a request sent again (a lost reply, a restarted server on the same
  // --out) is answered with the recorded rows, never rolled out or graded twice.
  const attempts = server.attempts ?? 3;
  const queue = await GroupQueue.open(join(out, 'queue'), {
    maxAttempts: attempts,
    deadlineMs: config.rolloutGuardMs + 60_000,
    retainSteps: 4096,
  });

  // A row of the dataset is graded as it is there; one slime sends that the dataset lacks is mapped as given.
  // The sample's own `metadata.agent`, when set, picks its agent either way.
  const taskOf = (metadata: Record<string, unknown>): TaskSpec => {
    const row = SweSmithRowSchema.parse(metadata);
    const task =
      known.get(row.instance_id) ?? rowToTask(row, config.poolSuffix ? { runSuffix: config.poolSuffix } : {});
    return row.agent === undefined ? task : { ...task, metadata: { ...task.metadata, agent: row.agent } };
  };

  const rolloutServer = await startRolloutServer({
    host: server.host ?? '0.0.0.0',
    port,
    concurrency: config.concurrency,
    deadlineMs: config.rolloutGuardMs,
    attempts,
    queue,
    settings: effectiveSettings(config, dataset, engines.urls),
    // Infrastructure failures throw (the server retries them, then answers a failure row); the agent's own
    // failures are graded rows.
    rollout: async ({ sample, samplingParams, signal }): Promise<Sample[]> => {
      const task = taskOf(sample.metadata);
      const sampling = {
        ...config,
        temperature: Number(samplingParams.temperature ?? config.temperature),
        topP: Number(samplingParams.top_p ?? config.topP),
        maxTokensPerTurn: Number(samplingParams.max_new_tokens ?? config.maxTokensPerTurn),
      };
      const rollout = loopRollout({ config: sampling, proxy, pools, model: 'policy' });
      const ids = {
        group_index: sample.group_index,
        index: sample.index,
        // Every row of one rollout carries its id, so slime counts the rollout once.
        rollout_id: sample.rollout_id ?? sample.index,
      };
      const phasesMs: Record<string, number> = {};
      const base = {
        taskId: task.id,
        groupIndex: sample.group_index ?? 0,
        sampleIndex: sample.index ?? 0,
        rolloutId: ids.rollout_id ?? 0,
        samples: [],
      };
      const startedAt = Date.now();
      let outcome: RolloutOutcome;
      try {
        outcome = await rollout(task, {
          ...base,
          signal,
          emit: () => {},
          phase: async (name, fn) => {
            const start = performance.now();
            try {
              return await fn();
            } finally {
              phasesMs[name] = (phasesMs[name] ?? 0) + performance.now() - start;
            }
          },
        });
      } catch (error) {
        // Each failed attempt is a line of its own (the server retries it in a fresh sandbox).
        if (!signal.aborted)
          record(base.rolloutId, {
            ...base,
            status: 'failed',
            error: {
              code: VimeError.isInstance(error) ? error.code : 'rollout_error',
              message: (error as Error).message,
            },
            timings: phasesMs,
            metadata: {},
            turns: 0,
            startedAt,
            endedAt: Date.now(),
          });
        throw error;
      }
      record(base.rolloutId, {
        ...base,
        status: outcome.status ?? 'completed',
        reward: outcome.reward,
        turns: outcome.turns ?? 0,
        timings: { ...phasesMs, ...outcome.timings },
        metadata: outcome.metadata ?? {},
        startedAt,
        endedAt: Date.now(),
      });
      return (outcome.samples ?? []).map((row) =>
        createSample({
          ...row,
          ...ids,
          prompt: sample.prompt,
          label: sample.label,
          metadata: { ...sample.metadata, ...row.metadata, vime_phases_ms: phasesMs },
        }),
      );
    },
  });
  console.log(
    `coding-agent rollout server on ${rolloutServer.url} (engines: ${engines.urls.join(', ')}; dataset: ${dataset}; metrics: ${join(out, 'metrics.jsonl')})`,
  );
  await new Promise<void>((resolve) => {
    const stop = async () => {
      await rolloutServer.close();
      await queue.close();
      await sinks.close();
      await pools.close();
      await proxy.close();
      await socket.close();
      await engines.close();
      resolve();
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  return 0;
});

/** The settings a rollout runs with, as GET /config serves them. */
function effectiveSettings(config: Config, dataset: string, engineUrls: string[]): Record<string, unknown> {
  return {
    dataset,
    repoFilter: config.repoFilter,
    perRepo: config.perRepo,
    poolSuffix: config.poolSuffix,
    sandbox: config.sandbox,
    poolReplicas: config.poolReplicas,
    noPool: config.noPool,
    maxTurns: config.maxTurns,
    gradeTimeoutMs: config.gradeTimeoutMs,
    rolloutGuardMs: config.rolloutGuardMs,
    onSuspicious: config.onSuspicious,
    concurrency: config.concurrency,
    engineUrls,
  };
}

/** `--host`, `--port` and `--attempts` (with `=` or a separate value) are the server's; the rest the loop's. */
function splitServerFlags(argv: string[]): {
  host?: string;
  port?: string;
  attempts?: number;
  rest: string[];
} {
  const out: { host?: string; port?: string; attempts?: number; rest: string[] } = { rest: [] };
  for (let i = 0; i < argv.length; i++) {
    const m = /^--(host|port|attempts)(?:=(.*))?$/.exec(argv[i]!);
    if (!m) {
      out.rest.push(argv[i]!);
      continue;
    }
    const value = m[2] ?? argv[++i];
    if (value === undefined) throw new ConfigError(`--${m[1]} needs a value`);
    if (m[1] === 'attempts') {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 1)
        throw new ConfigError(`--attempts expects a whole number >= 1, got ${JSON.stringify(value)}`);
      out.attempts = n;
    } else out[m[1] as 'host' | 'port'] = value;
  }
  return out;
}
