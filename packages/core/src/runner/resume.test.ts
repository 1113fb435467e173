import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SampleQueue } from '../queue/queue.js';
import { createSample } from '../sample.js';
import type { RolloutFunction } from './options.js';
import { runRollouts } from './run.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'vime-resume-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const tasks = Array.from({ length: 10 }, (_, i) => ({ id: `task-${i}` }));
const key = (rolloutId: number) => `step-0/rollout-${rolloutId}`;

describe('runRollouts + SampleQueue (resume)', () => {
  it('continues an interrupted run without redoing or losing a completed rollout', async () => {
    const completions = new Map<number, number>();
    let interrupted = false;
    const rollout: RolloutFunction<{ id: string }> = async (task, ctx) => {
      await sleep(5 + ((ctx.rolloutId * 13) % 17), undefined, { signal: ctx.signal });
      // The first attempt stalls after a dozen completions until it is interrupted (however loaded the machine).
      if (!interrupted && completions.size >= 12) await sleep(60_000, undefined, { signal: ctx.signal });
      completions.set(ctx.rolloutId, (completions.get(ctx.rolloutId) ?? 0) + 1);
      const sample = createSample({
        tokens: [ctx.groupIndex, ctx.sampleIndex, 7, 8],
        response_length: 2,
        loss_mask: [1, 1],
        rollout_log_probs: [-0.25, -0.5],
      });
      return { reward: ctx.sampleIndex % 2, samples: [sample], metadata: { task: task.id } };
    };
    const produce = async (signal?: AbortSignal) => {
      const queue = await SampleQueue.open(dir, { mode: 'producer' });
      const run = runRollouts(tasks, rollout, {
        samplesPerPrompt: 4,
        concurrency: 6,
        guardMs: 10_000,
        skip: (ref) => queue.has(key(ref.rolloutId)),
        ...(signal ? { signal } : {}),
      });
      for await (const result of run) {
        if (result.status === 'completed') await queue.append(key(result.rolloutId), result.samples);
      }
      await queue.close();
      return run.stats;
    };

    // First attempt: interrupted (Ctrl-C) after a dozen rollouts are safely in the queue.
    const controller = new AbortController();
    const first = produce(controller.signal);
    for (;;) {
      await sleep(2);
      if ([...completions.values()].length >= 12) break;
    }
    controller.abort(new Error('interrupted'));
    const firstStats = await first;
    interrupted = true;
    expect(firstStats.byStatus.completed).toBeLessThan(40);
    const done = [...completions.keys()];

    // Second attempt: skips every rollout already in the queue, runs the rest.
    const secondStats = await produce();
    expect(secondStats.skipped).toBe(firstStats.byStatus.completed);
    expect(secondStats.byStatus.completed).toBe(40 - firstStats.byStatus.completed);
    // A rollout that completed was never run again; every rollout completed exactly once overall
    // (an aborted one completes only in the second attempt).
    for (const id of done) expect(completions.get(id)).toBe(1);
    expect(completions.size).toBe(40);
    expect([...completions.values()].every((n) => n === 1)).toBe(true);

    const consumer = await SampleQueue.open(dir, { mode: 'consumer' });
    const { records } = await consumer.read({ max: 100 });
    await consumer.close();
    expect(records.map((r) => r.key).sort()).toEqual(Array.from({ length: 40 }, (_, i) => key(i)).sort());
    for (const r of records) {
      const id = Number(r.key.split('-').at(-1));
      const [s] = r.samples;
      expect(s).toMatchObject({
        rollout_id: id,
        index: id,
        group_index: Math.floor(id / 4),
        status: 'completed',
      });
      expect(Array.from(s!.tokens.subarray(0, 2))).toEqual([Math.floor(id / 4), id % 4]);
    }
  });
});
