import { existsSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RolloutResult } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { REPORT_SECTIONS, renderHtmlReport } from './html.js';
import { runReport } from './report.js';
import { failuresByCause, phaseTiming, rewardHistogram, staleness, taskTable } from './run-sections.js';
import type { SaturationPoint } from './saturation.js';
import { DEFAULT_CHROMIUM, renderHtmlInChromium } from './testing.js';
import { engineTimeline } from './timeline.js';

const T0 = Date.UTC(2026, 7, 21, 10, 0, 0);

/** Rollouts of one step: 4 tasks x 2 samples, 0/1 rewards, one sandbox failure, one abort. */
function stepResults(step: number): RolloutResult[] {
  return Array.from({ length: 8 }, (_, i): RolloutResult => {
    const base = {
      taskId: `task-${i >> 1}`,
      groupIndex: i >> 1,
      sampleIndex: i & 1,
      rolloutId: step * 8 + i,
      samples: [],
      turns: 3 + (i % 3),
      timings: { claim: 50 + i, setup: 200, agent: 3000, model: 2000, exec: 600, eval: 4000 },
      startedAt: T0 + step * 60_000,
      endedAt: T0 + step * 60_000 + 7500,
      metadata: { grade_outcome: 'tests_ran', ...(i === 5 ? { hacks: ['test_edit'] } : {}) },
    };
    if (i === 6)
      return { ...base, status: 'failed', error: { code: 'sandbox_error', message: 'x', phase: 'exec' } };
    if (i === 7 && step === 2)
      return { ...base, status: 'aborted', error: { code: 'aborted', message: 'stop' } };
    return { ...base, status: 'completed', reward: (i + step) % 3 === 0 ? 1 : 0 };
  });
}

/** An engine sampled every 250 ms with a load bump and a peak of `peak` running requests. */
function engine(peak: number): SaturationPoint[] {
  return Array.from({ length: 400 }, (_, i) => {
    const load = Math.sin((Math.PI * i) / 400);
    return {
      t: T0 + i * 250,
      running: i === 123 ? peak : Math.round(4 * load),
      queued: Math.round(2 * load * load),
      kvUsage: load / 2,
    };
  });
}

function fullRecord() {
  const results = [1, 2, 3].map((step) => ({ step, results: stepResults(step) }));
  return runReport({
    name: 'sync_1eng',
    mode: 'sync',
    run: {
      id: 'ca-test',
      startedAt: T0,
      endedAt: T0 + 185_000,
      config: { steps: 3 },
      codeVersion: 'abc1234',
    },
    engineKind: { kind: 'sglang', standIn: true },
    engines: [{ name: 'eng0', points: engine(8) }],
    results,
    claims: [
      { warm: true, latencyMs: 3 },
      { warm: true, latencyMs: 5 },
      { warm: false, latencyMs: 900 },
    ],
    tokens: { output: 12_000, seconds: 100 },
    perf: [1, 2, 3].map((step) => ({
      rolloutId: step,
      stepTime: 60,
      rolloutTime: 55,
      trainWaitTime: 55,
      trainTime: 5,
      metrics: {},
    })),
    resumedSteps: [1],
    stepNotes: { update_weights: 'no trainer in this run: the batch is written to a file' },
    capacity: {
      mode: 'sync',
      source: 'fit on this run',
      points: [
        { engines: 1, step_time_sec: 60, queue_req_peak: 2 },
        { engines: 2, step_time_sec: 35, queue_req_peak: 1 },
      ],
    },
  });
}

