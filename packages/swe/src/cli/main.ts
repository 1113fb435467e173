/**
 * `vime-swe`: `validate DATASET` grades the unchanged repository and the gold patch of every row in fresh
 * sandboxes and lists the rows that fail the baseline; `offline DIR` builds and publishes the offline task
 * set (with `--docker`, its Docker image too). `main` takes argv and an IO object and returns the exit
 * code, so tests run it in-process; `src/cli.ts` binds it to the process.
 */
import { writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { ConfigError } from '@vime/core';
import {
  type CliIo,
  type CliProgram,
  type Command,
  EXIT,
  finiteNumber,
  oneOf,
  parseDuration,
  parseFlags,
  pathError,
  positiveInt,
  runCli,
  runProgram,
  UsageError,
} from '@vime/core/utils';
import { DockerEngine, providerFor } from '@vime/sandbox';
import { rowToTask } from '../dataset.js';
import { DatasetError, type DatasetProblem, loadDataset } from '../dataset-file.js';
import { type SandboxKind, SweEnvironments } from '../environment.js';
import { buildOfflineTaskSet } from '../offline/build.js';
import { OPERATOR_FAMILIES } from '../offline/procedural.js';
import { buildProceduralTaskSet } from '../offline/procedural-build.js';
import { buildOfflineDockerImage } from '../offline/publish.js';
import { SwePools } from '../pools.js';
import { validateDataset } from '../validate.js';

const SANDBOXES: readonly SandboxKind[] = ['bubblewrap', 'docker', 'local'];

const VALIDATE_FLAGS = {
  sandbox: { type: 'string' },
  concurrency: { type: 'string' },
  timeout: { type: 'string' },
  json: { type: 'string' },
} as const;

const validateCommand: Command = {
  name: 'validate',
  synopsis: 'validate DATASET',
  summary: 'grade the unchanged repository and the gold patch of every row; list the rows that fail',
  help: `Usage: vime-swe validate DATASET [--sandbox KIND] [--concurrency N] [--timeout DURATION] [--json FILE]

Grade the unchanged repository and the gold patch of every row of DATASET (a SWE-smith .jsonl or
.parquet file), each in a fresh sandbox: unchanged must fail its FAIL_TO_PASS tests, gold must resolve.
Lists the rows that do not, with the reason. Exits 3 when some rows fail the baseline.

  --sandbox KIND       bubblewrap (default), docker or local
  --concurrency N      rows graded at once (default 2)
  --timeout DURATION   test run timeout per grade (default 900s)
  --json FILE          write the verdicts as JSON`,
  async run(args, io) {
    const { values, positionals } = parseFlags('vime-swe validate', args, VALIDATE_FLAGS, {
      maxPositionals: 1,
    });
    return validate(positionals[0], values, io);
  },
};

const offlineCommand: Command = {
  name: 'offline',
  synopsis: 'offline DIR',
  summary: 'build and publish the offline task set in DIR',
  help: `Usage: vime-swe offline DIR [--docker]

Build and publish the offline task set in DIR (instances.jsonl, instances.parquet, environments.json
and the repository mirror).

  --docker   also build the set's Docker image (needs a Docker engine: DOCKER_HOST)`,
  async run(args, io) {
    const { values, positionals } = parseFlags(
      'vime-swe offline',
      args,
      { docker: { type: 'boolean' } },
      { maxPositionals: 1 },
    );
    return offline(positionals[0], values.docker === true, io);
  },
};

const proceduralCommand: Command = {
  name: 'procedural',
  synopsis: 'procedural DIR',
  summary: 'generate the procedural task family (small repositories, one bug each) in DIR',
  help: `Usage: vime-swe procedural DIR [--per-family N] [--seed N] [--heldout-family NAME|none]
                                [--heldout-fraction X] [--concurrency N] [--force]

Generate the procedural task family in DIR: small Python repositories, each with one bug injected by one
operator family (${OPERATOR_FAMILIES.join(', ')}), validated with
pytest (the unchanged repository fails its FAIL_TO_PASS tests, the fix passes every test). Writes
instances.jsonl and instances.parquet (every row; each row's "split" is train, heldout or heldout_family),
train.jsonl, heldout.jsonl and heldout_family.jsonl, environments.json with one repository mirror per
row under environments/, and manifest.json (each instance's family, split and operator).

  --per-family N          instances per operator family (default 20)
  --seed N                seed of every choice: repositories, bugs, splits (default 1)
  --heldout-family NAME   the family held out entirely (default off_by_one; none: no family)
  --heldout-fraction X    share of the other families' instances held out (default 0.2)
  --concurrency N         pytest validation workers (default 2; the output does not depend on it)
  --force                 generate again even when DIR holds a set made with the same options`,
  async run(args, io) {
    const { values, positionals } = parseFlags(
      'vime-swe procedural',
      args,
      {
        'per-family': { type: 'string' },
        seed: { type: 'string' },
        'heldout-family': { type: 'string' },
        'heldout-fraction': { type: 'string' },
        concurrency: { type: 'string' },
        force: { type: 'boolean' },
      },
      { maxPositionals: 1 },
    );
    return procedural(positionals[0], values, io);
  },
};

export const SWE: CliProgram = {
  name: 'vime-swe',
  summary: 'validate SWE-smith datasets, build the offline task set and generate the procedural family',
  commands: [validateCommand, offlineCommand, proceduralCommand],
  exitCodes: [
    [0, 'every row passed the baseline (validate), or done'],
    [1, 'the work failed (a sandbox, the disk, the Docker engine)'],
    [2, 'bad input: an unknown flag or command, a bad value, a missing or malformed dataset'],
    [3, 'some rows failed the baseline (validate)'],
  ],
};

/** Run `vime-swe` with `argv`; never throws. A stack trace is printed only for a bug. */
export function main(argv: string[], io: CliIo): Promise<number> {
  return runCli('vime-swe', (args, cliIo) => runProgram(SWE, args, cliIo), { argv, io });
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
  if (!dataset) throw new UsageError('validate needs the dataset file: vime-swe validate rows.jsonl');
  // Flags first: a typo in one is reported even when the file is also wrong.
  const kind = oneOf(values.sandbox, '--sandbox', SANDBOXES) ?? 'bubblewrap';
  const provider = providerFor(kind);
  const concurrency = positiveInt(values.concurrency, '--concurrency') ?? 2;
  const timeoutMs = values.timeout === undefined ? undefined : parseDuration(values.timeout, '--timeout');
  const path = resolve(io.cwd, dataset);
  const { rows, issues } = await loadDataset(path, { onInvalid: 'skip', shown: dataset });
  if (issues.length > 0) {
    // Every problem of the file at once, before anything is graded: one fix-up pass, not one per run.
    const problems = issues.map((i) => ({ ...i, file: dataset }));
    io.stdout(`${problemTable(problems)}\n`);
    throw new DatasetError(problems, { more: 'the table above lists every one; nothing was graded' });
  }
  if (rows.length === 0) throw new ConfigError(`${dataset}: no SWE-smith rows; write one row per line`);
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
    const json = values.json;
    if (json !== undefined) {
      await writeFile(resolve(io.cwd, json), `${JSON.stringify(report.verdicts, null, 2)}\n`).catch(
        (error: unknown) => {
          throw pathError(error, '--json', json, 'write the verdicts there');
        },
      );
    }
    io.stdout(
      `${report.valid.length} of ${tasks.length} rows pass the baseline (unchanged fails F2P, gold resolves)\n`,
    );
    for (const v of report.invalid) io.stdout(`excluded ${v.instanceId}: ${v.reason}\n`);
    return report.invalid.length === 0 ? EXIT.ok : EXIT.checks;
  } finally {
    await pools.close();
  }
}

