/**
 * The report's token-level staleness: per step, trained tokens (loss mask 1) by lag behind the trainer's
 * version, read from the rows' weight-version spans, through `runReport` and the HTML report.
 */
import { createSample, type RolloutResult } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { renderHtmlReport } from './html.js';
import { runReport } from './report.js';

type Span = [number, number, string];

/** A scored rollout of one row: its loss mask over the response, its spans and the trainer's version. */
function rollout(id: number, mask: number[], spans: Span[], trainer?: number): RolloutResult {
  const versions = [...new Set(spans.map((s) => s[2]))];
  const row = createSample({
    tokens: Int32Array.from([1, 2, ...mask.map((_, i) => 100 + i)]),
    response_length: mask.length,
    loss_mask: Uint8Array.from(mask),
    weight_versions: versions,
    metadata: {
      weight_version_spans: spans,
      ...(trainer === undefined ? {} : { staleness: { trainer_version: trainer, lag: 0 } }),
    },
  });
  return {
    taskId: `t${id}`,
    groupIndex: 0,
    sampleIndex: id,
    rolloutId: id,
    samples: [row],
    turns: 2,
    timings: {},
    metadata: {},
    status: 'completed',
    reward: 1,
  };
}

const failed: RolloutResult = {
  taskId: 'tf',
  groupIndex: 0,
  sampleIndex: 9,
  rolloutId: 9,
  samples: [],
  turns: 0,
  timings: {},
  metadata: {},
  status: 'failed',
  error: { code: 'token_audit_failed', message: 'refused at hand-off' },
};

const byStep = [
  {
    // Trainer at version 1: a row continued across the update (0 → 1, an observation between), one on 1.
    step: 1,
    results: [
      rollout(
        0,
        [1, 1, 1, 1, 0, 0, 1, 1, 1, 1],
        [
          [0, 4, '0'],
          [6, 10, '1'],
        ],
        1,
      ),
      rollout(1, [1, 1, 1, 1, 1, 1], [[0, 6, '1']], 1),
      failed,
    ],
  },
  {
    // Trainer at version 3: two tokens two versions behind, and a trained token no span covers.
    step: 2,
    results: [
      rollout(
        2,
        [1, 1, 1, 1, 1],
        [
          [0, 2, '1'],
          [2, 5, '3'],
        ],
        3,
      ),
      rollout(3, [1, 1, 1], [[0, 2, '3']], 3),
    ],
  },
  {
    // Rows without the trainer's version: lags from the step's newest token version (5).
    step: 3,
    results: [
      rollout(
        4,
        [1, 1, 1, 1],
        [
          [0, 2, '4'],
          [2, 4, '5'],
        ],
      ),
    ],
  },
];

describe("the report's token-level staleness", () => {
  it('counts trained tokens by lag behind the trainer per step, with their shares', () => {
    const record = runReport({ name: 'spans', results: byStep });
    const t = record.staleness!.tokens!;
    expect(t.per_step).toEqual([
      {
        step: 1,
        trainer_version: 1,
        trainer_version_from: 'rows',
        tokens: 14,
        lag: { '0': 10, '1': 4 },
        share: { '0': 10 / 14, '1': 4 / 14 },
        mean_lag: 4 / 14,
        max_lag: 1,
        unversioned: 0,
      },
      {
        step: 2,
        trainer_version: 3,
        trainer_version_from: 'rows',
        tokens: 7,
        lag: { '0': 5, '2': 2 },
        share: { '0': 5 / 7, '2': 2 / 7 },
        mean_lag: 4 / 7,
        max_lag: 2,
        unversioned: 1,
      },
      {
        step: 3,
        trainer_version: 5,
        trainer_version_from: 'newest_token',
        tokens: 4,
        lag: { '0': 2, '1': 2 },
        share: { '0': 0.5, '1': 0.5 },
        mean_lag: 0.5,
        max_lag: 1,
        unversioned: 0,
      },
    ]);
    expect(t).toMatchObject({
      tokens: 25,
      lag: { '0': 17, '1': 6, '2': 2 },
      share: { '0': 17 / 25, '1': 6 / 25, '2': 2 / 25 },
      mean_lag: 10 / 25,
      max_lag: 2,
      unversioned: 1,
    });
  });

  it('shows the per-step table and the shares in the HTML report', () => {
    const html = renderHtmlReport(runReport({ name: 'spans', results: byStep }));
    expect(html).toContain('Trained tokens by lag (trainer version − token version)');
    expect(html).toContain('<td>10 (71.4%)</td><td>4 (28.6%)</td><td>0 (0.0%)</td>');
    expect(html).toContain(
      '25 trained tokens carry a weight version: 68.0% at lag 0, 24.0% at lag 1, 8.0% at lag 2',
    );
  });

  it('is null without spans (results read back from a metrics file carry no rows)', () => {
    const bare = byStep.map((s) => ({
      ...s,
      results: s.results.map((r) => ({ ...r, samples: [] as never[], metadata: { weight_versions: ['1'] } })),
    }));
    const record = runReport({ name: 'bare', results: bare });
    expect(record.staleness!.rollouts_with_versions).toBeGreaterThan(0);
    expect(record.staleness!.tokens).toBeNull();
  });
});
