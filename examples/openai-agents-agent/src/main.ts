#!/usr/bin/env node
/**
 * `openai-agents-agent [--out DIR] [--tasks N] [--group-size N] [--engine-url URL]`: one training step of an OpenAI
 * Agents SDK coding agent on the offline SWE tasks; prints each rollout's reward, the batch and its token audit.
 */
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTracingDisabled } from '@openai/agents';
import { ConfigError, decodeSamples } from '@vime/core';
import { type CliIo, EXIT, parseFlags, runCli } from '@vime/core/utils';
import type { TrainerHook } from '@vime/loop';
import type { AgentsApi } from '@vime/openai-agents';
import { runExample } from './run.js';

const usage = `openai-agents-agent: one training step of an OpenAI Agents SDK coding agent on the offline SWE tasks

  --out DIR          run folder (default: a new temporary folder)
  --tasks N          tasks of the step (default 1)
  --group-size N     rollouts per task (default 2)
  --api API         chat-completions (default) or responses: the wire the agent speaks
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

function apiOf(value: string | undefined): AgentsApi | undefined {
  if (value === undefined || value === 'chat-completions' || value === 'responses') return value;
  throw new ConfigError(
    `--api: ${JSON.stringify(value)} is not one of chat-completions, responses; pass one of them`,
  );
}

async function main(argv: string[], io: CliIo): Promise<number> {
  const { values } = parseFlags(
    'openai-agents-agent',
    argv,
    {
      out: { type: 'string' },
      tasks: { type: 'string' },
      'group-size': { type: 'string' },
      'engine-url': { type: 'string' },
      api: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    { maxPositionals: 0 },
  );
  if (values.help) {
    io.stdout(`${usage}\n`);
    return EXIT.ok;
  }
  // No trace export: the run reaches only its own engine.
  setTracingDisabled(true);
  const log = (line: string) => io.stdout(`${line}\n`);
  const run = await runExample({
    out: values.out ? resolve(io.cwd, values.out) : await mkdtemp(join(tmpdir(), 'openai-agents-agent-')),
    tasks: count('tasks', values.tasks, 1),
    groupSize: count('group-size', values['group-size'], 2),
    engineUrl: values['engine-url'],
    api: apiOf(values.api),
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

await runCli('openai-agents-agent', main);
