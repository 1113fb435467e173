import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { encode } from '@msgpack/msgpack';
import { createSample, decodeSamples, type Sample, SandboxError, toSlimeDict, VimeError } from '@vime/core';
import { GroupQueue } from '@vime/core/queue';
import { afterEach, describe, expect, it } from 'vitest';
import { type RolloutServer, startRolloutServer } from './rollout-server.js';
import { runSampleUnit, UnitDropped } from './sample-units.js';

const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function post(server: RolloutServer, sample: Sample): Promise<Sample[]> {
  const res = await fetch(`${server.url}/rollout`, {
    method: 'POST',
    body: encode({ sample: toSlimeDict(sample), sampling_params: {} }),
  });
  if (res.status !== 200) throw new Error(`${res.status}: ${await res.text()}`);
  return decodeSamples(new Uint8Array(await res.arrayBuffer()));
}

const request = (index: number, prompt = 'ok') =>
  createSample({ group_index: Math.floor(index / 4), index, prompt, metadata: {} });

/** A rollout that counts its runs (each one a grade) by sample index. */
function countingRollout(runs: Map<number, number>, fail: (index: number, run: number) => boolean) {
  return async ({ sample }: { sample: Sample }) => {
    const index = sample.index!;
    const run = (runs.get(index) ?? 0) + 1;
    runs.set(index, run);
    if (fail(index, run)) throw new SandboxError('sandbox create failed: no space left');
    await new Promise((r) => setTimeout(r, 5));
    return [
      createSample({
        ...sample,
        rollout_id: index,
        tokens: [1, 2, 3, 10 + run],
        response_length: 1,
        loss_mask: [1],
        reward: index % 2,
        status: 'completed',
        weight_versions: ['default'],
      }),
    ];
  };
}

async function serve(dir: string, runs: Map<number, number>, fail = (_i: number, _r: number) => false) {
  const queue = await GroupQueue.open(dir, { maxAttempts: 3, retainSteps: 4 });
  const server = await startRolloutServer({
    rollout: countingRollout(runs, fail),
    attempts: 3,
    retryDelayMs: 5,
    queue,
  });
  const stop = async () => {
    await server.close();
    await queue.close();
  };
  return { server, queue, stop };
}

describe('rollout server with durable sample units', () => {
  it('answers a request sent again with the recorded rows, across a restart, without running it again', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'vime-units-'));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const runs = new Map<number, number>();
    const first = await serve(dir, runs);
    const rows = await Promise.all([0, 1, 2, 3].map((i) => post(first.server, request(i))));
    // A reply lost on the way: slime sends the same sample again, twice at once.
    const again = await Promise.all([post(first.server, request(2)), post(first.server, request(2))]);
    for (const a of again) expect(a[0]!.tokens).toEqual(rows[2]![0]!.tokens);
    expect(first.server.stats()).toMatchObject({ completed: 6, replayed: 2, failed: 0 });
    await first.stop();

    const second = await serve(dir, runs);
    cleanup.push(second.stop);
    const after = await post(second.server, request(1));
    expect(after[0]!.tokens).toEqual(rows[1]![0]!.tokens);
    expect(second.server.stats().replayed).toBe(1);
    // One run (one grade) per sample, whatever was sent.
    expect([...runs.values()]).toEqual([1, 1, 1, 1]);
  });

  it('replaces an infra failure up to `attempts`, then answers a failure row and counts the drop', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'vime-units-'));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const runs = new Map<number, number>();
    // Sample 5 fails once (replaced), sample 6 always (dropped after 3 attempts).
    const s = await serve(dir, runs, (i, run) => (i === 5 && run === 1) || i === 6);
    cleanup.push(s.stop);
    const ok = await post(s.server, request(5));
    expect(ok[0]!.status).toBe('completed');
    const failed = await post(s.server, request(6));
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ status: 'aborted', reward: null, remove_sample: true });
    expect(failed[0]!.metadata.vime_infra_failure).toMatchObject({ code: 'sandbox_error', attempts: 3 });
    expect(runs.get(5)).toBe(2);
    expect(runs.get(6)).toBe(3);
    // Sent again: the unit is dropped, answered as failed without a fourth run.
    const again = await post(s.server, request(6));
    expect(again[0]!.metadata.vime_infra_failure).toMatchObject({ attempts: 0 });
    expect(runs.get(6)).toBe(3);
    expect(s.queue.stats.dropped.infra_failed).toBe(1);
    expect(s.server.stats()).toMatchObject({ retried: 3, failed: 2 });
  });

  it('hands answered units off so GC keeps the queue small', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'vime-units-'));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const queue = await GroupQueue.open(dir, { maxAttempts: 3, retainSteps: 4, segmentBytes: 4096 });
    const runs = new Map<number, number>();
    const server = await startRolloutServer({ rollout: countingRollout(runs, () => false), queue });
    cleanup.push(async () => {
      await server.close();
      await queue.close();
    });
    for (let i = 0; i < 64; i++) await post(server, request(i));
    await server.close();
    expect(queue.stats.handed).toBe(64);
    expect(queue.trainerStep).toBe(64);
    expect((await readdir(dir)).length).toBeLessThan(16);
  });

  it('answers 504 at the deadline of a rollout that never ends, also after a garbage collection', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const server = await startRolloutServer({
      rollout: ({ signal }) =>
        new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason))),
      deadlineMs: 400,
    });
    cleanup.push(() => server.close());
    const collected = setTimeout(gc, 150);
    const res = await fetch(`${server.url}/rollout`, {
      method: 'POST',
      body: encode({ sample: toSlimeDict(request(0)), sampling_params: {} }),
      signal: AbortSignal.timeout(10_000),
    });
    clearTimeout(collected);
    expect(res.status).toBe(504);
    expect(await res.json()).toMatchObject({ error: { code: 'timeout' } });
  });
});

describe('runSampleUnit', () => {
  it('stops waiting to retry as soon as its signal aborts (the wait between attempts listens to it)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'vime-unit-abort-'));
    const queue = await GroupQueue.open(dir, { maxAttempts: 3 });
    cleanup.push(async () => {
      await queue.close();
      await rm(dir, { recursive: true, force: true });
    });
    const controller = new AbortController();
    let runs = 0;
    const stop = new Error('stopped by the caller');
    const unit = runSampleUnit(
      queue,
      'sample/0/0',
      async () => {
        runs++;
        // The first attempt fails for infrastructure reasons; the caller stops during the retry wait.
        setImmediate(() => controller.abort(stop));
        throw new SandboxError('sandbox create failed');
      },
      // A wait no test would sit out: only the abort can end it.
      {
        signal: controller.signal,
        deadlineMs: 60_000,
        retryDelayMs: 3_600_000,
        shouldRetry: () => true,
        onRetry: () => {},
      },
    );
    await expect(unit).rejects.toBe(stop);
    expect(runs).toBe(1);
  });
});

describe('UnitDropped', () => {
  it('has its own marker: its guard is true for it alone, not for any VimeError', () => {
    expect(UnitDropped.isInstance(new UnitDropped('dropped', 3))).toBe(true);
    expect(UnitDropped.isInstance(new VimeError('rollout_failed', 'x'))).toBe(false);
    expect(VimeError.isInstance(new UnitDropped('dropped', 3))).toBe(true);
  });
});
