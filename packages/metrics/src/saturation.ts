import { percentileOfSorted, sortedCopy } from './percentile.js';

/** One reading of an engine's load: from a decode-batch log line or a `/metrics` scrape. */
export interface SaturationPoint {
  /** Milliseconds since the epoch, or `null` when unknown. */
  t: number | null;
  running: number;
  queued: number;
  /** KV-cache usage, 0..1. */
  kvUsage: number;
  /** Decode tokens/s the engine reported with the reading (SGLang's "gen throughput"), when it did. */
  genThroughput?: number | undefined;
}

/** The peak and the median of a metric. */
export interface PeakMedian {
  peak: number | null;
  /** Nearest-rank median (an observed value). */
  median: number | null;
}

/** One engine's saturation over a run. */
export interface EngineSaturation {
  points: number;
  /** First and last timestamps, when the points carry them. */
  start: number | null;
  end: number | null;
  running: PeakMedian;
  queued: PeakMedian;
  kvUsage: PeakMedian;
  /**
   * Mean of each quantity in `buckets` equal slices of the run (by time when every point has one, else
   * by position): a readable downsample of the raw stream. `null` marks a slice with no reading.
   */
  deciles: { running: Array<number | null>; queued: Array<number | null>; kvUsage: Array<number | null> };
}

function peakMedian(values: number[]): PeakMedian {
  if (values.length === 0) return { peak: null, median: null };
  const sorted = sortedCopy(values);
  return {
    peak: sorted[sorted.length - 1]!,
    median: percentileOfSorted(sorted, 50, { method: 'nearest-rank' }),
  };
}

/**
 * Downsample points into `buckets` slices, averaging each field. Slices are equal spans of time when
 * every point has a timestamp (and the span is not zero), else equal runs of points.
 */
export function bucketMeans(
  points: ReadonlyArray<SaturationPoint>,
  buckets: number,
): {
  t: Array<number | null>;
  running: Array<number | null>;
  queued: Array<number | null>;
  kvUsage: Array<number | null>;
} {
  const sums = Array.from({ length: buckets }, () => ({ n: 0, t: 0, running: 0, queued: 0, kv: 0 }));
  const timed = points.length > 0 && points.every((p) => p.t !== null);
  let t0 = 0;
  let span = 0;
  if (timed) {
    t0 = Number.POSITIVE_INFINITY;
    let t1 = Number.NEGATIVE_INFINITY;
    for (const p of points) {
      t0 = Math.min(t0, p.t!);
      t1 = Math.max(t1, p.t!);
    }
    span = t1 - t0;
  }
  points.forEach((p, i) => {
    const slot =
      timed && span > 0
        ? Math.min(buckets - 1, Math.floor(((p.t! - t0) / span) * buckets))
        : Math.min(buckets - 1, Math.floor((i / points.length) * buckets));
    const s = sums[slot]!;
    s.n++;
    s.t += p.t ?? 0;
    s.running += p.running;
    s.queued += p.queued;
    s.kv += p.kvUsage;
  });
  const mean = (s: (typeof sums)[number], v: number) => (s.n === 0 ? null : v / s.n);
  return {
    t: sums.map((s) => (timed ? mean(s, s.t) : null)),
    running: sums.map((s) => mean(s, s.running)),
    queued: sums.map((s) => mean(s, s.queued)),
    kvUsage: sums.map((s) => mean(s, s.kv)),
  };
}

/** Peak and median running/queued requests and KV usage, plus decile traces, for one engine. */
export function engineSaturation(
  points: ReadonlyArray<SaturationPoint>,
  options: { buckets?: number | undefined } = {},
): EngineSaturation {
  const timestamps = points.filter((p) => p.t !== null).map((p) => p.t!);
  const { running, queued, kvUsage } = bucketMeans(points, options.buckets ?? 10);
  return {
    points: points.length,
    start: timestamps.length ? timestamps.reduce((a, b) => Math.min(a, b)) : null,
    end: timestamps.length ? timestamps.reduce((a, b) => Math.max(a, b)) : null,
    running: peakMedian(points.map((p) => p.running)),
    queued: peakMedian(points.map((p) => p.queued)),
    kvUsage: peakMedian(points.map((p) => p.kvUsage)),
    deciles: { running, queued, kvUsage },
  };
}
