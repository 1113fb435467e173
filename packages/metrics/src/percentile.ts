import { ValidationError } from '@vime/core';

/**
 * How a percentile is read off sorted data `x[0..n−1]` (p in 0..100):
 * - `linear` (default; numpy's default, Hyndman–Fan type 7): `h = (n−1)·p/100`, interpolate between
 *   `x[⌊h⌋]` and `x[⌈h⌉]`. Smooth, may return a value that was never observed.
 * - `nearest-rank`: the smallest observed value with at least p% of the data at or below it,
 *   `x[⌈p/100·n⌉ − 1]` (`x[0]` for p = 0). Always an observed value.
 * - `lower`: `x[⌊(n−1)·p/100⌋]`, the observed value the streaming `QuantileSketch` approximates.
 */
export type PercentileMethod = 'linear' | 'nearest-rank' | 'lower';

/** Options of the percentile functions. */
export interface PercentileOptions {
  method?: PercentileMethod | undefined;
}

function checkP(p: number): void {
  if (!(p >= 0 && p <= 100)) {
    throw new ValidationError(
      'p',
      `percentile must be within 0..100, found ${String(p)} (p95 is 95, not 0.95)`,
    );
  }
}

/** Read percentile `p` (0..100) from already ascending-sorted values. `NaN` when empty. */
export function percentileOfSorted(
  sorted: ArrayLike<number>,
  p: number,
  options: PercentileOptions = {},
): number {
  checkP(p);
  const n = sorted.length;
  if (n === 0) return Number.NaN;
  const method = options.method ?? 'linear';
  if (method === 'nearest-rank') return sorted[Math.max(0, Math.ceil((p / 100) * n) - 1)]!;
  const h = ((n - 1) * p) / 100;
  const lo = Math.floor(h);
  if (method === 'lower' || lo === n - 1) return sorted[lo]!;
  const a = sorted[lo]!;
  return a + (h - lo) * (sorted[lo + 1]! - a);
}

/** Copy, reject NaN (naming the index), and sort ascending. */
export function sortedCopy(values: ArrayLike<number>, what = 'values'): Float64Array {
  const out = Float64Array.from(values);
  for (let i = 0; i < out.length; i++) {
    if (Number.isNaN(out[i]!)) throw new ValidationError(`${what}[${i}]`, 'expected a number, found NaN');
  }
  return out.sort();
}

/**
 * Exact percentile `p` (0..100) of a batch of values (see `PercentileMethod` for the definitions;
 * default `linear`). Returns `NaN` for an empty batch; throws `ValidationError` for NaN inputs.
 */
export function percentile(values: ArrayLike<number>, p: number, options: PercentileOptions = {}): number {
  checkP(p);
  return percentileOfSorted(sortedCopy(values), p, options);
}

/** Several percentiles of one batch, sorting once. */
export function percentiles(
  values: ArrayLike<number>,
  ps: ReadonlyArray<number>,
  options: PercentileOptions = {},
): number[] {
  const sorted = sortedCopy(values);
  return ps.map((p) => percentileOfSorted(sorted, p, options));
}

/** count, mean, min, p50, p95, p99, max of a batch; every statistic `null` when the batch is empty. */
export interface Summary {
  count: number;
  mean: number | null;
  min: number | null;
  p50: number | null;
  p95: number | null;
  p99: number | null;
  max: number | null;
}

/** Count, mean, min, p50, p95, p99 and max of `values`. */
export function summarize(values: ArrayLike<number>, options: PercentileOptions = {}): Summary {
  const sorted = sortedCopy(values);
  const n = sorted.length;
  if (n === 0) return { count: 0, mean: null, min: null, p50: null, p95: null, p99: null, max: null };
  let sum = 0;
  for (let i = 0; i < n; i++) sum += sorted[i]!;
  return {
    count: n,
    mean: sum / n,
    min: sorted[0]!,
    p50: percentileOfSorted(sorted, 50, options),
    p95: percentileOfSorted(sorted, 95, options),
    p99: percentileOfSorted(sorted, 99, options),
    max: sorted[n - 1]!,
  };
}

