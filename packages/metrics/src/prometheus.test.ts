import { describe, expect, it } from 'vitest';
import { type LoadState, sglangMetrics, vllmMetrics } from './__fixtures__/metrics-text.js';
import {
  counterIncrease,
  engineSnapshot,
  engineWindow,
  histogramIncrease,
  histogramQuantile,
  parsePrometheusText,
} from './prometheus.js';

const load = (over: Partial<LoadState> = {}): LoadState => ({
  running: 48,
  queued: 17,
  kvUsage: 0.83,
  promptTokens: 1_000_000,
  generationTokens: 250_000,
  ttft: [10, 40, 70, 90, 99, 100],
  ttftSum: 42.5,
  ...over,
});

describe('parsePrometheusText', () => {
  it('reads samples, labels with escapes, special values, timestamps and TYPE lines', () => {
    const r = parsePrometheusText(
      [
        '# HELP x_total A counter.',
        '# TYPE x_total counter',
        'x_total{path="/a\\"b\\\\c\\nd",code="200",} 3 1700000000000',
        'plain 1.5e+3',
        'nan_gauge NaN',
        'up{le="+Inf"} +Inf',
        'down -Inf',
        '   indented{a="1"} 2',
        '',
        '\r',
      ].join('\n'),
    );
    expect(r.malformed).toBe(0);
    expect(r.types).toEqual({ x_total: 'counter' });
    expect(r.samples[0]).toEqual({
      name: 'x_total',
      labels: { path: '/a"b\\c\nd', code: '200' },
      value: 3,
      timestampMs: 1_700_000_000_000,
    });
    expect(r.samples.slice(1).map((s) => [s.name, s.value])).toEqual([
      ['plain', 1500],
      ['nan_gauge', Number.NaN],
      ['up', Number.POSITIVE_INFINITY],
      ['down', Number.NEGATIVE_INFINITY],
      ['indented', 2],
    ]);
  });

  it('counts malformed lines (never throws) and keeps the good ones around them', () => {
    const r = parsePrometheusText(
      [
        'good 1',
        'no_value',
        'bad{unterminated="x} 1',
        'bad_value abc',
        '1starts_with_digit 3',
        'bad{a="1"b="2"} 1',
        'also_good{a="1"} 2',
        'trailing 1 notatime',
      ].join('\n'),
    );
    expect(r.samples.map((s) => s.name)).toEqual(['good', 'also_good']);
    expect(r.malformed).toBe(6);
    expect(r.malformedLines).toEqual([2, 3, 4, 5, 6, 8]);
  });
});

describe('engineSnapshot', () => {
  it('reads SGLang metric names', () => {
    const s = engineSnapshot(parsePrometheusText(sglangMetrics(load())));
    expect(s).toMatchObject({
      engine: 'sglang',
      running: 48,
      queued: 17,
      kvUsage: 0.83,
      prefixCacheHitRate: 0.625,
    });
    expect(s.counters).toMatchObject({ promptTokens: 1_000_000, generationTokens: 250_000 });
    expect(s.histograms.ttft).toEqual({
      buckets: [
        [0.1, 10],
        [0.25, 40],
        [0.5, 70],
        [1, 90],
        [2.5, 99],
        [Number.POSITIVE_INFINITY, 100],
      ],
      count: 100,
      sum: 42.5,
    });
  });

  it('sums vLLM engine cores and ignores look-alike names', () => {
    const s = engineSnapshot(parsePrometheusText(vllmMetrics(load({ running: 7, queued: 3 }))));
    expect(s).toMatchObject({
      engine: 'vllm',
      running: 7,
      queued: 3,
      kvUsage: 0.83,
      prefixCacheHitRate: 0.25,
    });
    expect(s.counters).toMatchObject({ promptTokens: 1_000_000, preemptions: 4, requestSuccess: 12 });
    expect(s.histograms.ttft!.count).toBe(100);
    expect(s.histograms.ttft!.buckets[1]).toEqual([0.25, 40]);
    // The deprecated gauge name still works.
    const old = engineSnapshot(
      parsePrometheusText('vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.5\n'),
    );
    expect(old).toMatchObject({ engine: 'vllm', kvUsage: 0.5, queued: null });
  });
});