/** The problems of a dataset file as a table: row, instance, column, problem, fix. */
export function problemTable(problems: readonly DatasetProblem[]): string {
  const rows = problems.map((p) => [
    p.row === undefined ? '-' : String(p.row),
    p.instanceId ?? '-',
    p.field ?? p.column ?? '-',
    p.message,
    p.fix,
  ]);
  const header = ['row', 'instance', 'column', 'problem', 'fix'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [
    `${problems[0]?.file ?? 'dataset'}: ${problems.length} problem${problems.length === 1 ? '' : 's'}`,
    line(header),
    ...rows.map(line),
  ].join('\n');
}

async function offline(dir: string | undefined, docker: boolean, io: CliIo): Promise<number> {
  if (!dir) throw new UsageError('offline needs an output folder: vime-swe offline ./offline-tasks');
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
  return EXIT.ok;
}

async function procedural(
  dir: string | undefined,
  values: {
    'per-family'?: string | undefined;
    seed?: string | undefined;
    'heldout-family'?: string | undefined;
    'heldout-fraction'?: string | undefined;
    concurrency?: string | undefined;
    force?: boolean | undefined;
  },
  io: CliIo,
): Promise<number> {
  if (!dir) throw new UsageError('procedural needs an output folder: vime-swe procedural ./procedural-tasks');
  const perFamily = positiveInt(values['per-family'], '--per-family');
  const seed = values.seed === undefined ? undefined : Number(values.seed);
  if (seed !== undefined && (values.seed!.trim() === '' || !Number.isInteger(seed)))
    throw new UsageError(`--seed expects a whole number, got ${JSON.stringify(values.seed)}`);
  const family = values['heldout-family'];
  const heldoutFamily =
    family === 'none' ? null : oneOf(family, '--heldout-family', [...OPERATOR_FAMILIES, 'none'] as const);
  const heldoutFraction = finiteNumber(values['heldout-fraction'], '--heldout-fraction', 0);
  if (heldoutFraction !== undefined && heldoutFraction >= 1)
    throw new UsageError(
      `--heldout-fraction expects a number from 0 up to (not including) 1, got ${JSON.stringify(values['heldout-fraction'])}`,
    );
  const set = await buildProceduralTaskSet({
    dir: resolve(io.cwd, dir),
    perFamily,
    seed,
    heldoutFamily: heldoutFamily as (typeof OPERATOR_FAMILIES)[number] | null | undefined,
    heldoutFraction,
    concurrency: positiveInt(values.concurrency, '--concurrency'),
    force: values.force,
    signal: io.signal,
    onProgress: ({ kept, tried, target }) => io.stderr(`${kept}/${target} kept (${tried} tried)\n`),
  });
  const bySplit = (split: string) => set.rows.filter((r) => r.split === split).length;
  io.stdout(
    `${set.rows.length} instances (${set.built ? 'built' : 'up to date'}): ${bySplit('train')} train, ${bySplit('heldout')} heldout, ${bySplit('heldout_family')} heldout_family (${set.heldoutFamily ?? 'no family held out'})\n  ${set.jsonlPath}\n  ${Object.values(set.splitPaths).join('\n  ')}\n  ${set.environmentsPath}\n`,
  );
  return EXIT.ok;
}
