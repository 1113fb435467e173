#!/usr/bin/env node
/** `vime-closed-loop <phase> [flags]`: the closed RL loop from the command line. See `--help`. */
import { setMaxListeners } from 'node:events';
import { type CliIo, EXIT, runCli } from '@vime/core/utils';
import { parseCli, runPhase, usage } from './command.js';

async function main(argv: string[], io: CliIo): Promise<number> {
  const parsed = parseCli(argv, (line) => io.stdout(`${line}\n`));
  if (parsed === 'help') {
    io.stdout(`${usage}\n`);
    return EXIT.ok;
  }
  if (io.signal) setMaxListeners(0, io.signal);
  const options = { ...parsed.options, signal: io.signal };
  await runPhase(
    parsed.phase,
    options,
    parsed.model,
    parsed.name,
    ['vime-closed-loop', ...argv],
    parsed.evalEvery,
  );
  return EXIT.ok;
}

await runCli('vime-closed-loop', main);
