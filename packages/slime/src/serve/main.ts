/**
 * The coding-agent rollout behind slime: a Vime rollout server (`startRolloutServer`) whose every request is
 * one slime sample carrying a SWE-smith row in its `metadata`. Each request runs one coding-agent rollout
 * against the given engines, graded in a fresh sandbox, and answers with the rollout's training rows.
 * Settings come from the same flags and env vars as the loop (`--help`), so the Job Group's
 * `AGENT_MAX_TURNS`, `AGENT_EVAL_TIMEOUT_SEC`, `SANDBOX_POOL_REPLICAS`, … take effect.
 *
 *   vime-rollout-server --engine-url http://sglang-0.$SKYPILOT_JOBGROUP_NAME:30000 [--dataset rows.jsonl] [--port 8600] [--host 0.0.0.0]
 */
import { join } from 'node:path';
import { ConfigError } from '@vime/core';
import { type CliIo, EXIT, UsageError } from '@vime/core/utils';
import { type Config, parseConfig, usage } from '@vime/loop';
import { startRolloutServer } from '../rollout-server.js';
import { bridgeRollout } from './rollout.js';
import { startServeServices } from './services.js';

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

/** Serve rollouts until `io.signal` aborts (SIGINT/SIGTERM), then stop everything it started. */
export async function serveMain(argv: string[], io: CliIo): Promise<number> {
  const server = splitServerFlags(argv);
  const config = parseConfig(server.rest, io.env, 'vime-rollout-server');
  if (config === 'help') {
    io.stdout(`${SERVER_USAGE}\n`);
    return EXIT.ok;
  }
  if (config.engineUrls.length === 0) {
    throw new ConfigError(
      'give the engines with --engine-url URL (repeatable) or VIME_ENGINE_URLS="url1 url2"',
    );
  }
  const port = Number(server.port ?? 8600);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new UsageError(`--port: ${JSON.stringify(server.port)} is not a port`);
  const attempts = server.attempts ?? 3;
  const services = await startServeServices(config, attempts, (line) => io.stderr(`${line}\n`));
  const { dataset, engines, queue, out } = services;
  const rolloutServer = await startRolloutServer({
    host: server.host ?? '0.0.0.0',
    port,
    concurrency: config.concurrency,
    deadlineMs: config.rolloutGuardMs,
    attempts,
    queue,
    settings: effectiveSettings(config, dataset, engines.urls),
    rollout: bridgeRollout(config, services),
  });
  io.stdout(
    `coding-agent rollout server on ${rolloutServer.url} (engines: ${engines.urls.join(', ')}; dataset: ${dataset}; metrics: ${join(out, 'metrics.jsonl')})\n`,
  );
  await new Promise<void>((resolve) => {
    if (io.signal?.aborted) resolve();
    io.signal?.addEventListener('abort', () => resolve(), { once: true });
  });
  await rolloutServer.close();
  await services.close();
  return EXIT.ok;
}

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
  host?: string | undefined;
  port?: string | undefined;
  attempts?: number | undefined;
  rest: string[];
} {
  const out: {
    host?: string | undefined;
    port?: string | undefined;
    attempts?: number | undefined;
    rest: string[];
  } = { rest: [] };
  for (let i = 0; i < argv.length; i++) {
    const m = /^--(host|port|attempts)(?:=(.*))?$/.exec(argv[i]!);
    if (!m) {
      out.rest.push(argv[i]!);
      continue;
    }
    const value = m[2] ?? argv[++i];
    if (value === undefined) throw new UsageError(`--${m[1]} needs a value`);
    if (m[1] === 'attempts') {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 1)
        throw new UsageError(`--attempts expects a whole number >= 1, got ${JSON.stringify(value)}`);
      out.attempts = n;
    } else out[m[1] as 'host' | 'port'] = value;
  }
  return out;
}
