/**
 * The offline set under the grader: every gold patch earns 1 (both semantics) and every unchanged
 * repository 0, each graded in a fresh sandbox with the grader's runner, canaries and report channel.
 */
import { describe, expect, it } from 'vitest';
import { useAttackKit, verdict } from './__fixtures__/kit.js';

const kit = useAttackKit();

describe('every offline task: gold → 1, unchanged → 0', () => {
  it('holds for all of them', async () => {
    const wrong: string[] = [];
    const tasks = kit.set().tasks;
    // Two at a time: the pools hold two warm sandboxes, and the machine may have two cores.
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < tasks.length; i = next++) {
        const task = tasks[i]!;
        for (const semantics of ['swesmith', 'strict'] as const) {
          const gold = await kit.grade(task, task.goldPatch!, semantics);
          const none = await kit.grade(task, '', semantics);
          if (gold.status !== 'graded' || gold.reward !== 1 || gold.hacks.length > 0)
            wrong.push(`${task.id} gold ${semantics}: ${JSON.stringify(verdict(gold))}`);
          if (
            none.status !== 'graded' ||
            none.reward !== 0 ||
            none.outcome !== 'tests_ran' ||
            none.hacks.length > 0
          )
            wrong.push(`${task.id} unchanged ${semantics}: ${JSON.stringify(verdict(none))}`);
        }
      }
    };
    await Promise.all([worker(), worker()]);
    expect(wrong).toEqual([]);
    expect(tasks.length).toBeGreaterThanOrEqual(30);
  }, 3_600_000);
});
