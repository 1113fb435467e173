import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../errors.js';
import type { ScoredRollout, UnscoredRollout } from '../rollout.js';
import { createSample } from '../sample.js';
import { QueueError } from './format.js';
import { RolloutQueue } from './rollouts.js';

let dir: string;
const handles: RolloutQueue[] = [];
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'vime-rollouts-'));
});
afterEach(async () => {
  for (const h of handles.splice(0)) await h.close().catch(() => {});
  await rm(dir, { recursive: true, force: true });
});

async function open(mode: 'producer' | 'consumer' | 'both' = 'both'): Promise<RolloutQueue> {
  const q = await RolloutQueue.open(dir, { mode, pollMs: 5 });
  handles.push(q);
  return q;
}

async function reopen(q: RolloutQueue, mode: 'producer' | 'consumer' | 'both' = 'both') {
  await q.close();
  handles.splice(handles.indexOf(q), 1);
  return open(mode);
}

const G = 4; // samples per prompt

function scored(step: number, groupIndex: number, sampleIndex: number): ScoredRollout {
  const rolloutId = groupIndex * G + sampleIndex;
  return {
    taskId: `task-${groupIndex}`,
    groupIndex,
    sampleIndex,
    rolloutId,
    status: sampleIndex === 3 ? 'truncated' : 'completed',
    reward: (step + sampleIndex) % 2,
    samples: [
      createSample({
        tokens: Int32Array.from({ length: 12 }, (_, k) => step * 1000 + rolloutId * 10 + k),
        response_length: 4,
        loss_mask: [1, 1, 0, 1],
        rollout_log_probs: Float32Array.from([-0.1, -0.2, 0, -(step + rolloutId) / 7]),
        group_index: groupIndex,
        index: sampleIndex,
        rollout_id: rolloutId,
      }),
    ],
    turns: 3,
    timings: { agent: 12.5, eval: 3 },
    metadata: { attempt: 1, note: 'ü' },
  };
}

function failedRollout(groupIndex: number, sampleIndex: number): UnscoredRollout {
  return {
    taskId: `task-${groupIndex}`,
    groupIndex,
    sampleIndex,
    rolloutId: groupIndex * G + sampleIndex,
    status: 'failed',
    error: { code: 'sandbox_error', message: 'bwrap died', phase: 'exec', cause: new Error('EPIPE') },
    samples: [],
    turns: 1,
    timings: {},
    metadata: {},
  };
}

/** Every slot of `groups` groups of step `step`, in a scrambled (completion-like) order. */
const slots = (groups: number, first = 0) =>
  Array.from({ length: groups * G }, (_, i) => [first + (i % groups), Math.floor(i / groups)] as const).sort(
    (a, b) => ((a[0] * 7 + a[1] * 3) % 5) - ((b[0] * 7 + b[1] * 3) % 5),
  );

