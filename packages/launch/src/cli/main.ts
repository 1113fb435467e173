/**
 * The `vime` command line. `main` takes argv and an IO object and returns the exit code, so tests run
 * it in-process; `src/cli.ts` binds it to the real process. Each subcommand lives in `commands/`.
 */
import { type CliIo, type CliProgram, runCli, runProgram } from '@vime/core/utils';
import { launchCheckCommand } from './commands/check.js';
import { enginesWaitCommand } from './commands/engines.js';
import { planCommand } from './commands/plan.js';
import { rayLogsCommand, rayStatusCommand, rayStopCommand, raySubmitCommand } from './commands/ray.js';
import { renderCommand } from './commands/render.js';
import { slimeArgsCommand } from './commands/slime.js';
import { validateCommand } from './commands/validate.js';

export const VIME: CliProgram = {
  name: 'vime',
  summary: 'launch agentic RL runs (SkyPilot Job Groups, slime, Ray Jobs)',
  commands: [
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
  ],
  exitCodes: [
    [0, 'success'],
    [1, 'the operation failed (job FAILED/STOPPED, engines not healthy, HTTP or connection error)'],
    [
      2,
      'invalid usage or configuration (unknown flag, bad value, unreadable file, combination slime rejects)',
    ],
    [3, 'checks found problems (preflight, YAML validation, launch check)'],
    [130, 'interrupted (143: terminated)'],
  ],
};

/** Run `vime` with `argv`; never throws. A stack trace is printed only for a bug, never for a user's error. */
export function main(argv: string[], io: CliIo): Promise<number> {
  return runCli('vime', (args, cliIo) => runProgram(VIME, args, cliIo), { argv, io });
}
