/**
 * `vime-loop [flags]`: the coding-agent RL loop as a CLI. See `--help`.
 */
import { setMaxListeners } from 'node:events';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { VimeError } from '@vime/core';
import { type CliIo, EXIT } from '@vime/core/utils';
import type { LoopAgent } from '../agents.js';
import { usage } from '../config/flags.js';
import { resolveConfig } from '../config/resolve.js';
import { defaultRunFolder } from '../defaults.js';
import { type RunSummary, runLoop, type TrainerHook } from '../loop.js';
import { summaryText } from './summary.js';

/**
 * Run the loop as its CLI does: `--config`, env vars and flags into a config (or the run's own for
 * `--resume`), a stop by SIGINT/SIGTERM (`io.signal`) that keeps every finished step, the summary on
 * stdout. Returns the exit code. `options`: your own agent for every sample and a trainer hook, for a
 * program of yours that is this CLI with them (`runCli('my-agent', (argv, io) => loopMain(argv, io, { agent }))`).
 */
export async function loopMain(
  argv: string[],
  io: CliIo,
  options: { agent?: LoopAgent | undefined; trainer?: TrainerHook | undefined } = {},
): Promise<number> {
  const resolved = resolveConfig(argv, io.env, { cwd: io.cwd });
  if (resolved === 'help') {
    io.stdout(`${usage}\n`);
    return EXIT.ok;
  }
  const { sources } = resolved;
  // The run folder is named here, so a stop by signal can say where its finished steps are.
  const out = resolve(io.cwd, resolved.config.out ?? defaultRunFolder());
  const config = { ...resolved.config, out };
  // Every rollout and queue read listens to this one signal.
  if (io.signal) setMaxListeners(0, io.signal);
  let summary: RunSummary;
  try {
    const log = (l: string) => io.stdout(`${l}\n`);
    summary = await runLoop(config, { log, signal: io.signal, sources, ...options });
  } catch (error) {
    throw io.signal?.aborted ? stopped(io.signal.reason, out) : error;
  }
  io.stdout(`${summaryText(summary)}\n`);
  const scored = summary.overall.rollouts.completed + summary.overall.rollouts.truncated;
  if (scored === 0 && summary.overall.rollouts.total > 0) {
    io.stderr(
      '\nno rollout completed: every rollout failed (see the causes above); the batches carry no rows\n',
    );
    return EXIT.failed;
  }
  return EXIT.ok;
}

/** A stop is no crash: one line, where the finished work is, and the shell's exit code for the signal. */
function stopped(reason: unknown, out: string): VimeError {
  const kept = existsSync(join(out, 'config.json'))
    ? `; its finished steps and rollouts are kept in ${out}: \`--resume ${out}\` goes on from there`
    : '; the run had not started, and left nothing behind';
  const stop = VimeError.isInstance(reason) ? reason : undefined;
  return new VimeError('aborted', `${stop?.message ?? 'stopped'}${kept}`, { data: stop?.data ?? {} });
}
