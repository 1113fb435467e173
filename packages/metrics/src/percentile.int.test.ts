import { execFileSync } from 'node:child_process';
import { seededRandom } from '@vime/core/utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { percentile, percentiles, QuantileSketch, summarize } from './percentile.js';

/** numpy's own percentile for the same data (linear = 'linear', nearest-rank = 'inverted_cdf'). */
function numpyPercentiles(data: number[][], ps: number[]): Record<string, number[][]> {
  const script = `
import json, sys, numpy as np
data, ps = json.load(sys.stdin)
out = {m: [[float(np.percentile(np.array(d), p, method=m)) for p in ps] for d in data]
       for m in ("linear", "inverted_cdf", "lower")}
print(json.dumps(out))`;
  return JSON.parse(
    execFileSync('python3', ['-c', script], { input: JSON.stringify([data, ps]) }).toString(),
  );
}

describe('percentile', () => {
  it('agrees with numpy for linear, nearest-rank (inverted_cdf) and lower', () => {
    const random = seededRandom(7);
    const data = [
      [5],
      [1, 2],
      [3, 1, 2],
      [0, 0, 0, 10],
      Array.from({ length: 101 }, (_, i) => i * 1.5),
      Array.from({ length: 1000 }, () => Math.floor(random() * 5000) / 7),
      Array.from({ length: 37 }, () => -50 + random() * 100),
    ];
    const ps = [0, 1, 5, 10, 25, 33.3, 50, 66.7, 75, 90, 95, 99, 99.9, 100];
    const want = numpyPercentiles(data, ps);
    const methods = { linear: 'linear', inverted_cdf: 'nearest-rank', lower: 'lower' } as const;
    for (const [np, method] of Object.entries(methods)) {
      data.forEach((d, i) => {
        const got = percentiles(d, ps, { method });
        got.forEach((v, j) => {
          expect(Math.abs(v - want[np]![i]![j]!), `${method} p${ps[j]} of dataset ${i}`).toBeLessThanOrEqual(
            1e-9 * Math.max(1, Math.abs(want[np]![i]![j]!)),
          );
        });
      });
    }
  });

  it('defaults to linear interpolation and returns NaN for an empty batch', () => {
    expect(percentile([1, 2, 3, 4], 50)).toBe(2.5);
    expect(percentile([1, 2, 3, 4], 50, { method: 'nearest-rank' })).toBe(2);
    expect(percentile([], 50)).toBeNaN();
  });

  it('rejects p outside 0..100 and NaN data, naming what is wrong', () => {
    expect(() => percentile([1], 0.95 * 200)).toThrow(/within 0\.\.100/);
    expect(() => percentile([1, Number.NaN], 50)).toThrow(/values\[1\]: expected a number, found NaN/);
  });

  it('summarizes a batch and reports nulls for an empty one', () => {
    expect(summarize([4, 1, 3, 2])).toEqual({
      count: 4,
      mean: 2.5,
      min: 1,
      p50: 2.5,
      p95: 3.85,
      p99: 3.97,
      max: 4,
    });
    expect(summarize([])).toEqual({
      count: 0,
      mean: null,
      min: null,
      p50: null,
      p95: null,
      p99: null,
      max: null,
    });
  });
});

describe('QuantileSketch', () => {
  it('stays within its relative accuracy of the exact lower percentile on any data', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: -1e6, max: 1e6, noNaN: true }), { minLength: 1, maxLength: 400 }),
        fc.constantFrom(0.005, 0.01, 0.05),
        (values, alpha) => {
          const sketch = new QuantileSketch({ relativeAccuracy: alpha });
          for (const v of values) sketch.add(v);
          for (const q of [0, 0.01, 0.1, 0.5, 0.9, 0.95, 0.99, 1]) {
            const exact = percentile(values, q * 100, { method: 'lower' });
            const got = sketch.quantile(q);
            expect(Math.abs(got - exact)).toBeLessThanOrEqual(alpha * Math.abs(exact) + 1e-300);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it('keeps bounded memory over a long stream and merges exactly', () => {
    const random = seededRandom(3);
    const a = new QuantileSketch();
    const b = new QuantileSketch();
    const all = new QuantileSketch();
    const values: number[] = [];
    for (let i = 0; i < 200_000; i++) {
      // log-normal-ish latencies in ms
      const v = Math.exp(3 + 2 * (random() + random() + random() - 1.5));
      values.push(v);
      (i % 2 ? a : b).add(v);
      all.add(v);
    }
    a.merge(b);
    for (const q of [0.5, 0.95, 0.99]) {
      expect(a.quantile(q)).toBe(all.quantile(q));
      const exact = percentile(values, q * 100, { method: 'lower' });
      expect(Math.abs(all.quantile(q) - exact) / exact).toBeLessThanOrEqual(0.01);
    }
    expect(all.count).toBe(200_000);
    expect(all.buckets).toBeLessThan(1000);
    expect(all.mean).toBeCloseTo(values.reduce((s, v) => s + v, 0) / values.length, 6);
    expect(() => a.merge(new QuantileSketch({ relativeAccuracy: 0.02 }))).toThrow(/same relativeAccuracy/);
    expect(() => a.quantile(95)).toThrow(/within 0\.\.1/);
    expect(new QuantileSketch().quantile(0.5)).toBeNaN();
  });
});
