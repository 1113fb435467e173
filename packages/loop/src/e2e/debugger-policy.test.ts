/**
 * The scripted debugger (`--policy debugger`, a stand-in engine's script, not a model) through the loop's
 * real entry point on a small procedural task set (two instances per operator family, real git, pytest and
 * bubblewrap, graded in fresh sandboxes): on this seed's set it solves exactly the instances its heuristics
 * cover (a flipped comparison, `+`/`-` exchanged, an added `± 1`) and none of the others (a wrong constant,
 * swapped arguments, a missing branch, `*` turned into `+`), with no gold patch in its hands. The same run
 * is the shuffled-reward control (`--shuffle-rewards`): the batch's rewards are the earned ones permuted,
 * each row keeping what its rollout earned.
 */

import { chmodSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeSamples } from '@vime/core';
import { bugKindOf, buildProceduralTaskSet, type ProceduralInstance } from '@vime/swe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOOP_CLI, runScript } from '../__fixtures__/run-command.js';

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-debugger-'));
  chmodSync(tmp, 0o755);
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

/** What the debugger's heuristics can undo: a flipped comparison, `+`/`-` exchanged, an added `± 1`. */
function covered(i: ProceduralInstance): boolean {
  if (i.family === 'flip_comparison') return true;
  if (i.family === 'wrong_operator') return ['+', '-'].includes(i.site.before);
  if (i.family === 'off_by_one') return i.site.kind === 'obo';
  return false;
}

describe('the scripted debugger through vime-loop', () => {
  it('solves the bugs its heuristics cover and fails the others', { timeout: 300_000 }, async () => {
    const set = await buildProceduralTaskSet({ dir: join(tmp, 'set'), perFamily: 2, seed: 1 });
    const out = join(tmp, 'run');
    const run = await runScript(
      LOOP_CLI,
      [
        ...['--dataset', set.jsonlPath, '--policy', 'debugger', '--no-validate', '--quiet'],
        ...['--steps', '1', '--prompts', String(set.rows.length), '--samples', '1', '--out', out],
        ...['--shuffle-rewards', '5'],
      ],
      { timeoutMs: 280_000 },
    );
    expect(run.code, run.stderr.slice(-3000)).toBe(0);
    expect(run.stdout).toMatch(/stand-in engine\(s\) — a scripted policy/);
    const results = JSON.parse(await readFile(join(out, 'steps', '1.results.json'), 'utf8')) as Array<{
      taskId: string;
      status: string;
      reward: number;
    }>;
    expect(results.map((r) => r.status)).toEqual(set.rows.map(() => 'completed'));
    const reward = new Map(results.map((r) => [r.taskId, r.reward]));
    const outcome = set.instances.map((i) => [i.instanceId, reward.get(i.instanceId)]);
    expect(outcome).toEqual(set.instances.map((i) => [i.instanceId, covered(i) ? 1 : 0]));
    // Some of every kind: families it solves, and families it never does.
    const solved = (family: string) =>
      results.filter((r) => bugKindOf(r.taskId) === family).reduce((n, r) => n + r.reward, 0);
    expect(solved('flip_comparison')).toBe(2);
    for (const family of ['wrong_constant', 'swapped_args', 'missing_branch']) expect(solved(family)).toBe(0);
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(report.engine).toMatchObject({ stand_in: true });
    // The shuffled-reward control: the batch's rewards are the step's earned ones, permuted.
    const rows = decodeSamples(await readFile(join(out, 'steps', '1.msgpack')));
    const earned = new Map(results.map((r) => [(r as unknown as { rolloutId: number }).rolloutId, r.reward]));
    const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
    const last = [...new Map(rows.map((r) => [r.rollout_id, r])).values()];
    expect(sorted(last.map((r) => r.reward as number))).toEqual(sorted(results.map((r) => r.reward)));
    for (const row of last) expect(row.metadata.true_reward).toBe(earned.get(row.rollout_id as number));
    expect(last.some((r) => r.reward !== r.metadata.true_reward)).toBe(true);
  });
});
