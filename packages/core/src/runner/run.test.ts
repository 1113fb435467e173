import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { ConfigError, ValidationError, VimeError } from '../errors.js';
import type { RolloutEvent, RolloutResult } from '../rollout.js';
import { createSample } from '../sample.js';
import type { RolloutFunction } from './options.js';
import { runRollouts } from './run.js';

const tasks = (n: number) => Array.from({ length: n }, (_, i) => ({ id: `task-${i}` }));

async function collect(iterable: AsyncIterable<RolloutResult>): Promise<RolloutResult[]> {
  const out: RolloutResult[] = [];
  for await (const r of iterable) out.push(r);
  return out;
}

function sample(responseLength = 2) {
  return createSample({
    tokens: [1, 2, 3, 4].slice(0, 2 + responseLength),
    response_length: responseLength,
    loss_mask: new Uint8Array(responseLength).fill(1),
    rollout_log_probs: new Float32Array(responseLength).fill(-0.5),
  });
}

describe('runRollouts', () => {
  it('yields results in completion order with group/sample indices and stamped samples', async () => {
    // Later rollouts finish first: each waits for the next one to return, then for a timer (which
    // fires only after the runner has taken that result), so the order holds on a loaded machine.
    const returned = Array.from({ length: 7 }, () => {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      return { promise, resolve };
    });
    returned[6]!.resolve();
    const run = runRollouts(
      tasks(3),
      async (task, ctx) => {
        await returned[ctx.rolloutId + 1]!.promise;
        await sleep(5, undefined, { signal: ctx.signal });
        queueMicrotask(() => returned[ctx.rolloutId]!.resolve());
        return { reward: ctx.sampleIndex === 0 ? 1 : 0, samples: [sample()], sessionId: `${task.id}/s` };
      },
      { samplesPerPrompt: 2, concurrency: 6, guardMs: 5000 },
    );
    const results = await collect(run);
    expect(results.map((r) => r.rolloutId)).toEqual([5, 4, 3, 2, 1, 0]);
    for (const r of results) {
      expect(r.status).toBe('completed');
      expect(r.groupIndex).toBe(Math.floor(r.rolloutId / 2));
      expect(r.sampleIndex).toBe(r.rolloutId % 2);
      expect(r.taskId).toBe(`task-${r.groupIndex}`);
      const [s] = r.samples;
      expect(s).toMatchObject({
        group_index: r.groupIndex,
        index: r.rolloutId,
        rollout_id: r.rolloutId,
        status: 'completed',
        reward: r.sampleIndex === 0 ? 1 : 0,
        session_id: `task-${r.groupIndex}/s`,
      });
    }
    expect(run.stats).toMatchObject({ started: 6, finished: 6, inFlight: 0, peakInFlight: 6 });
  });

  it('keeps a reward and status the trajectory already set on a row', async () => {
    const run = runRollouts(
      tasks(1),
      () => ({
        reward: 1,
        status: 'truncated',
        samples: [{ ...sample(), reward: 0.5 }, { ...sample(), status: 'aborted' }, sample()],
      }),
      { concurrency: 1, guardMs: 1000 },
    );
    const [r] = await collect(run);
    expect(r?.status).toBe('truncated');
    expect(r?.samples.map((s) => [s.reward, s.status])).toEqual([
      [0.5, 'truncated'],
      [1, 'aborted'],
      [1, 'truncated'],
    ]);
  });

  it('holds in-flight rollouts at exactly min(remaining, concurrency) and never above', async () => {
    let active = 0;
    let peak = 0;
    const run = runRollouts(
      tasks(25),
      async (_task, ctx) => {
        active++;
        peak = Math.max(peak, active);
        await sleep(1 + ((ctx.rolloutId * 7) % 11), undefined, { signal: ctx.signal });
        active--;
        return { reward: 0 };
      },
      { samplesPerPrompt: 4, concurrency: 16, guardMs: 5000 },
    );
    // Between macrotasks the run is settled: every finished rollout has been replaced already.
    const samples: Array<[number, number]> = [];
    const probe = setInterval(() => samples.push([run.stats.inFlight, run.stats.started]), 1);
    const results = await collect(run);
    clearInterval(probe);
    expect(results).toHaveLength(100);
    expect(peak).toBe(16);
    const saturated = samples.filter(([, started]) => started > 0 && started < 100);
    expect(saturated.length).toBeGreaterThan(5);
    for (const [inFlight] of saturated) expect(inFlight).toBe(16);
  });

  it('turns a thrown error into a failed result with its cause and phase, and keeps going', async () => {
    const boom = new Error('sandbox exploded');
    const run = runRollouts(
      tasks(2),
      async (task, ctx) => {
        await ctx.phase('claim', () => sleep(1));
        if (task.id === 'task-1') await ctx.phase('exec', () => Promise.reject(boom));
        return { reward: 1 };
      },
      { concurrency: 2, guardMs: 5000 },
    );
    const results = await collect(run);
    const failed = results.find((r) => r.status === 'failed');
    expect(failed).toBeDefined();
    if (failed?.status !== 'failed') throw new Error('unreachable');
    expect(failed.error).toMatchObject({ code: 'rollout_error', phase: 'exec', cause: boom });
    expect(failed.error.message).toContain('sandbox exploded');
    expect('reward' in failed).toBe(false);
    expect(failed.samples).toEqual([]);
    expect(failed.timings.claim).toBeGreaterThan(0);
    expect(results.find((r) => r.status === 'completed')?.taskId).toBe('task-0');
  });

  it('keeps a VimeError code, takes the phase from its data, and maps code `aborted` to an aborted result', async () => {
    const run = runRollouts(
      tasks(3),
      (task) => {
        if (task.id === 'task-0')
          throw new VimeError('grading_error', 'no verdict', { data: { phase: 'eval' } });
        if (task.id === 'task-1') throw new VimeError('aborted', 'setup command failed 3 times');
        throw 'a string';
      },
      { concurrency: 3, guardMs: 5000 },
    );
    const byTask = new Map((await collect(run)).map((r) => [r.taskId, r]));
    expect(byTask.get('task-0')).toMatchObject({
      status: 'failed',
      error: { code: 'grading_error', phase: 'eval' },
    });
    expect(byTask.get('task-1')).toMatchObject({ status: 'aborted', error: { code: 'aborted' } });
    expect(byTask.get('task-2')).toMatchObject({
      status: 'failed',
      error: { code: 'rollout_error', message: 'the rollout threw string "a string"' },
    });
  });

  it('aborts a rollout that overruns its guard, naming the phase it was in', async () => {
    let sawAbort = false;
    const run = runRollouts(
      tasks(2),
      async (task, ctx) => {
        if (task.id === 'task-0') return { reward: 1 };
        await ctx.phase('agent', async () => {
          try {
            await sleep(10_000, undefined, { signal: ctx.signal });
          } catch (error) {
            sawAbort = ctx.signal.aborted;
            throw error;
          }
        });
        return { reward: 1 };
      },
      { concurrency: 2, guardMs: 60 },
    );
    const t0 = performance.now();
    const results = await collect(run);
    // The 10 s sleep was cut short by the 60 ms guard.
    expect(performance.now() - t0).toBeLessThan(10_000);
    const aborted = results.find((r) => r.taskId === 'task-1');
    expect(aborted?.status).toBe('aborted');
    if (aborted?.status !== 'aborted') throw new Error('unreachable');
    expect(aborted.error.code).toBe('timeout');
    expect(aborted.error.phase).toBe('agent');
    expect(aborted.error.message).toContain('wall-clock guard of 60 ms');
    expect(sawAbort).toBe(true);
  });

  it('abandons a rollout that ignores its signal after graceMs and frees the slot', async () => {
    const warnings: string[] = [];
    // Whether the rollout that ignores its signal had returned when the next one got the slot.
    let ignoredReturned = false;
    let returnedBeforeNext: boolean | undefined;
    const run = runRollouts(
      tasks(2),
      async (task) => {
        if (task.id === 'task-0') {
          // ignores the signal (unref'd: the file need not wait for it)
          await new Promise((resolve) => setTimeout(resolve, 30_000).unref());
          ignoredReturned = true;
        } else returnedBeforeNext = ignoredReturned;
        return { reward: 1 };
      },
      {
        concurrency: 1,
        guardMs: 50,
        graceMs: 50,
        logger: { warn: (message) => warnings.push(message) },
      },
    );
    const results = await collect(run);
    expect(results.map((r) => [r.taskId, r.status])).toEqual([
      ['task-0', 'aborted'],
      ['task-1', 'completed'],
    ]);
    // The slot was freed while the abandoned rollout still ran: the next one did not wait for it.
    expect(returnedBeforeNext).toBe(false);
    expect(run.stats.abandoned).toBe(1);
    expect(warnings).toHaveLength(1);
  });

  it('stops admitting and aborts in-flight rollouts when the run signal aborts, then ends normally', async () => {
    const controller = new AbortController();
    let started = 0;
    const run = runRollouts(
      tasks(50),
      async (_task, ctx) => {
        started++;
        await sleep(10_000, undefined, { signal: ctx.signal });
        return { reward: 1 };
      },
      { concurrency: 4, guardMs: 60_000, signal: controller.signal },
    );
    setTimeout(() => controller.abort(new Error('user pressed ctrl-c')), 30);
    const results = await collect(run);
    expect(started).toBe(4);
    expect(results).toHaveLength(4);
    for (const r of results) {
      expect(r.status).toBe('aborted');
      if (r.status === 'aborted') expect(r.error.message).toContain('user pressed ctrl-c');
    }
  });

  it('aborts and awaits in-flight rollouts when the consumer breaks out of the loop', async () => {
    const cleaned: number[] = [];
    const run = runRollouts(
      tasks(10),
      async (_task, ctx) => {
        try {
          await sleep(ctx.rolloutId === 0 ? 1 : 10_000, undefined, { signal: ctx.signal });
          return { reward: 1 };
        } finally {
          cleaned.push(ctx.rolloutId);
        }
      },
      { concurrency: 3, guardMs: 60_000 },
    );
    for await (const r of run) {
      expect(r.rolloutId).toBe(0);
      break;
    }
    // Rollout 0 finished; 1 and 2 were in flight, 3 was admitted when 0's result was read.
    expect(cleaned.sort()).toEqual([0, 1, 2, 3]);
    expect(run.stats.inFlight).toBe(0);
  });

  it('fails a rollout whose outcome is malformed, naming the field', async () => {
    const run = runRollouts(
      tasks(3),
      ((task: { id: string }) =>
        task.id === 'task-0'
          ? { reward: Number.NaN }
          : task.id === 'task-1'
            ? { reward: 1, samples: [{ ...sample(), response_length: 9 }] }
            : undefined) as unknown as RolloutFunction<{ id: string }>,
      { concurrency: 3, guardMs: 1000 },
    );
    const byTask = new Map((await collect(run)).map((r) => [r.taskId, r]));
    const nan = byTask.get('task-0');
    const bad = byTask.get('task-1');
    const none = byTask.get('task-2');
    if (nan?.status !== 'failed' || bad?.status !== 'failed' || none?.status !== 'failed') {
      throw new Error(`expected three failures, got ${[nan?.status, bad?.status, none?.status]}`);
    }
    expect(nan.error.message).toContain('outcome.reward');
    expect(nan.error.cause).toBeInstanceOf(ValidationError);
    expect(bad.error.message).toContain('outcome.samples[0].response_length');
    expect(none.error.message).toContain('invalid outcome');
  });

  it('skips rollouts the caller already has (resume) and continues group numbering', async () => {
    const ran: number[] = [];
    const run = runRollouts(
      tasks(3),
      (_task, ctx) => {
        ran.push(ctx.rolloutId);
        return { reward: 0 };
      },
      {
        samplesPerPrompt: 2,
        concurrency: 2,
        guardMs: 1000,
        firstGroupIndex: 10,
        skip: (ref) => ref.rolloutId === 21 || ref.groupIndex === 11,
      },
    );
    const results = await collect(run);
    expect(ran.sort()).toEqual([20, 24, 25]);
    expect(results.map((r) => r.groupIndex).sort()).toEqual([10, 12, 12]);
    expect(run.stats.skipped).toBe(3);
    expect(run.total).toBe(6);
  });

  it('pulls an async task source only when a slot is free', async () => {
    let pulled = 0;
    async function* source() {
      for (let i = 0; i < 6; i++) {
        pulled++;
        yield { id: `t${i}` };
      }
    }
    let maxPulledAhead = 0;
    let started = 0;
    const run = runRollouts(
      source(),
      async (_task, ctx) => {
        started++;
        maxPulledAhead = Math.max(maxPulledAhead, pulled - started);
        await sleep(5, undefined, { signal: ctx.signal });
        return { reward: 1 };
      },
      { concurrency: 2, guardMs: 1000 },
    );
    expect(run.total).toBeUndefined();
    expect(await collect(run)).toHaveLength(6);
    expect(maxPulledAhead).toBe(0);
    expect(run.total).toBe(6);
  });

  it('yields the finished results, then throws, when the task source throws', async () => {
    async function* source() {
      yield { id: 'a' };
      throw new Error('dataset read failed');
    }
    const seen: string[] = [];
    const run = runRollouts(
      source(),
      async (task) => {
        await sleep(5);
        return { reward: 1, metadata: { task: task.id } };
      },
      { concurrency: 4, guardMs: 1000 },
    );
    await expect(async () => {
      for await (const r of run) seen.push(r.taskId);
    }).rejects.toThrow(/task source threw/);
    expect(seen).toEqual(['a']);
  });

  it('does not start new rollouts while `concurrency` results wait unread', async () => {
    let started = 0;
    const run = runRollouts(
      tasks(20),
      () => {
        started++;
        return { reward: 1 };
      },
      { concurrency: 3, guardMs: 1000 },
    );
    const iterator = run[Symbol.asyncIterator]();
    await iterator.next();
    await sleep(20);
    // Admission needs fewer than 3 unread results, so at most 3 unread + 2 admitted after them + 1 read.
    expect(started).toBe(6);
    expect(run.stats.finished - 1).toBe(5);
    let rest = 0;
    while (!(await iterator.next()).done) rest++;
    expect(rest + 1).toBe(20);
  });

  it('emits typed events with monotonic timestamps, filling in rolloutId', async () => {
    const events: RolloutEvent[] = [];
    const turns: number[] = [];
    const run = runRollouts(
      tasks(1),
      async (_task, ctx) => {
        ctx.emit({
          type: 'rollout:turn',
          turn: 0,
          promptTokens: 10,
          outputTokens: 5,
          durationMs: 3,
          sessionId: 's',
        });
        await ctx.phase('exec', async () => {
          ctx.emit({ type: 'rollout:exec', command: 'pytest -q', exitCode: 1, durationMs: 2 });
        });
        ctx.emit({ type: 'rollout:eval', reward: 1, durationMs: 4 });
        return { reward: 1, turns: 1 };
      },
      { concurrency: 1, guardMs: 1000 },
    );
    run.on('event', (e) => events.push(e));
    run.on('rollout:turn', (e) => turns.push(e.promptTokens));
    let ended = false;
    run.on('end', () => {
      ended = true;
    });
    const [result] = await collect(run);
    expect(events.map((e) => e.type)).toEqual([
      'rollout:start',
      'rollout:turn',
      'rollout:exec',
      'rollout:phase',
      'rollout:eval',
      'rollout:finish',
    ]);
    for (const e of events) if ('rolloutId' in e) expect(e.rolloutId).toBe(0);
    const ts = events.map((e) => e.t);
    expect([...ts].sort((a, b) => a - b)).toEqual(ts);
    expect(events.at(-1)).toMatchObject({ type: 'rollout:finish', status: 'completed', reward: 1 });
    expect(turns).toEqual([10]);
    expect(result?.timings.exec).toBeGreaterThanOrEqual(0);
    expect(ended).toBe(true);
  });

  it('rejects bad options with a ConfigError naming the field and the fix', () => {
    const fn = () => ({ reward: 0 });
    expect(() => runRollouts([], fn, { concurrency: 0, guardMs: 1 })).toThrow(ConfigError);
    expect(() => runRollouts([], fn, { concurrency: 0, guardMs: 1 })).toThrow(
      /options.concurrency.*number 0/,
    );
    expect(() => runRollouts([], fn, { concurrency: 1, guardMs: 0 })).toThrow(/options.guardMs.*Infinity/);
    expect(() => runRollouts([], fn, { concurrency: 1, guardMs: 1, samplesPerPrompt: 1.5 })).toThrow(
      /samplesPerPrompt.*1.5/,
    );
    expect(() => runRollouts([], fn, undefined as never)).toThrow(ConfigError);
  });

  it('refuses to be iterated twice', async () => {
    const run = runRollouts(tasks(1), () => ({ reward: 0 }), { concurrency: 1, guardMs: 1000 });
    await collect(run);
    await expect(collect(run)).rejects.toThrow(/already being iterated/);
  });

  it('rejects a task without a string id', async () => {
    const run = runRollouts([{ id: 'a' }, { name: 'b' } as never], () => ({ reward: 0 }), {
      concurrency: 1,
      guardMs: 1000,
    });
    await expect(collect(run)).rejects.toThrow(/task source threw/);
  });
});
