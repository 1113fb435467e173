#!/usr/bin/env node
/** `vime-closed-loop <phase> [flags]`: the closed RL loop from the command line. See `--help`. */
import { setMaxListeners } from 'node:events';
import { runEntry } from '@vime/loop';
import { parseCli, runPhase, usage } from './command.js';

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  const parsed = parseCli(argv, (line) => console.log(line));
  if (parsed === 'help') {
    console.log(usage);
    return 0;
  }
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  process.once('SIGINT', () => controller.abort(new Error('interrupted')));
  process.once('SIGTERM', () => controller.abort(new Error('terminated')));
  const options = { ...parsed.options, signal: controller.signal };
  await runPhase(parsed.phase, options, parsed.model, parsed.name, ['vime-closed-loop', ...argv]);
  return 0;
}

await runEntry('vime-closed-loop', main);
