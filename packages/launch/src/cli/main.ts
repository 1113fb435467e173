/**
 * The `vime` command line. `main` takes argv and an IO object and returns the exit code, so tests run
 * it in-process; `src/cli.ts` binds it to the real process. Each subcommand lives in `commands/`.
 */
import { ConfigError, VimeError } from '@vime/core';
import { closest } from '@vime/core/utils';
import { RayJobFailedError } from '../ray/client.js';
import { type CliIo, type Command, EXIT } from './command.js';
import { launchCheckCommand } from './commands/check.js';
import { enginesWaitCommand } from './commands/engines.js';
import { planCommand } from './commands/plan.js';
import { rayLogsCommand, rayStatusCommand, rayStopCommand, raySubmitCommand } from './commands/ray.js';
import { renderCommand } from './commands/render.js';
import { slimeArgsCommand } from './commands/slime.js';
import { validateCommand } from './commands/validate.js';

export { type CliIo, EXIT } from './command.js';

const COMMANDS: readonly Command[] = [
  planCommand,
  renderCommand,
  validateCommand,
  launchCheckCommand,
  slimeArgsCommand,
  raySubmitCommand,
  rayStatusCommand,
  rayLogsCommand,
  rayStopCommand,
  enginesWaitCommand,
];
/** First words that take a second one (`skypilot render`). */
const GROUPS = new Set(COMMANDS.filter((c) => c.name.includes(' ')).map((c) => c.name.split(' ')[0]!));

const HELP = `vime: launch agentic RL runs (SkyPilot Job Groups, slime, Ray Jobs)

Usage: vime <command> [options]

Commands:
${COMMANDS.map((c) => `  ${c.synopsis.padEnd(23)}  ${c.summary}`).join('\n')}

Run \`vime <command> --help\` for a command's options.

Exit codes:
  0    success
  1    the operation failed (job FAILED/STOPPED, engines not healthy, HTTP or connection error)
  2    invalid usage or configuration (unknown flag, bad value, unreadable file, combination slime rejects)
  3    checks found problems (preflight, YAML validation, launch check)
  130  interrupted`;

const isHelp = (arg: string) => arg === '--help' || arg === '-h';

async function run(argv: string[], io: CliIo): Promise<number> {
  const [first, second] = argv;
  if (!first || isHelp(first) || first === 'help') {
    io.stdout(`${HELP}\n`);
    return first ? EXIT.ok : EXIT.usage;
  }
  const grouped = GROUPS.has(first);
  const name = grouped ? `${first} ${second ?? ''}`.trim() : first;
  const command = COMMANDS.find((c) => c.name === name);
  if (!command) {
    const hint = closest(
      name,
      COMMANDS.map((c) => c.name),
    );
    throw new ConfigError(
      `unknown command "${name}"${hint ? ` (did you mean "${hint}"?)` : ''}; commands: ${COMMANDS.map((c) => c.name).join(', ')}`,
    );
  }
  const args = argv.slice(grouped ? 2 : 1);
  const end = args.indexOf('--');
  if ((end < 0 ? args : args.slice(0, end)).some(isHelp)) {
    io.stdout(`${command.help}\n`);
    return EXIT.ok;
  }
  return command.run(args, io);
}

/** A Node system error (`ENOSPC`, `ECONNRESET`): a failure to report, not a bug to trace. */
const isSystemError = (error: unknown): error is NodeJS.ErrnoException =>
  error instanceof Error && typeof (error as NodeJS.ErrnoException).code === 'string' && 'syscall' in error;

/** Run the CLI; never throws. A stack trace is printed only for a bug, never for a user's error. */
export async function main(argv: string[], io: CliIo): Promise<number> {
  try {
    return await run(argv, io);
  } catch (error) {
    if (io.signal?.aborted) {
      io.stderr('interrupted\n');
      return EXIT.interrupted;
    }
    if (error instanceof RayJobFailedError) {
      io.stderr(`${error.message}\n`);
      return EXIT.failed;
    }
    if (VimeError.isInstance(error)) {
      io.stderr(`vime: ${error.message}\n`);
      return error.code === 'invalid_config' || error.code === 'validation_error' ? EXIT.usage : EXIT.failed;
    }
    if (isSystemError(error)) {
      io.stderr(`vime: ${error.message}\n`);
      return EXIT.failed;
    }
    io.stderr(`vime: internal error (please report it): ${(error as Error).stack ?? String(error)}\n`);
    return EXIT.failed;
  }
}
