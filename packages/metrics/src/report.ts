import type { RolloutResult } from '@vime/core';
import { type Summary, summarize } from './percentile.js';
import { type EngineWindow, engineWindow } from './prometheus.js';
import type { CapacityInput, RunReportInput, RunSetting, StepPhase } from './report-input.js';
import { type RolloutMetrics, rolloutMetrics } from './rollout.js';
import {
  countMetadata,
  failuresByCause,
  type PhaseTiming,
  phaseTiming,
  type RewardHistogram,
  rewardHistogram,
  type Staleness,
  staleness,
  type TaskRow,
  type TokenAuditRecord,
  taskTable,
  tokenAuditRecord,
  type Workload,
  workload,
} from './run-sections.js';
import { type EngineSaturation, engineSaturation } from './saturation.js';
import type { PerfStep } from './slime-perf.js';
import { type SpecDecodeRecord, specDecodeRecord } from './spec-decode.js';
import { type EngineTimeline, engineTimeline } from './timeline.js';
import { type ToolCallRecord, toolCallRecord } from './tool-health.js';
import {
  rolloutShapeOf,
  type ShapeRecord,
  shapeRecord,
  type TrainerRecord,
  trainerRecord,
} from './training.js';

/** The record's format; bumped when a key changes meaning. */
export const RUN_RECORD_SCHEMA = 'vime.run-record/2';

/** Reward and pass@k of a step. */
export interface QualityRecord {
  reward_mean: number | null;
  [passAtK: `pass@${number}`]: number | null;
  /** 95% bootstrap intervals (seeded), when the step's rollouts were given. */
  ci?: Record<string, [number, number] | null> | undefined;
  scored?: number | undefined;
}

/** slime's per-step timing, in the benchmark record's units (seconds). */
export interface StepRecord {
  step_time_sec: number | null;
  rollout_time_sec: number | null;
  train_time_sec: number | null;
  train_wait_time_sec: number | null;
  update_weights_time_sec: number | null;
  wait_time_ratio: number | null;
  /** Taken over from a killed run: not timed here. */
  resumed?: boolean | undefined;
}

/**
 * One run as a benchmark record: the same keys as the coding-agent scaling benchmark (`mode`,
 * `engines`, `rollouts_completed`, `steps.{n}.*_sec`, per-engine peaks/medians and decile traces), plus
 * every section of the report. A section without data is `null` and `absent` says why.
 */
export interface RunRecord {
  schema: typeof RUN_RECORD_SCHEMA;
  name: string;
  mode: string | null;
  run: {
    id: string | null;
    started_at: string | null;
    ended_at: string | null;
    duration_sec: number | null;
    code_version: string | null;
    config: unknown;
    /** The settings with their sources, when the run gave them. */
    settings: RunSetting[] | null;
  };
  engine: { kind: string; stand_in: boolean; label: string } | null;
  engines: number;
  rollouts_completed: number | null;
  rollouts_aborted: number | null;
  rollouts_failed: number | null;
  steps: Record<string, StepRecord>;
  /** What a step-time phase stands for in this run, or why it is missing. */
  step_notes: Partial<Record<StepPhase, string>>;
  saturation: {
    n_engines: number;
    engine_names: string[];
    samples_per_eng: number[];
    /** Median milliseconds between readings, per engine. */
    sample_interval_ms_per_eng: Array<number | null>;
    running_req_peak_per_eng: Array<number | null>;
    running_req_median_per_eng: Array<number | null>;
    queue_req_peak_per_eng: Array<number | null>;
    queue_req_median_per_eng: Array<number | null>;
    kv_cache_frac_peak_per_eng: Array<number | null>;
    /** From scrapes (`null` for engines read from logs): what each engine did over the scrape window. */
    scrape_window_per_eng?: Array<EngineWindow | null> | undefined;
    [deciles: `eng${number}_${'running_req' | 'queue_req' | 'kv_cache_frac'}_deciles`]: Array<number | null>;
  };
  quality: Record<string, QualityRecord>;
  /** The trainer's loss, KL, entropy, clip fraction, grad norm, learning rate and log-prob gap per step. */
  trainer: TrainerRecord | null;
  /** Per step: response length, truncation, turns, zero-variance groups, advantages. */
  shape: ShapeRecord | null;
  reward_histogram: RewardHistogram | null;
  tasks: TaskRow[] | null;
  failures_by_cause: Record<string, number> | null;
  hacks_by_kind: Record<string, number> | null;
  grade_outcomes: Record<string, number> | null;
  staleness: Staleness | null;
  work_units: Record<string, number> | null;
  token_audit: TokenAuditRecord | null;
  /** Tool calls the models emitted and how many the proxy's parser took, per step and in total. */
  tool_calls: ToolCallRecord | null;
  /** Accepted draft tokens, verification passes and acceptance length, per step and in total. */
  spec_decode: SpecDecodeRecord | null;
  phases: PhaseTiming | null;
  sandbox: {
    claims: number;
    warm: number | null;
    cold: number | null;
    latency_ms: { all: Summary; warm: Summary | null; cold: Summary | null };
  } | null;
  tokens: {
    output: number;
    prompt: number | null;
    seconds: number;
    per_second: number;
    source: string;
  } | null;
  workload: Workload | null;
  capacity: CapacityInput | null;
  timeline: EngineTimeline[];
  /** Why a section is empty, by record key. */
  absent: Record<string, string>;
}

