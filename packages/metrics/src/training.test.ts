// The report's training sections: the trainer's metrics under one name whatever trainer reported them
// (slime's log lines, the closed-loop trainer's keys, a metrics file's train/* scalars), and the rollouts'
// shape per step. The committed H200 run is read back exactly as it was written and checked against the
// numbers the loop and the trainer recorded themselves.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createSample, decodeSamples, type RolloutResult } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { lineChart } from './charts.js';
import { configDifferences } from './compare.js';
import { renderHtmlReport } from './html.js';
import { parseMetricsFile, reportInputFromMetrics } from './metrics-file.js';
import { runReport } from './report.js';
import { parseSlimePerfLog } from './slime-perf.js';
import { rolloutShapeOf, shapeRecord, trainerRecord } from './training.js';

const EVIDENCE = fileURLToPath(new URL('../../../examples/closed-loop/evidence/h200/', import.meta.url));

function result(group: number, reward: number | null, opts: Partial<RolloutResult> = {}): RolloutResult {
  const base = {
    taskId: `t${group}`,
    groupIndex: group,
    sampleIndex: 0,
    rolloutId: Math.floor(Math.random() * 1e9),
    samples: [],
    turns: 3,
    timings: {},
    metadata: {},
    ...opts,
  };
  return reward === null
    ? { ...base, status: 'failed', error: { code: 'sandbox_error', message: 'gone' } }
    : { ...base, status: (opts as { status?: 'truncated' }).status ?? 'completed', reward };
}

describe('trainerRecord', () => {
  it("reads slime's keys, the closed-loop trainer's and plain ones, one key per metric for the whole run", () => {
    const r = trainerRecord(
      [
        {
          step: 2,
          metrics: { 'train/pg_loss': -0.2, 'train/loss': 9, 'train/ppo_kl': 1e-5, 'train/lr-pg_0': 1e-6 },
        },
        { step: 1, metrics: { 'train/loss': 9, 'train/ppo_kl': 2e-5, 'train/entropy_loss': 0.8 } },
      ],
      'slime log',
    )!;
    // pg_loss is the policy loss wherever a step has it; a step without it is null, never its `loss`.
    expect(r.keys).toEqual({
      policy_loss: 'train/pg_loss',
      kl: 'train/ppo_kl',
      entropy: 'train/entropy_loss',
      lr: 'train/lr-pg_0',
    });
    expect(r.per_step['1']).toEqual({ policy_loss: null, kl: 2e-5, entropy: 0.8, lr: null });
    expect(r.per_step['2']).toMatchObject({ policy_loss: -0.2, kl: 1e-5, entropy: null, lr: 1e-6 });
    expect(Object.keys(r.missing).sort()).toEqual(['clip_fraction', 'grad_norm', 'logprob_gap']);
    expect(r.missing.grad_norm).toBe('grad_norm');
    expect(trainerRecord([{ step: 1, metrics: { tokens: 5, nan: Number.NaN } }], 'x')).toBeNull();
    // A step read back from metrics.jsonl (`train/loss`) beside one from the trainer hook (`loss`).
    const mixed = trainerRecord(
      [
        { step: 1, metrics: { 'train/loss': 0.3 } },
        { step: 2, metrics: { loss: 0.2 } },
      ],
      'trainer hook',
    )!;
    expect(mixed.per_step).toEqual({ '1': { policy_loss: 0.3 }, '2': { policy_loss: 0.2 } });
  });

  it("takes slime's `step K:` train lines, each rollout's the mean over its optimizer steps", () => {
    const log = [
      "(RolloutManager pid=1) [2026-08-21 11:00:01] rollout.py:88 - perf 0: {'perf/rollout_time': 100.0}",
      "(MegatronTrainRayActor pid=2) [2026-08-21 11:01:00] model.py:700 - step 0: {'train/loss': 0.5, 'train/pg_loss': 0.4, 'train/grad_norm': 1.0, 'train/lr-pg_0': 1e-06, 'train/step': 0}",
      "(MegatronTrainRayActor pid=2) [2026-08-21 11:01:10] model.py:700 - step 1: {'train/loss': 0.7, 'train/pg_loss': 0.6, 'train/grad_norm': 3.0, 'train/lr-pg_0': 2e-06, 'train/step': 1}",
      "(MegatronTrainRayActor pid=2) [2026-08-21 11:01:11] model.py:700 - critic-step 1: {'train/critic-value_loss': 7.0}",
      "(MegatronTrainRayActor pid=2) [2026-08-21 11:02:00] train_metric_utils.py:62 - perf 0: {'perf/train_time': 60.0, 'perf/train_wait_time': 100.0}",
      "(MegatronTrainRayActor pid=2) [2026-08-21 11:03:00] model.py:700 - step 2: {'train/pg_loss': 0.1, 'train/step': 2}",
      "(MegatronTrainRayActor pid=2) [2026-08-21 11:03:00] model.py:700 - step 3: {'train/pg_loss': oops}",
    ].join('\n');
    const perf = parseSlimePerfLog(log);
    expect(perf.steps[0]!.train).toEqual({
      'train/loss': 0.6,
      'train/pg_loss': 0.5,
      'train/grad_norm': 2,
      'train/lr-pg_0': 1.5e-6,
      'train/step': 0.5,
    });
    expect(perf.steps[0]!.trainSteps).toBe(2);
    // The critic's line is not the actor's; the last line has no train-side perf line after it.
    expect(perf).toMatchObject({ trainLines: 3, unattributedTrainLines: 1, malformed: 1 });
    const record = runReport({ perf });
    expect(record.trainer).toMatchObject({
      source: expect.stringMatching(/slime log/),
      keys: { policy_loss: 'train/pg_loss', grad_norm: 'train/grad_norm', lr: 'train/lr-pg_0' },
      per_step: { '0': { policy_loss: 0.5, grad_norm: 2, lr: 1.5e-6 } },
    });
  });
});

