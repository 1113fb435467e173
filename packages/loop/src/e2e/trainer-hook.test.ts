/**
 * The loop's optional trainer hook, with the stand-in engine (a scripted policy, not a model) and a
 * trainer that only records when it ran: called once per step after the batch file is written, sync
 * mode waits for it before the next step's rollouts, async mode rolls the next step out meanwhile, and
 * its result lands in the step summary, metrics.jsonl, the report's step-time split and its trainer curves.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RolloutResult } from '@vime/core';
import { parseMetricsFile, reportInputFromMetrics, runReport } from '@vime/metrics';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConfig } from '../config/resolve.js';
import { runLoop, type TrainerHook } from '../loop.js';

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-trainer-hook-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

interface Call {
  step: number;
  batchWritten: boolean;
  startedAt: number;
  endedAt: number;
}

/** A recording trainer: takes `ms` per step and reports version = step (times on the rollouts' clock, performance.now). */
function recordingTrainer(calls: Call[], ms: number): TrainerHook {
  return async ({ step, batchPath }) => {
    const startedAt = performance.now();
    const batchWritten = existsSync(batchPath);
    await new Promise((r) => setTimeout(r, ms));
    calls.push({ step, batchWritten, startedAt, endedAt: performance.now() });
    return {
      weightVersion: String(step),
      trainSeconds: ms / 1000,
      weightUpdateSeconds: 0.042, // a small model's save and load: tens of ms
      // slime's names for the policy loss, KL, entropy, clip fraction and learning rate.
      metrics: {
        loss: 0.5 + step,
        pg_loss: -0.01 * step,
        ppo_kl: 2e-5 * step,
        entropy_loss: 1.5 - 0.1 * step,
        pg_clipfrac: 0.002,
        grad_norm: 0.25 * step,
        'lr-pg_0': 1e-6,
        logprob_abs_diff_mean: 0.001,
        nan: Number.NaN,
      },
    };
  };
}

async function run(mode: 'sync' | 'async', ms: number) {
  const out = join(tmp, mode);
  const calls: Call[] = [];
  const config = checkConfig({
    out,
    mode,
    steps: 2,
    promptsPerStep: 2,
    samplesPerPrompt: 2,
    concurrency: 4,
    validate: false,
    quiet: true,
    poolReplicas: 2,
  });
  const summary = await runLoop(config, { log: () => {}, trainer: recordingTrainer(calls, ms) });
  const started = async (step: number) =>
    (JSON.parse(await readFile(join(out, 'steps', `${step}.results.json`), 'utf8')) as RolloutResult[]).map(
      (r) => r.startedAt!,
    );
  return { out, calls, summary, step2Starts: await started(2) };
}

describe('the trainer hook', () => {
  it('sync: trains each step after its batch is written, before the next step rolls out; results recorded', {
    timeout: 240_000,
  }, async () => {
    const { out, calls, summary, step2Starts } = await run('sync', 1500);
    expect(calls.map((c) => [c.step, c.batchWritten])).toEqual([
      [1, true],
      [2, true],
    ]);
    expect(Math.min(...step2Starts)).toBeGreaterThanOrEqual(calls[0]!.endedAt);
    expect(summary.steps.map((s) => s.train?.weightVersion)).toEqual(['1', '2']);

    const lines = (await readFile(join(out, 'metrics.jsonl'), 'utf8'))
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    const steps = lines.filter((l) => l.kind === 'step');
    expect(steps.map((s) => s.scalars['train/weight_version'])).toEqual([1, 2]);
    expect(steps[0].scalars['perf/train_time']).toBe(1.5);
    expect(steps[0].scalars['perf/update_weights_time']).toBe(0.042);
    expect(steps[1].scalars['train/loss']).toBe(2.5);
    // A non-finite metric is left out, not written as null or NaN.
    expect('train/nan' in steps[0].scalars).toBe(false);

    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    // The report's trainer curves: every metric the trainer reported, under its name, per step.
    expect(report.trainer).toMatchObject({
      source: expect.stringMatching(/trainer hook/),
      keys: {
        policy_loss: 'pg_loss',
        kl: 'ppo_kl',
        entropy: 'entropy_loss',
        clip_fraction: 'pg_clipfrac',
        grad_norm: 'grad_norm',
        lr: 'lr-pg_0',
        logprob_gap: 'logprob_abs_diff_mean',
      },
      missing: {},
    });
    expect(report.trainer.per_step['2']).toEqual({
      policy_loss: -0.02,
      kl: 4e-5,
      entropy: 1.3,
      clip_fraction: 0.002,
      grad_norm: 0.5,
      lr: 1e-6,
      logprob_gap: 0.001,
    });
    // metrics.jsonl carries them (train/<name>): read back, the same curves.
    const text = await readFile(join(out, 'metrics.jsonl'), 'utf8');
    const again = runReport(reportInputFromMetrics(parseMetricsFile(text)));
    expect(again.trainer!.per_step).toEqual(report.trainer.per_step);
    expect(again.trainer!.keys.policy_loss).toBe('train/pg_loss');
    expect(report.steps['1'].train_time_sec).toBe(1.5);
    expect(report.steps['1'].update_weights_time_sec).toBe(0.042);
    expect(report.step_notes.train).toMatch(/trainer hook/);
    expect(report.step_notes.update_weights).toBeUndefined();
  });

  it('async: step 2 rolls out while step 1 trains', { timeout: 240_000 }, async () => {
    const { calls, step2Starts } = await run('async', 4000);
    expect(calls.map((c) => c.step)).toEqual([1, 2]);
    expect(Math.min(...step2Starts)).toBeLessThan(calls[0]!.endedAt);
    // One consumer: step 2 trains only after step 1 has.
    expect(calls[1]!.startedAt).toBeGreaterThanOrEqual(calls[0]!.endedAt);
  });
});