/**
 * Streaming quantiles for long runs in bounded memory (the DDSketch scheme: logarithmic buckets).
 * `quantile(q)` is within relative error `relativeAccuracy` of the exact `lower` percentile
 * `x[⌊q·(n−1)⌋]`, for any data, and sketches with the same accuracy merge exactly. Memory grows with
 * the log of the value range (about 1,200 buckets for 1 µs … 3 h at 1 %), not with the count.
 */
export class QuantileSketch {
  readonly relativeAccuracy: number;
  private readonly gamma: number;
  private readonly logGamma: number;
  private readonly positive = new Map<number, number>();
  private readonly negative = new Map<number, number>();
  private zeros = 0;
  count = 0;
  sum = 0;
  min = Number.POSITIVE_INFINITY;
  max = Number.NEGATIVE_INFINITY;

  constructor(options: { relativeAccuracy?: number | undefined } = {}) {
    const alpha = options.relativeAccuracy ?? 0.01;
    if (!(alpha > 0 && alpha < 1)) {
      throw new ValidationError('relativeAccuracy', `expected a number in (0, 1), found ${String(alpha)}`);
    }
    this.relativeAccuracy = alpha;
    this.gamma = (1 + alpha) / (1 - alpha);
    this.logGamma = Math.log(this.gamma);
  }

  /** Add a value with a weight. */
  add(value: number, weight = 1): this {
    if (!Number.isFinite(value)) {
      throw new ValidationError('value', `QuantileSketch accepts finite numbers, found ${String(value)}`);
    }
    // Values this close to 0 share the zero bucket (the relative guarantee needs a floor).
    if (Math.abs(value) < 1e-300) this.zeros += weight;
    else {
      const store = value > 0 ? this.positive : this.negative;
      const key = Math.ceil(Math.log(Math.abs(value)) / this.logGamma);
      store.set(key, (store.get(key) ?? 0) + weight);
    }
    this.count += weight;
    this.sum += value * weight;
    if (value < this.min) this.min = value;
    if (value > this.max) this.max = value;
    return this;
  }

  /** Fold another sketch (same accuracy) into this one. */
  merge(other: QuantileSketch): this {
    if (other.relativeAccuracy !== this.relativeAccuracy) {
      throw new ValidationError(
        'other.relativeAccuracy',
        `cannot merge sketches of accuracy ${other.relativeAccuracy} into ${this.relativeAccuracy}; build both with the same relativeAccuracy`,
      );
    }
    for (const [k, v] of other.positive) this.positive.set(k, (this.positive.get(k) ?? 0) + v);
    for (const [k, v] of other.negative) this.negative.set(k, (this.negative.get(k) ?? 0) + v);
    this.zeros += other.zeros;
    this.count += other.count;
    this.sum += other.sum;
    this.min = Math.min(this.min, other.min);
    this.max = Math.max(this.max, other.max);
    return this;
  }

  /** Buckets in use (the sketch's memory, independent of `count`). */
  get buckets(): number {
    return this.positive.size + this.negative.size + (this.zeros > 0 ? 1 : 0);
  }

  /** The mean of the values added. */
  get mean(): number {
    return this.count === 0 ? Number.NaN : this.sum / this.count;
  }

  /** Approximate quantile, `q` in 0..1. `NaN` when empty. */
  quantile(q: number): number {
    if (!(q >= 0 && q <= 1)) {
      throw new ValidationError('q', `quantile must be within 0..1, found ${String(q)} (p95 is 0.95)`);
    }
    if (this.count === 0) return Number.NaN;
    if (q === 0) return this.min;
    if (q === 1) return this.max;
    const rank = q * (this.count - 1);
    let seen = 0;
    const value = (key: number) => (2 * this.gamma ** key) / (this.gamma + 1);
    const neg = [...this.negative.keys()].sort((a, b) => b - a);
    for (const key of neg) {
      seen += this.negative.get(key)!;
      if (seen > rank) return this.clamp(-value(key));
    }
    seen += this.zeros;
    if (seen > rank) return 0;
    const pos = [...this.positive.keys()].sort((a, b) => a - b);
    for (const key of pos) {
      seen += this.positive.get(key)!;
      if (seen > rank) return this.clamp(value(key));
    }
    return this.max;
  }

  private clamp(v: number): number {
    return Math.min(this.max, Math.max(this.min, v));
  }
}
