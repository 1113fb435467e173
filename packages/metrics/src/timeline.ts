import type { SaturationPoint } from './saturation.js';

/** One engine's load over time as the report draws it. */
export interface EngineTimeline {
  engine: string;
  /** What `t` counts: seconds from the run's first reading, or the reading's index (logs without time). */
  x: 'seconds' | 'index';
  /** A `null` entry breaks the line: no reading for far longer than the engine's usual interval. */
  t: Array<number | null>;
  /** Mean of the readings a point stands for (one reading per point when there are few). */
  running: Array<number | null>;
  queued: Array<number | null>;
  kv: Array<number | null>;
  /** Most of the readings a point stands for, so a downsampled line never hides a peak. */
  running_max: Array<number | null>;
  queued_max: Array<number | null>;
  /** The highest reading of the run and when it was taken (`t` in the units of `x`). */
  peaks: {
    running: { t: number | null; value: number } | null;
    queued: { t: number | null; value: number } | null;
  };
  /** Median milliseconds between readings (`null` without timestamps). */
  interval_ms: number | null;
  /** Breaks drawn (stretches with no reading). */
  gaps: number;
}

const round = (v: number, digits = 2) => Math.round(v * 10 ** digits) / 10 ** digits;

/**
 * Downsample an engine's readings to at most `maxPoints` points (time buckets; empty buckets are
 * skipped, not drawn as zero) and break the line only where readings stop for more than ten usual
 * intervals (at least 5 s): an engine that logs only while it decodes shows its idle stretches as gaps.
 */
export function engineTimeline(
  engine: string,
  points: ReadonlyArray<SaturationPoint>,
  t0: number | null,
  maxPoints = 600,
): EngineTimeline {
  const timed = t0 !== null && points.length > 0 && points.every((p) => p.t !== null);
  const sorted = timed ? [...points].sort((a, b) => a.t! - b.t!) : [...points];
  const out: EngineTimeline = {
    engine,
    x: timed ? 'seconds' : 'index',
    t: [],
    running: [],
    queued: [],
    kv: [],
    running_max: [],
    queued_max: [],
    peaks: { running: null, queued: null },
    interval_ms: null,
    gaps: 0,
  };
  if (sorted.length === 0) return out;
  const xOf = (p: SaturationPoint, i: number) => (timed ? (p.t! - t0!) / 1000 : i);
  let peakRunning = -1;
  let peakQueued = -1;
  sorted.forEach((p, i) => {
    if (p.running > peakRunning) {
      peakRunning = p.running;
      out.peaks.running = { t: round(xOf(p, i), 3), value: p.running };
    }
    if (p.queued > peakQueued) {
      peakQueued = p.queued;
      out.peaks.queued = { t: round(xOf(p, i), 3), value: p.queued };
    }
  });
  let gapSec = Number.POSITIVE_INFINITY;
  if (timed && sorted.length > 1) {
    const deltas = sorted.slice(1).map((p, i) => p.t! - sorted[i]!.t!);
    deltas.sort((a, b) => a - b);
    out.interval_ms = deltas[Math.floor((deltas.length - 1) / 2)]!;
    gapSec = Math.max(10 * out.interval_ms, 5000) / 1000;
  }
  const span = timed ? (sorted.at(-1)!.t! - sorted[0]!.t!) / 1000 : sorted.length;
  const buckets = Math.min(maxPoints, sorted.length);
  const slot = (p: SaturationPoint, i: number) =>
    buckets === sorted.length
      ? i
      : Math.min(
          buckets - 1,
          Math.floor(((timed ? (p.t! - sorted[0]!.t!) / 1000 : i) / Math.max(span, 1e-9)) * buckets),
        );
  const acc = new Map<
    number,
    { n: number; x: number; run: number; q: number; kv: number; runMax: number; qMax: number }
  >();
  sorted.forEach((p, i) => {
    const k = slot(p, i);
    const a = acc.get(k) ?? { n: 0, x: 0, run: 0, q: 0, kv: 0, runMax: 0, qMax: 0 };
    a.n++;
    a.x += xOf(p, i);
    a.run += p.running;
    a.q += p.queued;
    a.kv += p.kvUsage;
    a.runMax = Math.max(a.runMax, p.running);
    a.qMax = Math.max(a.qMax, p.queued);
    acc.set(k, a);
  });
  const bucketSec = timed ? span / buckets : 0;
  let lastX: number | null = null;
  for (const k of [...acc.keys()].sort((a, b) => a - b)) {
    const a = acc.get(k)!;
    const x = a.x / a.n;
    if (lastX !== null && x - lastX > Math.max(gapSec, 2 * bucketSec)) {
      for (const series of [out.t, out.running, out.queued, out.kv, out.running_max, out.queued_max])
        series.push(null);
      out.gaps++;
    }
    out.t.push(round(x, 3));
    out.running.push(round(a.run / a.n));
    out.queued.push(round(a.q / a.n));
    out.kv.push(round(a.kv / a.n, 3));
    out.running_max.push(a.runMax);
    out.queued_max.push(a.qMax);
    lastX = x;
  }
  return out;
}
