import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { rolloutProgressBar } from './progress.js';
import { runRollouts } from './run.js';

describe('rolloutProgressBar', () => {
  it('draws done/total, outcomes by status and the mean reward, and stops when the run ends', async () => {
    const stream = new PassThrough();
    let output = '';
    stream.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
    });
    const run = runRollouts(
      [{ id: 'a' }, { id: 'b' }, { id: 'c' }],
      (task, ctx) => {
        if (task.id === 'c' && ctx.sampleIndex === 1) throw new Error('boom');
        return { reward: ctx.sampleIndex === 0 ? 1 : 0 };
      },
      { samplesPerPrompt: 2, concurrency: 2, guardMs: 1000, skip: (ref) => ref.rolloutId === 2 },
    );
    rolloutProgressBar(run, { stream, label: 'step 3', noTTYOutput: true, notTTYSchedule: 10 });
    for await (const _ of run) {
      // drain
    }
    const last = output.trim().split('\n').at(-1) ?? '';
    // 6 rollouts, b#0 skipped, c#1 failed: scored rewards 1 (a#0), 0 (a#1), 0 (b#1), 1 (c#0) → mean 0.5.
    expect(last).toContain('step 3 [');
    expect(last).toContain('5/5');
    expect(last).toContain('in flight 0');
    expect(last).toContain('ok 4 trunc 0 fail 1 abort 0');
    expect(last).toContain('reward 0.500');
    const before = output.length;
    run.emit('end', run.stats);
    expect(output.length).toBe(before);
  });

  it('draws an empty bar, not a full one, while no rollout has started', async () => {
    const stream = new PassThrough();
    let output = '';
    stream.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
    });
    const run = runRollouts([], () => ({ reward: 1 }), { concurrency: 1, guardMs: 1000 });
    rolloutProgressBar(run, { stream, label: 'step 1', noTTYOutput: true, notTTYSchedule: 10 });
    for await (const _ of run) {
      // drain
    }
    const last = output.trim().split('\n').at(-1) ?? '';
    expect(last).toContain('0/0');
    expect(last).toMatch(/\[░+\]/); // shades_classic: '░' to do, '█' done
  });
});