describe('shapeRecord', () => {
  it('per step: truncation over scored rollouts, turns, zero-variance groups, tokens and advantages from rows', () => {
    const rows = (advantage: number, mask: number[]) => [
      createSample({ response_length: mask.length, loss_mask: mask, metadata: { advantage } }),
    ];
    const step1 = [
      result(0, 1, { turns: 4, samples: rows(0.5, [1, 1, 0, 1]) }),
      result(0, 0, { turns: 2, samples: rows(-0.5, [1, 1]), status: 'truncated' } as Partial<RolloutResult>),
      result(1, 1, { turns: 6, samples: [...rows(0, [1]), ...rows(0, [0, 0, 1])] }),
      result(1, 1, { turns: 1, samples: rows(0, [1]) }),
      result(2, null),
    ];
    const s = shapeRecord(step1.map((r) => rolloutShapeOf(1, r)))!;
    expect(s.per_step['1']).toEqual({
      rollouts: 5,
      scored: 4,
      truncated: 1,
      truncation_rate: 0.25,
      turns_mean: 13 / 4,
      turns_max: 6,
      with_rows: 4,
      response_tokens_mean: (4 + 2 + 4 + 1) / 4,
      response_tokens_max: 4,
      trained_tokens_mean: (3 + 2 + 2 + 1) / 4,
      groups: 2,
      zero_variance_groups: 1,
      zero_variance_fraction: 0.5,
      advantage: { count: 4, zero: 2, mean: 0, min: -0.5, p25: -0.125, p50: 0, p75: 0.125, max: 0.5 },
    });
    // Round bin edges; every rollout in one bin.
    expect(s.advantage_histogram!.edges[0]).toBe(-0.5);
    expect(s.advantage_histogram!.counts['1']!.reduce((a, b) => a + b, 0)).toBe(4);
    // Without groups (slime's [agent] lines) there is no zero-variance figure, and the page says why.
    const ungrouped = shapeRecord(step1.map((r) => rolloutShapeOf(1, r, null)))!;
    expect(ungrouped.per_step['1']!.zero_variance_fraction).toBeNull();
    expect(ungrouped.notes.join(' ')).toMatch(/does not say which prompt group/);
    expect(shapeRecord([])).toBeNull();
  });
});