const round = (v: number | null, digits = 2) =>
  v === null || !Number.isFinite(v) ? null : Math.round(v * 10 ** digits) / 10 ** digits;

function stepRecord(s: PerfStep): StepRecord {
  // Milliseconds: a weight update of a small model takes tens of them (tenths would show 0).
  const v = (x: number | undefined) => (x === undefined ? null : round(x, 3));
  return {
    step_time_sec: v(s.stepTime),
    rollout_time_sec: v(s.rolloutTime),
    train_time_sec: v(s.trainTime),
    train_wait_time_sec: v(s.trainWaitTime),
    update_weights_time_sec: v(s.updateWeightsTime),
    wait_time_ratio: s.waitTimeRatio === undefined ? null : round(s.waitTimeRatio, 2),
  };
}

function qualityFromPerf(s: PerfStep): QualityRecord | null {
  const q: QualityRecord = { reward_mean: null };
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

const iso = (ms: number | undefined) => (ms === undefined ? null : new Date(ms).toISOString());

function qualityFromResults(
  results: ReadonlyArray<RolloutResult>,
  correct: (r: number) => boolean,
): QualityRecord {
  const m = rolloutMetrics(results, { correct, bootstrap: { seed: 0 } });
  const q: QualityRecord = { reward_mean: m.reward.mean, ci: {}, scored: m.reward.scored };
  // Mean reward's interval: the bootstrap over problems of each problem's mean reward.
  q.ci!.reward_mean = m.meanAtK.find((e) => e.k === 1)?.ci ?? null;
  for (const e of m.passAtK) {
    q[`pass@${e.k}`] = e.value;
    q.ci![`pass@${e.k}`] = e.ci;
  }
  return q;
}

function qualityFromMetrics(metrics: RolloutMetrics): QualityRecord {
  const q: QualityRecord = {
    reward_mean: metrics.reward.mean,
    ci: { reward_mean: metrics.meanAtK.find((e) => e.k === 1)?.ci ?? null },
  };
  for (const e of metrics.passAtK) {
    q[`pass@${e.k}`] = e.value;
    q.ci![`pass@${e.k}`] = e.ci;
  }
  return q;
}

function tokensOf(
  input: RunReportInput,
  windows: Array<EngineWindow | null> | undefined,
): RunRecord['tokens'] {
  if (input.tokens && input.tokens.seconds > 0) {
    const { output, prompt, seconds } = input.tokens;
    return { output, prompt: prompt ?? null, seconds, per_second: output / seconds, source: 'run' };
  }
  const w = (windows ?? []).filter((x): x is EngineWindow => x !== null && x.seconds > 0);
  if (w.length) {
    const output = w.reduce((s, x) => s + x.generationTokens, 0);
    const seconds = Math.max(...w.map((x) => x.seconds));
    return {
      output,
      prompt: w.reduce((s, x) => s + x.promptTokens, 0),
      seconds,
      per_second: output / seconds,
      source: 'engine /metrics',
    };
  }
  // Decode-batch logs: SGLang's own "gen throughput" over the readings that decoded.
  const rates = (input.engines ?? []).map((e) => {
    const r = e.points
      .filter((p) => p.running > 0 && typeof p.genThroughput === 'number')
      .map((p) => p.genThroughput!);
    return r.length ? r.reduce((a, b) => a + b, 0) / r.length : null;
  });
  if (rates.some((r) => r !== null)) {
    const perSecond = rates.reduce<number>((s, r) => s + (r ?? 0), 0);
    return {
      output: 0,
      prompt: null,
      seconds: 0,
      per_second: perSecond,
      source: 'engine log gen throughput (mean while decoding, summed over engines)',
    };
  }
  return null;
}

type Results = ReadonlyArray<RolloutResult>;
type Absent = Record<string, string>;

/** Assemble a run's perf, rollout and engine data into one `RunRecord`. */
export function runReport(input: RunReportInput): RunRecord {
  const engines = input.engines ?? [];
  const byStep = input.results ?? [];
  const allResults = byStep.flatMap((s) => s.results);
  const correct = input.correct ?? ((r: number) => r === 1);
  // Why each empty section is empty, in the order the sections are built.
  const absent: Absent = {};
  const counts = rolloutCounts(input, allResults, correct);
  const { saturation, timeline } = engineSections(input);
  if (engines.length === 0)
    absent.saturation = 'no engine readings (no engine log, scrape or stand-in sampler)';
  const { steps, quality } = stepsAndQuality(input, correct);
  if (Object.keys(quality).length === 0)
    absent.quality = 'no rewards: neither rollout results nor perf/metrics lines';
  const { trainer, shape } = trainingSections(input, absent);
  const stepNotes = stepNotesOf(input, steps);
  if (Object.keys(steps).length === 0) absent.steps = 'no step timing (no perf lines)';
  const sections = resultSections(input, allResults, correct, absent);
  const sandbox = sandboxSection(input.claims);
  if (!sandbox) absent.sandbox = 'no sandbox claims recorded';
  const tokens = tokensOf(input, saturation.scrape_window_per_eng);
  if (!tokens) absent.tokens = 'no token counts (no run counter, scrape or engine log)';
  const tokenAudit = tokenAuditRecord(input.tokenAudit ?? []);
  if (!tokenAudit) absent.token_audit = 'no step was handed off with the token audit in this process';
  const toolCalls = toolCallRecord(byStep);
  if (!toolCalls)
    absent.tool_calls = 'no rollout carries tool-call counts (no tools were offered to the model)';
  const specDecode = specDecodeRecord(byStep, input.specDecode);
  if (!specDecode)
    absent.spec_decode =
      'no speculative-decoding counts (speculation off, or neither the answers nor the engine metrics reported any)';
  if (!input.capacity)
    absent.capacity = 'no capacity plan given (vime plan --simulate --from report.json --json)';
  return {
    ...header(input),
    engines: engines.length,
    rollouts_completed: counts.completed,
    rollouts_aborted: counts.aborted,
    rollouts_failed: counts.failed,
    steps,
    step_notes: stepNotes,
    saturation,
    quality,
    trainer,
    shape,
    reward_histogram: sections.hist,
    tasks: sections.tasks,
    failures_by_cause: allResults.length ? failuresByCause(allResults) : null,
    hacks_by_kind: allResults.length ? countMetadata(allResults, 'hacks') : null,
    grade_outcomes: allResults.length ? countMetadata(allResults, 'grade_outcome') : null,
    staleness: sections.stale,
    work_units: input.workUnits ?? null,
    token_audit: tokenAudit,
    tool_calls: toolCalls,
    spec_decode: specDecode,
    phases: sections.phases,
    sandbox,
    tokens,
    workload: byStep.length ? workload(byStep, input.tokens?.output ?? null) : null,
    capacity: input.capacity ?? null,
    timeline,
    absent,
  };
}

/** The record's name, mode, run header and engine label. */
function header(input: RunReportInput): Pick<RunRecord, 'schema' | 'name' | 'mode' | 'run' | 'engine'> {
  const run = input.run ?? {};
  const duration =
    run.startedAt !== undefined && run.endedAt !== undefined ? (run.endedAt - run.startedAt) / 1000 : null;
  const kind = input.engineKind;
  return {
    schema: RUN_RECORD_SCHEMA,
    name: input.name ?? `${input.mode ?? 'run'}_${(input.engines ?? []).length}eng`,
    mode: input.mode ?? null,
    run: {
      id: run.id ?? null,
      started_at: iso(run.startedAt),
      ended_at: iso(run.endedAt),
      duration_sec: duration === null ? null : round(duration, 1),
      code_version: run.codeVersion ?? null,
      config: run.config ?? null,
      settings: run.settings ? [...run.settings] : null,
    },
    engine: kind
      ? {
          kind: kind.kind,
          stand_in: kind.standIn,
          label: kind.label ?? (kind.standIn ? `stand-in engine (${kind.kind}), not a model` : kind.kind),
        }
      : null,
  };
}

/**
 * Completed (truncated included), aborted and failed rollouts: from the run's metrics or results, else
 * the plain counts given, else the `[agent]` lines of the perf log.
 */
function rolloutCounts(
  input: RunReportInput,
  allResults: Results,
  correct: (r: number) => boolean,
): { completed: number | null; aborted: number | null; failed: number | null } {
  const counts = isRolloutMetrics(input.rollouts)
    ? input.rollouts.rollouts
    : allResults.length
      ? rolloutMetrics(allResults, { correct, bootstrap: false }).rollouts
      : null;
  if (counts) {
    return { completed: counts.completed + counts.truncated, aborted: counts.aborted, failed: counts.failed };
  }
  if (input.rollouts && !isRolloutMetrics(input.rollouts)) {
    const r = input.rollouts;
    return { completed: r.completed, aborted: r.aborted, failed: r.failed ?? null };
  }
  if (input.perf && 'rollouts' in input.perf) {
    const r = input.perf.rollouts;
    if (r.completed + r.aborted > 0) return { completed: r.completed, aborted: r.aborted, failed: null };
  }
  return { completed: null, aborted: null, failed: null };
}

/** Per-engine load peaks, medians and decile traces, scrape windows, and the charted timelines. */
function engineSections(input: RunReportInput): Pick<RunRecord, 'saturation' | 'timeline'> {
  const engines = input.engines ?? [];
  const buckets = input.buckets ?? 10;
  const sats: EngineSaturation[] = engines.map((e) => engineSaturation(e.points, { buckets }));
  const starts = sats.map((s) => s.start).filter((t): t is number => t !== null);
  const t0 = starts.length ? Math.min(...starts) : null;
  const timeline = engines.map((e) => engineTimeline(e.name, e.points, t0, input.timelinePoints ?? 600));
  const saturation: RunRecord['saturation'] = {
    n_engines: engines.length,
    engine_names: engines.map((e) => e.name),
    samples_per_eng: sats.map((s) => s.points),
    sample_interval_ms_per_eng: timeline.map((t) => t.interval_ms),
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
  return { saturation, timeline };
}

/**
 * Step timing from the perf log, and reward and pass@k per step. Precedence: `quality` given per step,
 * then the trainer's own per-step numbers (over every rollout), then the logged rollouts of the step.
 */
function stepsAndQuality(
  input: RunReportInput,
  correct: (r: number) => boolean,
): Pick<RunRecord, 'steps' | 'quality'> {
  const perfSteps: ReadonlyArray<PerfStep> = input.perf
    ? 'steps' in input.perf
      ? input.perf.steps
      : input.perf
    : [];
  const resumed = new Set(input.resumedSteps ?? []);
  const steps: Record<string, StepRecord> = {};
  const quality: RunRecord['quality'] = {};
  for (const s of perfSteps) {
    steps[String(s.rolloutId)] = resumed.has(s.rolloutId)
      ? { ...stepRecord({ rolloutId: s.rolloutId, metrics: {} }), resumed: true }
      : stepRecord(s);
    const q = qualityFromPerf(s);
    if (q) quality[String(s.rolloutId)] = q;
  }
  for (const { step, results } of input.results ?? []) {
    if (!quality[String(step)] && results.some((r) => r.status === 'completed' || r.status === 'truncated'))
      quality[String(step)] = qualityFromResults(results, correct);
  }
  for (const { step, metrics } of input.quality ?? []) quality[String(step)] = qualityFromMetrics(metrics);
  return { steps, quality };
}

/** The trainer's curves (given, else slime's train lines) and the rollouts' shape (given, else the results'). */
function trainingSections(input: RunReportInput, absent: Absent): Pick<RunRecord, 'trainer' | 'shape'> {
  const perfSteps = input.perf ? ('steps' in input.perf ? input.perf.steps : input.perf) : [];
  const fromLog = perfSteps.flatMap((s) => (s.train ? [{ step: s.rolloutId, metrics: s.train }] : []));
  const trainer = input.trainer
    ? trainerRecord(input.trainer.steps, input.trainer.source)
    : trainerRecord(fromLog, "slime log (`step K:` train lines, mean over each rollout's optimizer steps)");
  if (!trainer)
    absent.trainer =
      'no trainer metrics: no trainer hook, no slime `step K:` train lines, no train/* scalars in a metrics file';
  const shape = shapeRecord(
    input.shapes ?? (input.results ?? []).flatMap((s) => s.results.map((r) => rolloutShapeOf(s.step, r))),
  );
  if (!shape) absent.shape = "no per-rollout results in this run's inputs";
  return { trainer, shape };
}

/** The notes given, plus one for each phase that no step reported. */
function stepNotesOf(input: RunReportInput, steps: Record<string, StepRecord>): RunRecord['step_notes'] {
  const stepNotes: RunRecord['step_notes'] = { ...input.stepNotes };
  const stepList = Object.values(steps);
  const fields: Array<[StepPhase, keyof StepRecord]> = [
    ['rollout', 'rollout_time_sec'],
    ['train_wait', 'train_wait_time_sec'],
    ['train', 'train_time_sec'],
    ['update_weights', 'update_weights_time_sec'],
  ];
  for (const [phase, key] of fields) {
    if (stepList.length && stepList.every((st) => st[key] === null) && !stepNotes[phase])
      stepNotes[phase] = 'not in this run: no step reported it';
  }
  return stepNotes;
}

/** The sections read from the rollouts themselves; records in `absent` why each empty one is empty. */
function resultSections(
  input: RunReportInput,
  allResults: Results,
  correct: (r: number) => boolean,
  absent: Absent,
): {
  hist: RunRecord['reward_histogram'];
  tasks: RunRecord['tasks'];
  stale: RunRecord['staleness'];
  phases: RunRecord['phases'];
} {
  const byStep = input.results ?? [];
  const tasks = allResults.length ? taskTable(allResults, correct) : null;
  const hist = rewardHistogram(allResults);
  if (!hist)
    absent.reward_histogram = allResults.length
      ? 'no scored rollout'
      : "no per-rollout rewards in this run's inputs";
  if (!tasks) absent.tasks = "no per-rollout results in this run's inputs";
  const stale = staleness(byStep);
  if (!stale)
    absent.staleness =
      'not in this run: no training row carries weight versions (no weight update happened, or the engine does not report them)';
  if (!input.workUnits) absent.work_units = 'not in this run: work units are not tracked by this run';
  const phases = phaseTiming(byStep, input.execCallsMs);
  if (!phases) absent.phases = "no per-rollout phase timing in this run's inputs";
  return { hist, tasks, stale, phases };
}

/** Sandbox claims, warm and cold, with their latency. */
function sandboxSection(claims: RunReportInput['claims']): RunRecord['sandbox'] {
  if (!claims?.length) return null;
  const warm = claims.filter((c) => c.warm === true);
  const cold = claims.filter((c) => c.warm === false);
  const known = warm.length + cold.length > 0;
  return {
    claims: claims.length,
    warm: known ? warm.length : null,
    cold: known ? cold.length : null,
    latency_ms: {
      all: summarize(claims.map((c) => c.latencyMs)),
      warm: warm.length ? summarize(warm.map((c) => c.latencyMs)) : null,
      cold: cold.length ? summarize(cold.map((c) => c.latencyMs)) : null,
    },
  };
}
