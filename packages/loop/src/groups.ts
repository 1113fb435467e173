/**
 * The loop's rollouts as durable work units (`GroupQueue` of @vime/core, run by its worker `runGroups`). A
 * step's prompts are groups of `samplesPerPrompt` siblings, created under a key (a restart finds them
 * again).
 */
import type { GroupQueue, GroupWork } from '@vime/core/queue';

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
): Promise<number[]> {
  return Promise.all(
    Array.from({ length: count }, (_, i) => {
      const groupIndex = first + i;
      const payload: GroupPayload = { step, groupIndex, task: groupIndex % taskCount };
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