describe('the committed H200 run, read back from its files as they are', () => {
  const file = parseMetricsFile(readFileSync(`${EVIDENCE}train__metrics.jsonl`, 'utf8'));
  const rows = new Map([[10, decodeSamples(readFileSync(`${EVIDENCE}step-10/batch.msgpack`))]]);
  const record = runReport(reportInputFromMetrics(file, { rows }));
  const trainerLines = readFileSync(`${EVIDENCE}train__trainer__metrics.jsonl`, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { step: number; metrics: Record<string, number> });

  it("draws the trainer's own numbers, step by step, exactly as its trainer wrote them", () => {
    expect(file).toMatchObject({ starts: 1, malformed: 0 });
    expect(file.rollouts).toHaveLength(640);
    const t = record.trainer!;
    expect(t.keys).toEqual({
      policy_loss: 'train/loss',
      kl: 'train/ppo_kl',
      clip_fraction: 'train/pg_clipfrac',
      grad_norm: 'train/grad_norm',
      logprob_gap: 'train/logprob_abs_diff_mean',
    });
    // This trainer reports no entropy and no learning rate: said, not drawn as 0.
    expect(Object.keys(t.missing).sort()).toEqual(['entropy', 'lr']);
    expect(trainerLines).toHaveLength(10);
    for (const line of trainerLines) {
      expect(t.per_step[String(line.step)]).toEqual({
        policy_loss: line.metrics.loss,
        kl: line.metrics.ppo_kl,
        clip_fraction: line.metrics.pg_clipfrac,
        grad_norm: line.metrics.grad_norm,
        logprob_gap: line.metrics.logprob_abs_diff_mean,
      });
    }
  });

  it("agrees with the loop's own per-step counts; step 10's batch gives its lengths and advantages", () => {
    const shape = record.shape!;
    for (const s of file.steps) {
      const x = shape.per_step[String(s.step)]!;
      expect(x.zero_variance_groups, `step ${s.step}`).toBe(s.scalars['rollout/zero_variance_groups']);
      expect(x.truncated).toBe(s.scalars['rollout/truncated']);
      expect(x.turns_mean).toBe(s.scalars['rollout/turns_mean']);
      expect(record.quality[String(s.step)]!.reward_mean).toBeCloseTo(s.scalars['rollout/reward_mean']!, 12);
    }
    const batch = rows.get(10)!;
    const step10 = shape.per_step['10']!;
    expect(step10.with_rows).toBe(64);
    const perRollout = new Map<number | null, number>();
    for (const r of batch)
      perRollout.set(r.rollout_id, (perRollout.get(r.rollout_id) ?? 0) + r.response_length);
    expect(step10.response_tokens_max).toBe(Math.max(...perRollout.values()));
    // GRPO advantages of 8 groups: they sum to 0 within each group; 2 zero-variance groups give 16 zeros.
    expect(step10.advantage!.count).toBe(64);
    expect(step10.advantage!.zero).toBe(16);
    expect(Math.abs(step10.advantage!.mean)).toBeLessThan(1e-6);
    expect(shape.notes.join(' ')).toMatch(/no training rows for steps 1, 2, 3, 4, 5, 6, 7, 8, 9/);
    // The rollout lines carry each rollout's weight version: each step trained on the previous version.
    expect(record.staleness).toMatchObject({ rollouts_with_versions: 640, max_lag: 0, mixed_versions: 0 });
    expect(record.staleness!.by_version).toMatchObject({ '0': 64, '9': 64 });
  });

  it('writes a page with both sections and the trainer gaps named', () => {
    const html = renderHtmlReport(record);
    expect(html).toMatch(/data-section="trainer" data-empty="false"/);
    expect(html).toMatch(/data-section="shape" data-empty="false"/);
    expect(html).toMatch(/data-missing-trainer-metrics="entropy lr"/);
  });
});

describe('charts of signed, tiny values', () => {
  it('puts negative values above the bottom of the frame, draws the zero line, writes 2e-5 not 0.00002', () => {
    const svg = lineChart({
      title: 'loss',
      xLabel: 'step',
      yLabel: 'loss',
      series: [
        {
          name: 'loss',
          points: [
            [1, -6e-5],
            [2, 3e-5],
          ],
        },
      ],
    });
    const ys = [...svg.matchAll(/<circle cx="[\d.]+" cy="([\d.-]+)"/g)].map((m) => Number(m[1]));
    // Frame 260 high, 28 above and 40 below the plot.
    for (const y of ys) expect(y).toBeGreaterThanOrEqual(28 - 1e-9);
    for (const y of ys) expect(y).toBeLessThanOrEqual(260 - 40 + 1e-9);
    expect(svg).toContain('class="zero"');
    expect(svg).toMatch(/>-6e-5</);
    expect(svg).not.toMatch(/0\.0000/);
  });
});

describe('configDifferences', () => {
  it('lists the settings that differ with their sources; a run without settings is compared on its config', () => {
    const rec = (
      settings: Array<{ key: string; value: unknown; source: string }> | null,
      config: unknown,
    ) => {
      const r = runReport({ run: { config, ...(settings ? { settings } : {}) } });
      return r;
    };
    const a = rec(
      [
        { key: 'agents.max_turns', value: 3, source: 'flag --max-turns' },
        { key: 'run.steps', value: 2, source: 'flag --steps' },
      ],
      {},
    );
    const b = rec(
      [
        { key: 'agents.max_turns', value: 6, source: 'file b.yaml (agents.max_turns)' },
        { key: 'run.steps', value: 2, source: 'file b.yaml (run.steps)' },
      ],
      {},
    );
    const c = rec(null, { agents: { max_turns: 3 }, run: { steps: 2, extra: [1] } });
    const d = configDifferences([
      { label: 'a', record: a },
      { label: 'b', record: b },
      { label: 'c', record: c },
    ]);
    expect(d).toEqual({
      differences: [
        {
          key: 'agents.max_turns',
          values: [
            { value: 3, source: 'flag --max-turns' },
            { value: 6, source: 'file b.yaml (agents.max_turns)' },
            { value: 3, source: 'config' },
          ],
        },
        { key: 'run.extra', values: [null, null, { value: [1], source: 'config' }] },
      ],
      same: 1,
    });
  });
});
