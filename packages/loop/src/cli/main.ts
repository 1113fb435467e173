/**
 * `vime-loop [flags]`: the coding-agent RL loop as a CLI. See `--help`.
 */
import { setMaxListeners } from 'node:events';
import { existsSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { join, resolve } from 'node:path';
import { VimeError } from '@vime/core';
import { parseConfig, usage } from '../config.js';
import { defaultRunFolder } from '../defaults.js';
import { type RunSummary, readConfigOf, runLoop } from '../loop.js';
import { summaryText } from './summary.js';

/**
 * Run the loop as its CLI does: flags and env vars into a config, `--resume`, a stop by SIGINT/SIGTERM that
 * keeps every finished step, the summary on stdout. Returns the exit code.
 */
export async function loopMain(argv: string[], env: Record<string, string | undefined>): Promise<number> {
  let config = parseConfig(argv, env);
  if (config === 'help') {
    console.log(usage);
    return 0;
  }
  if (config.resume)
    config = {
      ...(await readConfigOf(config.resume)),
      resume: config.resume,
      out: config.resume,
      quiet: config.quiet,
    };
  // The run folder is named here, so a stop by signal can say where its finished steps are.
  config = { ...config, out: resolve(config.out ?? defaultRunFolder()) };
  const out = config.out!;
  const controller = new AbortController();
  // Every rollout and queue read listens to this one signal.
  setMaxListeners(0, controller.signal);
  const stopped = new Map<AbortSignal['reason'], NodeJS.Signals>();
  for (const name of ['SIGINT', 'SIGTERM'] as const) {
    // A handler that stays: the sandboxes' own handler then leaves the exit to this program. A second
    // signal ends the process at once.
    process.on(name, () => {
      if (controller.signal.aborted) process.exit(128 + osConstants.signals[name]);
      const reason = new Error(`stopped by ${name}`);
      stopped.set(reason, name);
      controller.abort(reason);
    });
  }
  let summary: RunSummary;
  try {
    summary = await runLoop(config, { log: (l) => console.log(l), signal: controller.signal });
  } catch (error) {
    const signal = controller.signal.aborted ? stopped.get(controller.signal.reason) : undefined;
    if (!signal) throw error;
    // A stop is no crash: one line, where the finished work is, and the shell's exit code for the signal.
    const kept = existsSync(join(out, 'config.json'))
      ? `; its finished steps and rollouts are kept in ${out}: \`--resume ${out}\` goes on from there`
      : '; the run had not started, and left nothing behind';
    throw new VimeError('aborted', `stopped by ${signal}${kept}`, {
      data: { exitCode: 128 + osConstants.signals[signal] },
    });
  }
  console.log(summaryText(summary));
  const scored = summary.overall.rollouts.completed + summary.overall.rollouts.truncated;
  if (scored === 0 && summary.overall.rollouts.total > 0) {
    console.error(
      '\nno rollout completed: every rollout failed (see the causes above); the batches carry no rows',
    );
    return 1;
  }
  return 0;
}
