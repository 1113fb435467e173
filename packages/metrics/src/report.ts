import { type EngineWindow, engineWindow, type ScrapeSeries } from './prometheus.js';
import type { RolloutMetrics } from './rollout.js';
import { bucketMeans, type EngineSaturation, engineSaturation, type SaturationPoint } from './saturation.js';
import type { PerfStep, SlimePerfLog } from './slime-perf.js';

export interface EngineInput {
  /** A name for the engine (e.g. `eng0` or its host). */
  name: string;
  /** Load readings over time: decode-batch samples or scrape snapshots mapped to `SaturationPoint`s. */
  points: ReadonlyArray<SaturationPoint>;
  /** Prometheus scrapes of the engine, when it was scraped: adds tokens, prefix-cache hits and latency. */
  scrapes?: ScrapeSeries['scrapes'];
}

export interface RunReportInput {
  /** Run key, e.g. `async_3eng`. */
  name?: string;
  /** `sync` (rollout then train) or `async` (train overlaps rollout). */
  mode?: string;
  engines?: ReadonlyArray<EngineInput>;
  /** slime perf lines (a parsed log, or its steps). */
  perf?: SlimePerfLog | ReadonlyArray<PerfStep>;
  /** Rollout counts: metrics of the whole run, or plain counts. Default: the `[agent]` lines of `perf`. */
  rollouts?: RolloutMetrics | { completed: number; aborted: number; failed?: number };
  /** Reward and pass@k per step, from `rolloutMetrics` of each step's rollouts. */
  quality?: ReadonlyArray<{ step: number; metrics: RolloutMetrics }>;
  /** Slices in the decile traces (default 10). */
  buckets?: number;
  /** Points per engine in the charted timeline (default 120). */
  timelinePoints?: number;
}

/** slime's per-step timing, in the benchmark record's units (seconds). */
export interface StepRecord {
  step_time_sec: number | null;
  rollout_time_sec: number | null;
  train_time_sec: number | null;
  train_wait_time_sec: number | null;
  update_weights_time_sec: number | null;
  wait_time_ratio: number | null;
}

/**
 * One run as a benchmark record: the same keys as the coding-agent scaling benchmark (`mode`,
 * `engines`, `rollouts_completed`, `steps.{n}.*_sec`, per-engine peaks/medians and decile traces), plus
 * reward/pass@k per step and a downsampled timeline for charts.
 */
export interface RunRecord {
  name: string;
  mode: string | null;
  engines: number;
  rollouts_completed: number | null;
  rollouts_aborted: number | null;
  rollouts_failed: number | null;
  steps: Record<string, StepRecord>;
  saturation: {
    n_engines: number;
    engine_names: string[];
    samples_per_eng: number[];
    running_req_peak_per_eng: Array<number | null>;
    running_req_median_per_eng: Array<number | null>;
    queue_req_peak_per_eng: Array<number | null>;
    queue_req_median_per_eng: Array<number | null>;
    kv_cache_frac_peak_per_eng: Array<number | null>;
    /** From scrapes (`null` for engines read from logs): what each engine did over the scrape window. */
    scrape_window_per_eng?: Array<EngineWindow | null>;
    [deciles: `eng${number}_${'running_req' | 'queue_req' | 'kv_cache_frac'}_deciles`]: Array<number | null>;
  };
  quality: Record<string, { reward_mean: number | null; [passAtK: `pass@${number}`]: number | null }>;
  timeline: Array<{
    engine: string;
    /** What `t` counts: seconds from the run's first reading, or the reading's index (logs without time). */
    x: 'seconds' | 'index';
    t: Array<number | null>;
    running: Array<number | null>;
    queued: Array<number | null>;
  }>;
}

const round = (v: number | null, digits = 2) =>
  v === null || !Number.isFinite(v) ? null : Math.round(v * 10 ** digits) / 10 ** digits;

function stepRecord(s: PerfStep): StepRecord {
  const v = (x: number | undefined) => (x === undefined ? null : round(x, 1));
  return {
    step_time_sec: v(s.stepTime),
    rollout_time_sec: v(s.rolloutTime),
    train_time_sec: v(s.trainTime),
    train_wait_time_sec: v(s.trainWaitTime),
    update_weights_time_sec: v(s.updateWeightsTime),
    wait_time_ratio: s.waitTimeRatio === undefined ? null : round(s.waitTimeRatio, 2),
  };
}