describe('RolloutQueue (the step hand-off)', () => {
  it('hands over a step typed: scored rollouts with samples by group and sample, failed ones without', async () => {
    const q = await open();
    for (const [g, s] of slots(2)) if (!(g === 1 && s === 2)) await q.append(1, scored(1, g, s));
    await q.endStep(1, { failed: [failedRollout(1, 2)] });
    const batch = await q.takeStep(1);
    expect(batch.step).toBe(1);
    expect(batch.rollouts.map((r) => [r.groupIndex, r.sampleIndex])).toEqual([
      [0, 0],
      [0, 1],
      [0, 2],
      [0, 3],
      [1, 0],
      [1, 1],
      [1, 3],
    ]);
    for (const r of batch.rollouts) {
      const want = scored(1, r.groupIndex, r.sampleIndex);
      expect({ ...r, samples: [] }).toEqual({ ...want, samples: [] });
      expect(r.samples[0]!.tokens).toEqual(want.samples[0]!.tokens);
      expect(Buffer.from(r.samples[0]!.rollout_log_probs!.buffer)).toEqual(
        Buffer.from(want.samples[0]!.rollout_log_probs!.buffer),
      );
    }
    expect(batch.groups.map((g) => [g.groupIndex, g.taskId, g.rollouts.length])).toEqual([
      [0, 'task-0', 4],
      [1, 'task-1', 3],
    ]);
    // A failure keeps its code, message and phase; its cause (an Error) does not cross the disk.
    expect(batch.failed).toEqual([
      { ...failedRollout(1, 2), error: { code: 'sandbox_error', message: 'bwrap died', phase: 'exec' } },
    ]);
    await q.commitStep(1);
    expect(q.committedStep).toBe(1);
  });

  it('takes a step only when its end arrived and all its rollouts with it, from another handle', async () => {
    const producer = await open('producer');
    const consumer = await open('consumer');
    const taken = consumer.takeStep(1);
    let done = false;
    void taken.then(() => {
      done = true;
    });
    for (const [g, s] of slots(1)) await producer.append(1, scored(1, g, s));
    await new Promise((r) => setTimeout(r, 50));
    expect(done).toBe(false);
    await producer.endStep(1);
    expect((await taken).rollouts).toHaveLength(G);
    const controller = new AbortController();
    const waiting = consumer.takeStep(2, { signal: controller.signal });
    controller.abort(new Error('stop'));
    await expect(waiting).rejects.toThrow('stop');
  });

  it('keeps later steps interleaved with earlier ones, across a consumer restart, and never passes them', async () => {
    let q = await open();
    // Async: step 2's first rollouts land before step 1 is ended.
    for (const [g, s] of slots(2, 0).slice(0, 5)) await q.append(1, scored(1, g, s));
    for (const [g, s] of slots(2, 2).slice(0, 3)) await q.append(2, scored(2, g, s));
    for (const [g, s] of slots(2, 0).slice(5)) await q.append(1, scored(1, g, s));
    await q.endStep(1);
    expect((await q.takeStep(1)).rollouts).toHaveLength(2 * G);
    await q.commitStep(1);
    // The cursor stopped at step 2's first record: after a restart step 2 comes whole.
    q = await reopen(q);
    expect(q.committedStep).toBe(1);
    for (const [g, s] of slots(2, 2).slice(3)) await q.append(2, scored(2, g, s));
    await q.endStep(2);
    const two = await q.takeStep(2);
    expect(two.rollouts.map((r) => r.rolloutId)).toEqual(
      Array.from({ length: 2 * G }, (_, i) => 2 * G + i).sort((a, b) => a - b),
    );
    expect(two.rollouts.every((r) => r.samples[0]!.tokens[0]! >= 2000)).toBe(true);
  });

  it('drops the leftovers of a step handed off before a restart, and redelivers one that was not', async () => {
    let q = await open();
    for (const step of [1, 2]) {
      for (const [g, s] of slots(1, step)) await q.append(step, scored(step, g, s));
      await q.endStep(step);
    }
    const first = await q.takeStep(1);
    // Killed after taking step 1 but before committing it: step 1 comes again, the same.
    q = await reopen(q);
    const again = await q.takeStep(1);
    expect(again.rollouts.map((r) => r.rolloutId)).toEqual(first.rollouts.map((r) => r.rolloutId));
    await q.commitStep(1);
    const second = await q.takeStep(2);
    // Killed after writing step 2's output: the loop commits the step it finds done, then goes on.
    q = await reopen(q);
    await q.commitStep(2);
    await q.commitStep(2); // a repeat is a no-op
    for (const [g, s] of slots(1, 3)) await q.append(3, scored(3, g, s));
    await q.endStep(3);
    const third = await q.takeStep(3);
    expect(second.rollouts).toHaveLength(G);
    expect(third.rollouts.map((r) => r.samples[0]!.tokens[0]! - (r.samples[0]!.tokens[0]! % 1000))).toEqual(
      Array(G).fill(3000),
    );
    await expect(q.takeStep(2)).rejects.toBeInstanceOf(ConfigError);
  });

  it('lets a restarted rollout side skip what it has and end a step again', async () => {
    let q = await open('producer');
    const done = slots(2).slice(0, 5);
    for (const [g, s] of done) await q.append(1, scored(1, g, s));
    q = await reopen(q, 'producer');
    for (const [g, s] of slots(2)) {
      expect(q.has(1, { groupIndex: g, sampleIndex: s })).toBe(done.some(([a, b]) => a === g && b === s));
    }
    expect(q.count(1)).toBe(5);
    for (const [g, s] of slots(2))
      if (!q.has(1, { groupIndex: g, sampleIndex: s })) await q.append(1, scored(1, g, s));
    await q.endStep(1);
    q = await reopen(q, 'producer');
    expect(q.ended(1)).toBe(true);
    await q.endStep(1); // again: a no-op
    await expect(q.append(1, scored(1, 0, 0))).rejects.toMatchObject({ code: 'step_ended' });
    await expect(q.append(2, failedRollout(0, 0) as never)).rejects.toThrow(
      /pass failed and aborted rollouts to endStep/,
    );
    await expect(q.takeStep(1)).rejects.toThrow(/consumer operation/);
    const consumer = await open('consumer');
    expect((await consumer.takeStep(1)).rollouts).toHaveLength(2 * G);
  });

  it('hands over a step whose rollouts all failed', async () => {
    const q = await open();
    await q.endStep(1, { failed: [failedRollout(0, 0), failedRollout(0, 1)] });
    const batch = await q.takeStep(1);
    expect(batch.rollouts).toEqual([]);
    expect(batch.failed.map((f) => f.sampleIndex)).toEqual([0, 1]);
  });

  it('refuses a record it did not write', async () => {
    const q = await open();
    await q.queue.append('someone-else', []);
    await expect(q.takeStep(1)).rejects.toBeInstanceOf(QueueError);
  });
});
