/**
 * The AI SDK coding agent trained end to end: a `ToolLoopAgent` (the real `ai` package at its pinned
 * version) fixes offline SWE tasks in bubblewrap sandboxes through the capture proxy, in front of the
 * stand-in engine replaying a scripted fix (a stand-in, not a model). Every rollout is graded 1 in a fresh
 * sandbox, the step's batch reaches the trainer hook, and every row passes the token audit against the
 * turns the engine sampled.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { decodeSamples, isScored } from '@vime/core';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { type ExampleRun, runExample } from '../src/run.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Where the test run's global setup built the offline task set. */
    offlineTasksDir: string;
  }
}

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'vime-ai-sdk-agent-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

it('trains the AI SDK agent: reward 1 on every rollout, the batch handed off, the token audit passes', async () => {
  const handed: Array<{ step: number; rows: number }> = [];
  const run: ExampleRun = await runExample({
    out,
    tasksDir: inject('offlineTasksDir'),
    tasks: 2,
    groupSize: 2,
    trainer: async ({ step, batchPath }) => {
      handed.push({ step, rows: decodeSamples(await readFile(batchPath)).length });
      return { weightVersion: 'w1', trainSeconds: 0, weightUpdateSeconds: 0, metrics: {} };
    },
  });
  expect(run.engine).toMatch(/stand-in/);
  expect(run.results).toHaveLength(4);
  for (const r of run.results) {
    if (!isScored(r))
      throw new Error(`rollout ${r.taskId} #${r.sampleIndex} ${r.status}: ${r.error.message}`);
    expect(r.reward).toBe(1);
    expect(r.samples).toHaveLength(1);
    const meta = r.samples[0]!.metadata;
    expect(meta).toMatchObject({ agent: 'ai-sdk', exit_status: 'Submitted', finish_reason: 'stop' });
    // Three model calls: look, fix, answer; two of them tool calls that ran in the sandbox.
    expect(meta.trajectory_turns).toEqual([0, 1, 2]);
    expect(meta.drift).toEqual({ forks: 0, realigns: 0, retokenizedTokens: 0 });
  }
  expect(run.turns).toHaveLength(12);
  expect(handed).toEqual([{ step: 1, rows: 4 }]);
  expect(run.audit.problems).toEqual([]);
  expect(run.audit.verdict).toBe('pass');
  expect(run.audit.turns).toMatchObject({ captured: 12, matched: 12, untrained: [] });
  expect(run.audit.totals.trainedTokens).toBe(run.turns.reduce((n, t) => n + t.output_ids.length, 0));
}, 600_000);

it('the CLI: a bad flag value is named with its fix, exit 2, no stack trace', async () => {
  const dir = fileURLToPath(new URL('..', import.meta.url));
  const error = await promisify(execFile)(
    process.execPath,
    ['--import', 'tsx', '--conditions=@vime/source', 'src/main.ts', '--tasks', 'many'],
    { cwd: dir, timeout: 60_000 },
  ).then(
    () => undefined,
    (e: { code?: number; stderr?: string }) => e,
  );
  expect(error?.code).toBe(2);
  expect(error?.stderr).toMatch(/--tasks: "many" is not a whole number >= 1; pass e\.g\. --tasks 2/);
  expect(error?.stderr).not.toMatch(/\n\s+at /);
}, 90_000);