function qualityFromPerf(s: PerfStep): RunRecord['quality'][string] | null {
  const q: RunRecord['quality'][string] = { reward_mean: null };
  let found = false;
  const reward = s.metrics['rollout/raw_reward'] ?? s.metrics['rollout/rewards'];
  if (typeof reward === 'number') {
    q.reward_mean = reward;
    found = true;
  }
  const sources: Array<Record<string, unknown>> = [s.metrics, s.agent ?? {}];
  for (const source of sources) {
    for (const [key, value] of Object.entries(source)) {
      const m = /(?:^|\/)pass@(\d+)$/.exec(key);
      if (m && typeof value === 'number') {
        q[`pass@${Number(m[1])}`] = value;
        found = true;
      }
    }
  }
  return found ? q : null;
}

function isRolloutMetrics(x: RunReportInput['rollouts']): x is RolloutMetrics {
  return typeof x === 'object' && x !== null && 'passAtK' in x;
}

/** Assemble a run's perf, rollout and engine data into one `RunRecord`. */
export function runReport(input: RunReportInput): RunRecord {
  const perfSteps: ReadonlyArray<PerfStep> = input.perf
    ? 'steps' in input.perf
      ? input.perf.steps
      : input.perf
    : [];
  const engines = input.engines ?? [];
  const buckets = input.buckets ?? 10;
  const sats: EngineSaturation[] = engines.map((e) => engineSaturation(e.points, { buckets }));

  let completed: number | null = null;
  let aborted: number | null = null;
  let failed: number | null = null;
  if (isRolloutMetrics(input.rollouts)) {
    completed = input.rollouts.rollouts.completed + input.rollouts.rollouts.truncated;
    aborted = input.rollouts.rollouts.aborted;
    failed = input.rollouts.rollouts.failed;
  } else if (input.rollouts) {
    completed = input.rollouts.completed;
    aborted = input.rollouts.aborted;
    failed = input.rollouts.failed ?? null;
  } else if (input.perf && 'rollouts' in input.perf) {
    const r = input.perf.rollouts;
    if (r.completed + r.aborted > 0) {
      completed = r.completed;
      aborted = r.aborted;
    }
  }

  const saturation: RunRecord['saturation'] = {
    n_engines: engines.length,
    engine_names: engines.map((e) => e.name),
    samples_per_eng: sats.map((s) => s.points),
    running_req_peak_per_eng: sats.map((s) => s.running.peak),
    running_req_median_per_eng: sats.map((s) => s.running.median),
    queue_req_peak_per_eng: sats.map((s) => s.queued.peak),
    queue_req_median_per_eng: sats.map((s) => s.queued.median),
    kv_cache_frac_peak_per_eng: sats.map((s) => round(s.kvUsage.peak)),
  };
  if (engines.some((e) => e.scrapes && e.scrapes.length > 0)) {
    saturation.scrape_window_per_eng = engines.map((e) =>
      e.scrapes?.length ? engineWindow(e.scrapes) : null,
    );
  }
  sats.forEach((s, i) => {
    saturation[`eng${i}_running_req_deciles`] = s.deciles.running.map((v) => round(v));
    saturation[`eng${i}_queue_req_deciles`] = s.deciles.queued.map((v) => round(v));
    saturation[`eng${i}_kv_cache_frac_deciles`] = s.deciles.kvUsage.map((v) => round(v));
  });

  const steps: Record<string, StepRecord> = {};
  const quality: RunRecord['quality'] = {};
  for (const s of perfSteps) {
    steps[String(s.rolloutId)] = stepRecord(s);
    const q = qualityFromPerf(s);
    if (q) quality[String(s.rolloutId)] = q;
  }
  for (const { step, metrics } of input.quality ?? []) {
    const q: RunRecord['quality'][string] = { reward_mean: metrics.reward.mean };
    for (const e of metrics.passAtK) q[`pass@${e.k}`] = e.value;
    quality[String(step)] = q;
  }

  const starts = sats.map((s) => s.start).filter((t): t is number => t !== null);
  const t0 = starts.length ? Math.min(...starts) : null;
  const timeline = engines.map((e) => {
    const means = bucketMeans(e.points, Math.min(input.timelinePoints ?? 120, Math.max(1, e.points.length)));
    return {
      engine: e.name,
      x: t0 === null ? ('index' as const) : ('seconds' as const),
      t: means.t.map((t, i) => (t === null ? (t0 === null ? i : null) : round((t - t0!) / 1000, 3))),
      running: means.running.map((v) => round(v)),
      queued: means.queued.map((v) => round(v)),
    };
  });

  return {
    name: input.name ?? `${input.mode ?? 'run'}_${engines.length}eng`,
    mode: input.mode ?? null,
    engines: engines.length,
    rollouts_completed: completed,
    rollouts_aborted: aborted,
    rollouts_failed: failed,
    steps,
    saturation,
    quality,
    timeline,
  };
}
