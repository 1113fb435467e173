/**
 * `--task-draw fresh` through the loop's command line, with its stand-in engine (a scripted policy, not a
 * model) on the offline task set: every prompt group of the run gets a different task, each step's draw is
 * recorded and is what the step's batch holds, and a run that needs more tasks than the set has is
 * refused before it starts.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeSamples } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOOP_CLI, runScript } from '../__fixtures__/run-command.js';

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-task-draw-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

const common = ['--samples', '1', '--concurrency', '4', '--no-validate', '--quiet'];

describe('--task-draw fresh', () => {
  it('gives every prompt group of the run a different task and records each step’s draw', {
    timeout: 320_000,
  }, async () => {
    const out = join(tmp, 'fresh');
    const run = await runScript(
      LOOP_CLI,
      [
        '--out',
        out,
        '--steps',
        '3',
        '--prompts',
        '4',
        '--task-draw',
        'fresh',
        '--task-draw-seed',
        '2',
        ...common,
      ],
      { timeoutMs: 300_000 },
    );
    expect(run.code, run.stderr.slice(-3000)).toBe(0);
    const drawn: string[] = [];
    for (const step of [1, 2, 3]) {
      const draw = JSON.parse(await readFile(join(out, 'draws', `${step}.json`), 'utf8'));
      expect(draw).toMatchObject({ step, draw: 'fresh', seed: 2 });
      expect(draw.instanceIds).toHaveLength(4);
      const rows = decodeSamples(await readFile(join(out, 'steps', `${step}.msgpack`)));
      expect(new Set(rows.map((r) => String(r.metadata.instance_id)))).toEqual(new Set(draw.instanceIds));
      drawn.push(...draw.instanceIds);
    }
    expect(new Set(drawn).size).toBe(12);
  });

  it('refuses a run that needs more tasks than the set has, before anything starts (exit 2)', {
    timeout: 320_000,
  }, async () => {
    const out = join(tmp, 'too-many');
    const run = await runScript(
      LOOP_CLI,
      ['--out', out, '--steps', '12', '--prompts', '4', '--task-draw', 'fresh', ...common],
      { timeoutMs: 300_000 },
    );
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(
      /--task-draw fresh: 12 steps x 4 prompts need 48 distinct tasks, the dataset has \d+/,
    );
    expect(run.stderr).not.toMatch(/\n\s+at /);
    expect(existsSync(join(out, 'steps'))).toBe(false);
  });
});
