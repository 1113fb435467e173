import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { createSample } from '../sample.js';
import { GroupQueue } from './groups.js';
import { runGroups } from './worker.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const tasks = [{ id: 't0' }];

describe('runGroups', () => {
  it('ends the step when its last sibling is graded, also after a garbage collection while it waits for a lease', {
    timeout: 20_000,
  }, async () => {
    const dir = await mkdtemp(join(tmpdir(), 'vime-groups-'));
    const queue = await GroupQueue.open(dir);
    try {
      const ids = [await queue.create({ n: 2, key: 'group-0', payload: { groupIndex: 0, task: 0 } })];
      // The first sibling finishes at once; while the runner waits for another lease, a collection runs;
      // then the second sibling finishes and nothing is left to lease.
      const delays = [20, 400];
      let started = 0;
      const collected = setTimeout(gc, 150);
      const groups = await runGroups(
        queue,
        ids,
        tasks,
        async (_task, ctx) => {
          await new Promise((r) => setTimeout(r, delays[started++]));
          return {
            reward: ctx.sampleIndex,
            samples: [createSample({ tokens: Int32Array.of(1, 2, 3), response_length: 1, reward: 0 })],
          };
        },
        { samplesPerPrompt: 2, concurrency: 2, guardMs: 60_000, onResult: () => {} },
      );
      clearTimeout(collected);
      expect(groups).toEqual({ complete: 1, unhanded: [] });
    } finally {
      await queue.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
