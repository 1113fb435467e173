import { ConfigError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { taskDraw } from './groups.js';

const groups = (taskOf: (g: number) => number, n: number) => Array.from({ length: n }, (_, g) => taskOf(g));

describe('taskDraw', () => {
  it('cycle: dataset order, from the start again when the tasks run out', () => {
    const taskOf = taskDraw(3, { draw: 'cycle', seed: 0, steps: 4, promptsPerStep: 2 });
    expect(groups(taskOf, 8)).toEqual([0, 1, 2, 0, 1, 2, 0, 1]);
  });

  it('fresh: every group of the run gets a different task, the same for the same seed', () => {
    const options = { draw: 'fresh', seed: 5, steps: 4, promptsPerStep: 5 } as const;
    const a = groups(taskDraw(40, options), 20);
    expect(new Set(a).size).toBe(20);
    for (const t of a) expect(t >= 0 && t < 40).toBe(true);
    expect(groups(taskDraw(40, options), 20)).toEqual(a);
    // Another seed, another draw; not dataset order.
    expect(groups(taskDraw(40, { ...options, seed: 6 }), 20)).not.toEqual(a);
    expect(a).not.toEqual(Array.from({ length: 20 }, (_, i) => i));
  });

  it('fresh: a run that needs more tasks than the dataset has is refused, naming the numbers and the fix', () => {
    const refuse = () => taskDraw(7, { draw: 'fresh', seed: 0, steps: 4, promptsPerStep: 2 });
    expect(refuse).toThrow(ConfigError);
    expect(refuse).toThrow(/--task-draw fresh: 4 steps x 2 prompts need 8 distinct tasks, the dataset has 7/);
    expect(() => taskDraw(8, { draw: 'fresh', seed: 0, steps: 4, promptsPerStep: 2 })).not.toThrow();
  });
});