describe('histograms and counters', () => {
  it('computes quantiles from buckets like histogram_quantile', () => {
    const h = engineSnapshot(parsePrometheusText(sglangMetrics(load()))).histograms.ttft!;
    expect(histogramQuantile(h, 0.5)).toBeCloseTo(0.25 + (0.25 * (50 - 40)) / 30, 12);
    expect(histogramQuantile(h, 0.05)).toBeCloseTo(0.05, 12);
    expect(histogramQuantile(h, 0.95)).toBeCloseTo(1 + (1.5 * 5) / 9, 12);
    // A rank in the +Inf bucket reports the largest finite bound.
    expect(histogramQuantile(h, 0.999)).toBe(2.5);
    expect(
      histogramQuantile(
        {
          buckets: [
            [1, 0],
            [Number.POSITIVE_INFINITY, 0],
          ],
          count: 0,
          sum: 0,
        },
        0.5,
      ),
    ).toBeNull();
  });

  it('handles counter resets (engine restarts)', () => {
    expect(counterIncrease([100, 150, 30, 80, null, 100])).toBe(50 + 30 + 50 + 20);
    expect(counterIncrease([5])).toBe(0);
    const a = engineSnapshot(
      parsePrometheusText(sglangMetrics(load({ ttft: [10, 40, 70, 90, 99, 100], ttftSum: 40 }))),
    ).histograms.ttft;
    const b = engineSnapshot(
      parsePrometheusText(sglangMetrics(load({ ttft: [20, 60, 100, 130, 140, 150], ttftSum: 60 }))),
    ).histograms.ttft;
    const restarted = engineSnapshot(
      parsePrometheusText(sglangMetrics(load({ ttft: [1, 2, 3, 4, 5, 5], ttftSum: 2 }))),
    ).histograms.ttft;
    const inc = histogramIncrease([a, b, restarted])!;
    expect(inc.count).toBe(50 + 5);
    expect(inc.sum).toBeCloseTo(20 + 2, 12);
    expect(inc.buckets).toEqual([
      [0.1, 11],
      [0.25, 22],
      [0.5, 33],
      [1, 44],
      [2.5, 46],
      [Number.POSITIVE_INFINITY, 55],
    ]);
  });
});

describe('engineWindow', () => {
  it('summarizes a window of scrapes across an engine restart', () => {
    const at = (t: number, s: LoadState) => ({
      t,
      snapshot: engineSnapshot(parsePrometheusText(vllmMetrics(s))),
    });
    const w = engineWindow([
      at(0, load({ promptTokens: 1000, generationTokens: 100, ttft: [0, 0, 0, 0, 0, 0] })),
      at(10_000, load({ promptTokens: 5000, generationTokens: 900, ttft: [10, 40, 70, 90, 99, 100] })),
      // restart: counters start again
      at(20_000, load({ promptTokens: 2000, generationTokens: 200, ttft: [2, 2, 2, 2, 2, 2] })),
    ]);
    expect(w).toMatchObject({
      scrapes: 3,
      seconds: 20,
      promptTokens: 4000 + 2000,
      generationTokens: 800 + 200,
      preemptions: 0,
    });
    // vLLM: hits/queries counters (hits are a quarter of queries in the fixture)
    expect(w.prefixCacheHitRate).toBeCloseTo(0.25, 12);
    expect(w.ttft).toMatchObject({ count: 102 });
    expect(w.ttft!.p50).toBeCloseTo(0.25 + (0.25 * (51 - 42)) / 30, 12);
    expect(engineWindow([])).toMatchObject({ scrapes: 0, ttft: null, prefixCacheHitRate: null });
  });
});