describe('run sections', () => {
  it('counts rewards, tasks, failures and phases; a failure is never a reward of 0', () => {
    const results = stepResults(2);
    const hist = rewardHistogram(results)!;
    expect(hist.scored).toBe(6);
    expect(hist.bins.reduce((s, b) => s + b.count, 0)).toBe(6);
    expect(hist.bins[0]!.count + hist.bins[9]!.count).toBe(6);
    const tasks = taskTable(results, (r) => r === 1);
    expect(tasks.find((t) => t.task === 'task-3')).toMatchObject({
      attempts: 2,
      scored: 0,
      failed: 1,
      aborted: 1,
      mean_reward: null,
      pass_at_k: { 'pass@1': null, 'pass@2': null },
    });
    expect(failuresByCause(results)).toEqual({ 'failed:sandbox_error (exec)': 1, 'aborted:aborted': 1 });
    const phases = phaseTiming([{ step: 2, results }], [10, 20, 30])!;
    // agent (3000) = model (2000) + exec (600) + the harness (400): stacked phases do not overlap.
    expect(phases.per_step['2']).toMatchObject({ model: 2000, exec: 600, agent_other: 400, eval: 4000 });
    expect(phases.summary.total).toMatchObject({ count: 8, p50: 7500 });
    expect(phases.exec_call.count).toBe(3);
    expect(staleness([{ step: 2, results }])).toBeNull();
  });

  it('keeps peaks through downsampling and breaks the line only where readings stop', () => {
    const points = engine(8);
    const tl = engineTimeline('eng0', points, T0, 50);
    expect(tl.t).toHaveLength(50);
    expect(tl.gaps).toBe(0);
    expect(tl.interval_ms).toBe(250);
    expect(tl.peaks.running).toEqual({ t: 30.75, value: 8 });
    expect(Math.max(...(tl.running_max as number[]))).toBe(8);
    const gappy = [...points.slice(0, 100), ...points.slice(100).map((p) => ({ ...p, t: p.t! + 60_000 }))];
    expect(engineTimeline('eng0', gappy, T0).gaps).toBe(1);
  });

  it('labels a stand-in, notes absent phases and resumed steps in the record', () => {
    const record = fullRecord();
    expect(record.engine).toEqual({
      kind: 'sglang',
      stand_in: true,
      label: 'stand-in engine (sglang), not a model',
    });
    expect(record.run).toMatchObject({ id: 'ca-test', duration_sec: 185, code_version: 'abc1234' });
    expect(record.steps['1']).toMatchObject({ resumed: true, step_time_sec: null });
    expect(record.step_notes.update_weights).toMatch(/no trainer/);
    expect(record.quality['2']!.ci!['pass@1']).toHaveLength(2);
    expect(record.sandbox).toMatchObject({ claims: 3, warm: 2, cold: 1 });
    expect(record.tokens!.per_second).toBe(120);
    expect(record.hacks_by_kind).toEqual({ test_edit: 3 });
    expect(record.rollouts_failed).toBe(3);
    expect(record.absent.staleness).toMatch(/weight versions/);
  });

  it('renders every section in headless Chromium: intervals drawn, engine lines continuous, peak marked', async () => {
    expect(
      existsSync(DEFAULT_CHROMIUM),
      `Chromium missing at ${DEFAULT_CHROMIUM}: apt-get install -y chromium`,
    ).toBe(true);
    const screenshotPath = join(
      process.env.VIME_ARTIFACTS ?? tmpdir(),
      `metrics-full-report-${process.pid}.png`,
    );
    const r = await renderHtmlInChromium(renderHtmlReport(fullRecord()), { screenshotPath });
    expect(r.consoleErrors).toEqual([]);
    expect(r.requests).toEqual([]);
    expect(r.emptySvgCount).toBe(0);
    const empty = r.sections.filter((x) => x.empty).map((x) => x.id);
    // Only what this run has no data for: no trainer, no weight versions, no work units, no hand-off audit,
    // no rows (so no tool-call or speculative-decoding counts).
    expect(empty.sort()).toEqual([
      'spec-decode',
      'staleness',
      'token-audit',
      'tool-calls',
      'trainer',
      'work-units',
    ]);
    expect(r.sections.map((x) => x.id)).toEqual(['run', ...REPORT_SECTIONS.map(([id]) => id)]);
    expect(r.standInLabel).toMatch(/Stand-in engine/);
    expect(r.intervalsDrawn).toBeGreaterThanOrEqual(4);
    const lines = r.series.filter((x) => x.chart === 'eng0: requests over time');
    expect(lines.map((x) => x.segments)).toEqual([1, 1]);
    expect(lines.every((x) => x.points > 100 && x.width > 500)).toBe(true);
    expect(r.markers).toContain('running peak 8');
    expect(r.text).toMatch(/resumed: not timed here/);
    expect(r.text).toMatch(/120 output tokens\/s/);
    expect(r.text).toMatch(/2 warm, 1 cold/);
    expect(statSync(screenshotPath).size).toBeGreaterThan(20_000);
  });
});
