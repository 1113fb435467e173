/**
 * `vime-swe`: `validate DATASET` grades the unchanged repository and the gold patch of every row in fresh
 * sandboxes and lists the rows that fail the baseline; `offline DIR` builds and publishes the offline task
 * set (with `--docker`, its Docker image too).
 */
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { ConfigError, VimeError } from '@vime/core';
import { parseDuration } from '@vime/core/utils';
import { DockerEngine, providerFor } from '@vime/sandbox';
import { loadJsonl, loadParquet, rowToTask } from '../dataset.js';
import { type SandboxKind, SweEnvironments } from '../environment.js';
import { buildOfflineTaskSet } from '../offline/build.js';
import { buildOfflineDockerImage } from '../offline/publish.js';
import { SwePools } from '../pools.js';
import { validateDataset } from '../validate.js';

export interface CliIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  cwd: string;
  signal?: AbortSignal | undefined;
}

export const USAGE = `Usage: vime-swe <command> [flags]

Commands:
  validate DATASET     grade the unchanged repository and the gold patch of every row, each in a fresh
                       sandbox: unchanged must fail its FAIL_TO_PASS tests, gold must resolve. Lists the
                       rows that do not, with the reason.
  offline DIR          build and publish the offline task set in DIR (instances.jsonl, instances.parquet,
                       environments.json and the repository mirror)

validate flags:
  --sandbox KIND       bubblewrap (default), docker or local
  --concurrency N      rows graded at once (default 2)
  --timeout DURATION   test run timeout per grade (default 900s)
  --json FILE          write the verdicts as JSON
offline flags:
  --docker             also build the set's Docker image (needs a Docker engine: DOCKER_HOST)
  -h, --help           this text

Exit codes: 0 every row passed (validate) or done, 1 some rows failed the baseline, 2 bad input.
`;

function flags(args: string[]) {
  try {
    return parseArgs({
      args,
      allowPositionals: true,
      strict: true,
      options: {
        sandbox: { type: 'string' },
        concurrency: { type: 'string' },
        timeout: { type: 'string' },
        json: { type: 'string' },
        docker: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (cause) {
    const message = (cause as Error).message.split('\n')[0]!.replace(/\. To specify.*$/, '');
    throw new ConfigError(`${message}; see vime-swe --help`, { cause });
  }
}

export async function main(argv: string[], io: CliIo): Promise<number> {
  try {
    const { values, positionals } = flags(argv);
    if (values.help || positionals.length === 0) {
      (positionals.length === 0 && !values.help ? io.stderr : io.stdout)(USAGE);
      return values.help ? 0 : 2;
    }
    const [command, target, ...extra] = positionals;
    if (extra.length > 0)
      throw new ConfigError(`unexpected argument ${JSON.stringify(extra[0])}; see vime-swe --help`);
    if (command === 'validate') return await validate(target, values, io);
    if (command === 'offline') return await offline(target, values.docker === true, io);
    throw new ConfigError(
      `unknown command ${JSON.stringify(command)}: use validate or offline; see vime-swe --help`,
    );
  } catch (error) {
    if (io.signal?.aborted) return 130;
    if (ConfigError.isInstance(error) || VimeError.isInstance(error)) {
      io.stderr(`vime-swe: ${(error as Error).message}\n`);
      return ConfigError.isInstance(error) || (error as VimeError).code === 'validation_error' ? 2 : 1;
    }
    throw error;
  }
}

async function validate(
  dataset: string | undefined,
  values: {
    sandbox?: string | undefined;
    concurrency?: string | undefined;
    timeout?: string | undefined;
    json?: string | undefined;
  },
  io: CliIo,
): Promise<number> {
  if (!dataset) throw new ConfigError('validate needs the dataset file: vime-swe validate rows.jsonl');
  // Flags first: a typo in one is reported even when the file is also wrong.
  const kind = (values.sandbox ?? 'bubblewrap') as SandboxKind;
  const provider = providerFor(kind);
  const concurrency = values.concurrency === undefined ? 2 : Number(values.concurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new ConfigError(
      `--concurrency expects a positive whole number, got ${JSON.stringify(values.concurrency)}`,
    );
  }
  const timeoutMs = values.timeout === undefined ? undefined : parseDuration(values.timeout, '--timeout');
  const path = resolve(io.cwd, dataset);
  if (!existsSync(path))
    throw new ConfigError(`${dataset} does not exist; give a SWE-smith .jsonl or .parquet file`);
  const load = path.endsWith('.parquet') ? loadParquet : loadJsonl;
  const { rows, issues } = await load(path, { onInvalid: 'skip' });
  for (const issue of issues) io.stderr(`${dataset}: row ${issue.row}: ${issue.message} (left out)\n`);
  if (rows.length === 0) throw new ConfigError(`${dataset}: no valid SWE-smith rows`);
  const tasks = rows.map((row) => rowToTask(row));
  const environments = await SweEnvironments.forDataset(path);
  const pools = new SwePools(provider, tasks, { kind, environments, maxLivePerPool: concurrency * 2 + 2 });
  try {
    const report = await validateDataset(tasks, pools, {
      concurrency,
      timeoutMs,
      signal: io.signal,
      onRow: (v, done, total) => {
        io.stderr(`[${done}/${total}] ${v.instanceId}: ${v.valid ? 'ok' : `FAILED — ${v.reason}`}\n`);
      },
    });
    if (values.json)
      await writeFile(resolve(io.cwd, values.json), `${JSON.stringify(report.verdicts, null, 2)}\n`);
    io.stdout(
      `${report.valid.length} of ${tasks.length} rows pass the baseline (unchanged fails F2P, gold resolves)\n`,
    );
    for (const v of report.invalid) io.stdout(`excluded ${v.instanceId}: ${v.reason}\n`);
    return report.invalid.length === 0 ? 0 : 1;
  } finally {
    await pools.close();
  }
}

async function offline(dir: string | undefined, docker: boolean, io: CliIo): Promise<number> {
  if (!dir) throw new ConfigError('offline needs an output folder: vime-swe offline ./offline-tasks');
  const set = await buildOfflineTaskSet({ dir: resolve(io.cwd, dir), signal: io.signal });
  io.stdout(
    `${set.rows.length} instances (${set.built ? 'built' : 'up to date'}):\n  ${set.jsonlPath}\n  ${set.parquetPath}\n  ${set.environmentsPath}\n`,
  );
  if (docker) {
    const engine = new DockerEngine();
    try {
      io.stdout(`image ${await buildOfflineDockerImage(engine, set, { signal: io.signal })}\n`);
    } finally {
      await engine.close();
    }
  }
  return 0;
}
