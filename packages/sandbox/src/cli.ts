#!/usr/bin/env node
/**
 * `vime-sandbox reap`: remove sandboxes (folders, processes, cgroups, containers) that crashed runs left.
 */
import { existsSync } from 'node:fs';
import {
  type CliIo,
  type CliProgram,
  type Command,
  EXIT,
  parseDuration,
  parseFlags,
  runCli,
  runProgram,
  UsageError,
} from '@vime/core/utils';
import { defaultDockerSocket } from './docker/engine-api.js';
import { type ReapOptions, reapOrphans } from './reap.js';

const HELP = `Usage: vime-sandbox reap [--run ID] [--older-than DURATION] [options]

Removes sandboxes left behind by runs that crashed: host sandbox folders with their processes,
cgroups and mounts, and Docker containers. At least one of --run and --older-than is required.
Sandboxes whose creating process is still running are kept unless --include-live is given.

  --run ID               only sandboxes labelled vime.run=ID
  --older-than DURATION  only sandboxes older than DURATION (e.g. 90s, 30m, 6h, 2d)
  --include-live         also remove sandboxes of runs that are still running
  --root DIR             host sandbox state folder (default: <tmpdir>/vime-sandboxes)
  --docker-socket PATH   Docker/Podman socket to sweep (default: DOCKER_HOST or /var/run/docker.sock)
  --no-docker            do not sweep containers
  --dry-run              list what would be removed
  --json                 print the report as JSON
  -h, --help             show this help

Exit codes: 0 done, 1 some sandboxes could not be removed, 2 invalid usage, 130 interrupted.`;

const REAP_FLAGS = {
  run: { type: 'string' },
  'older-than': { type: 'string' },
  'include-live': { type: 'boolean', default: false },
  root: { type: 'string' },
  'docker-socket': { type: 'string' },
  'no-docker': { type: 'boolean', default: false },
  'dry-run': { type: 'boolean', default: false },
  json: { type: 'boolean', default: false },
} as const;

const reapCommand: Command = {
  name: 'reap',
  summary: 'remove sandboxes that crashed runs left',
  help: HELP,
  run: reap,
};

const SANDBOX: CliProgram = {
  name: 'vime-sandbox',
  summary: 'manage the sandboxes of Vime runs',
  commands: [reapCommand],
};

/** A Ctrl-C stops the sweep between sandboxes; what was removed stays removed. */
async function reap(args: string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('vime-sandbox reap', args, REAP_FLAGS, { maxPositionals: 0 });
  if (values.run === '') throw new UsageError('--run needs a run id (the vime.run label of the sandboxes)');
  const socket = values['docker-socket'];
  if (socket !== undefined && !values['no-docker'] && !existsSync(socket)) {
    throw new UsageError(
      `--docker-socket ${socket}: no such socket; start the engine, fix the path, or pass --no-docker`,
    );
  }
  const options: ReapOptions = {
    includeLive: values['include-live'],
    dryRun: values['dry-run'],
    docker: values['no-docker'] ? false : (socket ?? defaultDockerSocket()),
  };
  if (io.signal) options.signal = io.signal;
  if (values.run !== undefined) options.run = values.run;
  if (values['older-than'] !== undefined)
    options.olderThanMs = parseDuration(values['older-than'], '--older-than');
  if (values.root !== undefined) options.rootDir = values.root;
  // The default socket is swept only where an engine runs; a socket named with --docker-socket must exist.
  if (options.docker && !existsSync(options.docker as string)) options.docker = false;
  const report = await reapOrphans(options);
  if (values.json) {
    io.stdout(
      `${JSON.stringify({ ...report, errors: report.errors.map((e) => ({ id: e.id, error: String(e.error) })) }, null, 2)}\n`,
    );
  } else {
    const verb = values['dry-run'] ? 'would remove' : 'removed';
    for (const s of report.removed) {
      const why = s.reason.split(', ').filter((r) => !r.startsWith('run '));
      io.stdout(
        `${verb} ${s.provider} ${s.id} (run ${s.labels['vime.run'] ?? '?'}${why.length ? `; ${why.join(', ')}` : ''})\n`,
      );
    }
    for (const e of report.errors) io.stderr(`failed ${e.id}: ${String(e.error)}\n`);
    io.stdout(
      `${verb} ${report.removed.length}, kept ${report.skippedLive} of live runs, ${report.errors.length} errors\n`,
    );
  }
  return report.errors.length > 0 ? EXIT.failed : EXIT.ok;
}

await runCli('vime-sandbox', (argv, io) => runProgram(SANDBOX, argv, io));
