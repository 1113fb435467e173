#!/usr/bin/env node
/**
 * `ai-sdk-agent [--out DIR] [--tasks N] [--group-size N] [--engine-url URL]`: one training step of an AI
 * SDK coding agent on the offline SWE tasks; prints each rollout's reward, the batch and its token audit.
 */
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ConfigError, decodeSamples } from '@vime/core';
import { type CliIo, EXIT, parseFlags, runCli } from '@vime/core/utils';
import type { TrainerHook } from '@vime/loop';
import { runExample } from './run.js';

const usage = `ai-sdk-agent: one training step of an AI SDK coding agent on the offline SWE tasks

  --out DIR          run folder (default: a new temporary folder)
  --tasks N          tasks of the step (default 1)
  --group-size N     rollouts per task (default 2)
  --engine-url URL   an SGLang server; without it a scripted stand-in engine (not a model) answers`;

function count(flag: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) {
    throw new ConfigError(
      `--${flag}: ${JSON.stringify(value)} is not a whole number >= 1; pass e.g. --${flag} 2`,
    );
  }
  return n;
}

/** The trainer hook of this example: reads the batch back and reports it (no GPU trainer here). */
const readBackTrainer =
  (log: (line: string) => void): TrainerHook =>
  async ({ step, batchPath }) => {
    const rows = decodeSamples(await readFile(batchPath));
    log(`trainer hook: step ${step}, ${rows.length} rows from ${batchPath} (read back; no GPU trainer here)`);
    return { weightVersion: `step-${step}`, trainSeconds: 0, weightUpdateSeconds: 0, metrics: {} };
  };

async function main(argv: string[], io: CliIo): Promise<number> {
  const { values } = parseFlags(
    'ai-sdk-agent',
    argv,
    {
      out: { type: 'string' },
      tasks: { type: 'string' },
      'group-size': { type: 'string' },
      'engine-url': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    { maxPositionals: 0 },
  );
  if (values.help) {
    io.stdout(`${usage}\n`);
    return EXIT.ok;
  }
  const log = (line: string) => io.stdout(`${line}\n`);
  const run = await runExample({
    out: values.out ? resolve(io.cwd, values.out) : await mkdtemp(join(tmpdir(), 'ai-sdk-agent-')),
    tasks: count('tasks', values.tasks, 1),
    groupSize: count('group-size', values['group-size'], 2),
    engineUrl: values['engine-url'],
    trainer: readBackTrainer(log),
    signal: io.signal,
  });
  log(`engine: ${run.engine}`);
  for (const r of run.results) {
    const reward =
      r.status === 'completed' || r.status === 'truncated'
        ? `reward ${r.reward}`
        : `${r.status}: ${r.error.message}`;
    log(`${r.taskId} #${r.sampleIndex}: ${reward}`);
  }
  log(`batch: ${run.batchPath} (${run.rows.length} rows)`);
  log(
    `token audit: ${run.audit.verdict} (${run.audit.turns.matched}/${run.audit.turns.captured} turns matched)`,
  );
  return run.audit.verdict === 'pass' ? EXIT.ok : EXIT.checks;
}

await runCli('ai-sdk-agent', main);
