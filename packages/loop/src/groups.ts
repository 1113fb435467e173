/**
 * The loop's rollouts as durable work units (`GroupQueue` of @vime/core, run by its worker `runGroups`). A
 * step's prompts are groups of `samplesPerPrompt` siblings, created under a key (a restart finds them
 * again).
 */
import { ConfigError } from '@vime/core';
import type { GroupQueue, GroupWork } from '@vime/core/queue';
import { seededRandom } from '@vime/core/utils';

/** What a step's prompt group carries in the queue: its task and its step. */
export interface GroupPayload extends GroupWork {
  step: number;
}

/** The queue key of a step's prompt group. */
export const groupKey = (step: number, groupIndex: number) => `step-${step}/group-${groupIndex}`;

/** Create (or find again, after a restart) the groups of a step. */
export function createStepGroups(
  queue: GroupQueue,
  step: number,
  first: number,
  count: number,
  taskCount: number,
  n: number,
  taskOf: (groupIndex: number) => number = (groupIndex) => groupIndex % taskCount,
): Promise<number[]> {
  return Promise.all(
    Array.from({ length: count }, (_, i) => {
      const groupIndex = first + i;
      const payload: GroupPayload = { step, groupIndex, task: taskOf(groupIndex) };
      return queue.create({ n, key: groupKey(step, groupIndex), payload });
    }),
  );
}

/** Siblings of `ids` whose result the queue holds (run before a restart; not run again). */
export function doneSiblings(queue: GroupQueue, ids: number[]): number {
  let done = 0;
  for (const id of ids) for (const s of queue.group(id)?.slots ?? []) if (s.done) done++;
  return done;
}

/**
 * Which task each prompt group of a run gets. `cycle`: the dataset's order, from the start again when it
 * runs out. `fresh`: a seeded draw without replacement, so no task is given to two groups of the run (the
 * run must fit: steps × prompts per step ≤ tasks, checked before the first rollout). The same tasks and seed
 * give the same draw, so a resumed run finds its groups' tasks again.
 */
export function taskDraw(
  taskCount: number,
  options: { draw: 'cycle' | 'fresh'; seed: number; steps: number; promptsPerStep: number },
): (groupIndex: number) => number {
  if (options.draw === 'cycle') return (groupIndex) => groupIndex % taskCount;
  const needed = options.steps * options.promptsPerStep;
  if (needed > taskCount)
    throw new ConfigError(
      `--task-draw fresh: ${options.steps} steps x ${options.promptsPerStep} prompts need ${needed} distinct tasks, the dataset has ${taskCount} (after the baseline check); give fewer steps or prompts, or more tasks`,
    );
  const random = seededRandom(options.seed);
  const order = Array.from({ length: taskCount }, (_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return (groupIndex) => {
    const task = order[groupIndex];
    if (task === undefined)
      throw new ConfigError(`--task-draw fresh: group ${groupIndex} is past the draw's ${taskCount} tasks`);
    return task;
  };
}
