#!/usr/bin/env node
/**
 * `vime-sandbox reap`: remove sandboxes (folders, processes, cgroups, containers) that crashed runs left.
 */
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { VimeError } from '@vime/core';
import { parseDuration } from '@vime/core/utils';
import { defaultDockerSocket } from './docker/engine-api.js';
import { type ReapOptions, reapOrphans } from './reap.js';

const USAGE = `Usage: vime-sandbox reap [--run ID] [--older-than DURATION] [options]

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

Exit codes: 0 done, 1 some sandboxes could not be removed, 2 invalid usage.
`;

/** A user's mistake: printed without a stack, exit 2. */
class UsageError extends Error {}

function parseFlags(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        run: { type: 'string' },
        'older-than': { type: 'string' },
        'include-live': { type: 'boolean', default: false },
        root: { type: 'string' },
        'docker-socket': { type: 'string' },
        'no-docker': { type: 'boolean', default: false },
        'dry-run': { type: 'boolean', default: false },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (cause) {
    let message = (cause as Error).message.split('\n')[0]!.replace(/\. To specify.*$/, '');
    const flag = /'(--[^' ]+)/.exec(message)?.[1];
    if (/ambiguous/.test(message) && flag)
      message = `${flag} needs a value; for a value that starts with a dash write ${flag}=VALUE`;
    throw new UsageError(`${message}; see vime-sandbox --help`);
  }
}

async function main(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(USAGE);
    return 0;
  }
  const { values, positionals } = parseFlags(argv);
  if (positionals[0] !== 'reap') {
    if (positionals.length === 0) {
      process.stderr.write(USAGE);
      return 2;
    }
    throw new UsageError(
      `unknown command ${JSON.stringify(positionals[0])}; the command is \`reap\` (see --help)`,
    );
  }
  if (positionals.length > 1) {
    throw new UsageError(
      `unexpected argument ${JSON.stringify(positionals[1])}; reap takes only flags (see --help)`,
    );
  }
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
  if (values.run !== undefined) options.run = values.run;
  if (values['older-than'] !== undefined)
    options.olderThanMs = parseDuration(values['older-than'], '--older-than');
  if (values.root !== undefined) options.rootDir = values.root;
  // The default socket is swept only where an engine runs; a socket named with --docker-socket must exist.
  if (options.docker && !existsSync(options.docker as string)) options.docker = false;
  const report = await reapOrphans(options);
  if (values.json) {
    process.stdout.write(
      `${JSON.stringify({ ...report, errors: report.errors.map((e) => ({ id: e.id, error: String(e.error) })) }, null, 2)}\n`,
    );
  } else {
    const verb = values['dry-run'] ? 'would remove' : 'removed';
    for (const s of report.removed) {
      const why = s.reason.split(', ').filter((r) => !r.startsWith('run '));
      process.stdout.write(
        `${verb} ${s.provider} ${s.id} (run ${s.labels['vime.run'] ?? '?'}${why.length ? `; ${why.join(', ')}` : ''})\n`,
      );
    }
    for (const e of report.errors) process.stderr.write(`failed ${e.id}: ${String(e.error)}\n`);
    process.stdout.write(
      `${verb} ${report.removed.length}, kept ${report.skippedLive} of live runs, ${report.errors.length} errors\n`,
    );
  }
  return report.errors.length > 0 ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error) => {
    const usage =
      error instanceof UsageError || (VimeError.isInstance(error) && error.code === 'invalid_config');
    process.stderr.write(`vime-sandbox: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(usage ? 2 : 1);
  },
);
