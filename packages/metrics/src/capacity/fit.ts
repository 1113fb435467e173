/**
 * Fit the step model to a run's own metrics: a Vime run report (`report.json`) or a benchmark record
 * in the same keys (`steps.{n}.*_sec`, per-engine saturation). What the record measured is taken as is
 * (train and weight-update time, the KV limit from the running peak, turns and tokens when it has
 * them); the engine's decode throughput and the sandbox time per turn are fitted so that the simulated
 * step reproduces the run's rollout time and the mean number of requests it kept in its engines.
 */
import { ConfigError, parseWith } from '@vime/core';
import { z } from 'zod';
import { type StepModel, simulateRolloutPhase } from './model.js';

const num = z.number().finite();
const nullableNum = num.nullable().optional();

const StepTimesSchema = z.looseObject({
  step_time_sec: nullableNum,
  rollout_time_sec: nullableNum,
  train_time_sec: nullableNum,
  train_wait_time_sec: nullableNum,
  update_weights_time_sec: nullableNum,
});

const SaturationSchema = z.looseObject({
  running_req_peak_per_eng: z.array(num.nullable()),
  running_req_median_per_eng: z.array(num.nullable()).optional(),
  queue_req_peak_per_eng: z.array(num.nullable()),
  queue_req_median_per_eng: z.array(num.nullable()),
  kv_cache_frac_peak_per_eng: z.array(num.nullable()).optional(),
});

/** What a run's record says about its workload (a Vime report's `workload`; all optional). */
export const WorkloadSchema = z.looseObject({
  rollouts_per_step: num.positive().nullable().optional(),
  concurrency: num.positive().nullable().optional(),
  turns_mean: nullableNum,
  turns_max: nullableNum,
  output_tokens_per_turn: nullableNum,
  prompt_tokens: nullableNum,
  exec_sec_per_turn: nullableNum,
  claim_sec: nullableNum,
  eval_sec: nullableNum,
});

/** One run's record, as `vime-metrics`, the coding-agent report or the benchmark record write it. */
export const RunObservationSchema = z.looseObject({
  mode: z.enum(['sync', 'async']).nullable().optional(),
  engines: num.int().positive(),
  steps: z.record(z.string(), StepTimesSchema),
  saturation: SaturationSchema.optional(),
  /** The benchmark record's name for `saturation`. */
  sglang: SaturationSchema.optional(),
  workload: WorkloadSchema.optional(),
});
/** A run's measurements the capacity model is fitted on. */
export type RunObservation = z.output<typeof RunObservationSchema>;

/** Shape parameters no aggregate record carries; a run's `workload` overrides them. */
export interface ModelDefaults {
  rolloutsPerStep: number;
  turns: { min: number; max: number };
  tokensPerTurn: number;
  promptTokens: number;
  observationTokens: number;
  claimSec: number;
  evalSec: number;
  halfBatch: number;
}

/** The reference coding-agent example: batch 23 × 8, up to 20 agent turns, graded with hidden tests. */
export const REFERENCE_DEFAULTS: ModelDefaults = {
  rolloutsPerStep: 184,
  turns: { min: 6, max: 20 },
  tokensPerTurn: 300,
  promptTokens: 3000,
  observationTokens: 600,
  claimSec: 2,
  evalSec: 40,
  halfBatch: 16,
};

/** A measured step time the fit aims at. */
export interface FitTarget {
  mode: 'sync' | 'async';
  rolloutSec: number;
  trainSec: number;
  updateWeightsSec: number;
  stepSec: number | null;
  meanInEngine: number;
  queuePeak: number;
  runningPeak: number;
  kvPeak: number;
}

/** The capacity model fitted on runs, with how well it fits. */
export interface FittedRun {
  /** The model with every parameter set (fitted, measured or default). */
  model: StepModel;
  /** Per mode: train and weight-update seconds measured in that mode's runs. */
  train: Partial<Record<'sync' | 'async', { trainSec: number; updateWeightsSec: number }>>;
  /** Where each parameter came from. */
  sources: Record<string, 'fitted' | 'measured' | 'default'>;
  /** The runs it was fitted on, and what the fitted model gives for them. */
  targets: FitTarget[];
  fitted: { rolloutSec: number; meanInEngine: number; queuePeak: number; runningPeak: number };
}

const finite = (v: number | null | undefined): v is number => typeof v === 'number' && Number.isFinite(v);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** Read a record (a parsed `report.json` or one run of a benchmark record) as an observation. */
export function observationFrom(record: unknown, label = 'run record'): RunObservation {
  return parseWith(RunObservationSchema, record, label);
}

/** The steady-state step: the last one with a rollout time (the first warms pools and caches). */
function steadyStep(obs: RunObservation, label: string) {
  const ids = Object.keys(obs.steps)
    .filter((k) => finite(obs.steps[k]!.rollout_time_sec))
    .sort((a, b) => Number(a) - Number(b));
  const id = ids.at(-1);
  if (id === undefined) {
    throw new ConfigError(
      `${label}: no step with rollout_time_sec; the planner needs at least one timed step`,
    );
  }
  return obs.steps[id]!;
}

function targetOf(obs: RunObservation, label: string): FitTarget {
  if (obs.engines !== 1) {
    throw new ConfigError(
      `${label}: engines is ${obs.engines}; fit on 1-engine runs (the planner predicts the others from them)`,
    );
  }
  const mode = obs.mode ?? 'sync';
  const step = steadyStep(obs, label);
  const sat = obs.saturation ?? obs.sglang;
  if (!sat) throw new ConfigError(`${label}: no saturation (engine readings); fit needs the engine's queue`);
  const deciles = (name: string) => {
    const v = (sat as Record<string, unknown>)[`eng0_${name}_deciles`];
    return Array.isArray(v) ? v.filter((x): x is number => finite(x as number)) : [];
  };
  const run = deciles('running_req');
  const queue = deciles('queue_req');
  // Mean requests in the engine: the decile traces are means over equal slices of the run.
  const meanInEngine =
    run.length && queue.length
      ? mean(run) + mean(queue)
      : (sat.running_req_median_per_eng?.[0] ?? 0) + (sat.queue_req_median_per_eng[0] ?? 0);
  return {
    mode,
    rolloutSec: step.rollout_time_sec!,
    trainSec: step.train_time_sec ?? 0,
    updateWeightsSec: step.update_weights_time_sec ?? 0,
    stepSec: step.step_time_sec ?? null,
    meanInEngine,
    queuePeak: sat.queue_req_peak_per_eng[0] ?? 0,
    runningPeak: sat.running_req_peak_per_eng[0] ?? 0,
    kvPeak: sat.kv_cache_frac_peak_per_eng?.[0] ?? 1,
  };
}

/** Smallest x in [lo, hi] (log scale) with `decreasing(x) <= target`, by bisection. */
function bisectLog(lo: number, hi: number, iterations: number, tooHigh: (x: number) => boolean): number {
  for (let i = 0; i < iterations; i++) {
    const mid = Math.sqrt(lo * hi);
    if (tooHigh(mid)) lo = mid;
    else hi = mid;
  }
  return Math.sqrt(lo * hi);
}

/**
 * Fit the model on one or more 1-engine runs of the same workload (e.g. the sync and the async run):
 * their rollout times and engine occupancies are averaged into one target, train and weight-update
 * times are kept per mode.
 */
export function fitRun(
  records: ReadonlyArray<RunObservation>,
  options: { defaults?: Partial<ModelDefaults> | undefined; labels?: string[] | undefined } = {},
): FittedRun {
  if (records.length === 0) throw new ConfigError('fitRun needs at least one run record');
  const targets = records.map((r, i) => targetOf(r, options.labels?.[i] ?? `run ${i}`));
  const d = { ...REFERENCE_DEFAULTS, ...options.defaults };
  const sources: FittedRun['sources'] = {};
  const w = records.find((r) => r.workload)?.workload ?? {};
  const pick = (name: string, measured: number | null | undefined, fallback: number) => {
    sources[name] = finite(measured) ? 'measured' : 'default';
    return finite(measured) ? measured : fallback;
  };
  const rolloutsPerStep = Math.round(pick('rolloutsPerStep', w.rollouts_per_step, d.rolloutsPerStep));
  const turnsMax = pick('turns.max', w.turns_max, d.turns.max);
  const turnsMean = finite(w.turns_mean) ? w.turns_mean : (d.turns.min + d.turns.max) / 2;
  sources['turns.min'] = finite(w.turns_mean) ? 'measured' : 'default';
  const turnsMin = Math.max(1, Math.min(turnsMax, 2 * turnsMean - turnsMax));
  const tokensPerTurn = pick('tokensPerTurn', w.output_tokens_per_turn, d.tokensPerTurn);
  const promptTokens = pick('promptTokens', w.prompt_tokens, d.promptTokens);
  const claimSec = pick('claimSec', w.claim_sec, d.claimSec);
  const evalSec = pick('evalSec', w.eval_sec, d.evalSec);
  sources.observationTokens = 'default';
  sources.halfBatch = 'default';
  const concurrency = finite(w.concurrency) ? w.concurrency : undefined;
  // KV limit: a run whose every rollout fit at once never hit it (then it does not bind).
  const bound = targets.filter((t) => t.runningPeak < (concurrency ?? rolloutsPerStep));
  const kvTokens = bound.length
    ? mean(bound.map((t) => (t.runningPeak * (promptTokens + tokensPerTurn)) / Math.max(0.05, t.kvPeak)))
    : Number.POSITIVE_INFINITY;
  sources.kvTokens = bound.length ? 'measured' : 'default';
  const rolloutTarget = mean(targets.map((t) => t.rolloutSec));
  const occupancyTarget = mean(targets.map((t) => t.meanInEngine));

  const model = (decodeTokensPerSec: number, execSecPerTurn: number): StepModel => ({
    rolloutsPerStep,
    concurrency,
    turns: { min: turnsMin, max: turnsMax },
    tokensPerTurn,
    promptTokens,
    observationTokens: d.observationTokens,
    execSecPerTurn,
    claimSec,
    evalSec,
    engine: { decodeTokensPerSec, halfBatch: d.halfBatch, kvTokens, maxRunning: Number.MAX_SAFE_INTEGER },
    trainSec: 0,
    updateWeightsSec: 0,
  });
  const throughputFor = (exec: number) =>
    bisectLog(1, 1e8, 28, (theta) => simulateRolloutPhase(model(theta, exec), 1).rolloutSec > rolloutTarget);
  let execSec: number;
  if (finite(w.exec_sec_per_turn)) {
    execSec = w.exec_sec_per_turn;
    sources.execSecPerTurn = 'measured';
  } else {
    // More sandbox time per turn leaves fewer requests in the engine: bisect on the occupancy.
    let lo = 0;
    let hi = Math.max(1, rolloutTarget / turnsMax);
    for (let i = 0; i < 18; i++) {
      const mid = (lo + hi) / 2;
      const m = model(throughputFor(mid), mid);
      if (simulateRolloutPhase(m, 1).meanInEngine > occupancyTarget) lo = mid;
      else hi = mid;
    }
    execSec = (lo + hi) / 2;
    sources.execSecPerTurn = 'fitted';
  }
  const theta = throughputFor(execSec);
  sources.decodeTokensPerSec = 'fitted';
  const fittedModel = model(theta, execSec);
  const train: FittedRun['train'] = {};
  for (const mode of ['sync', 'async'] as const) {
    const of = targets.filter((t) => t.mode === mode);
    if (of.length)
      train[mode] = {
        trainSec: mean(of.map((t) => t.trainSec)),
        updateWeightsSec: mean(of.map((t) => t.updateWeightsSec)),
      };
  }
  const first = train[targets[0]!.mode]!;
  fittedModel.trainSec = first.trainSec;
  fittedModel.updateWeightsSec = first.updateWeightsSec;
  sources.trainSec = 'measured';
  sources.updateWeightsSec = 'measured';
  const check = simulateRolloutPhase(fittedModel, 1);
  return {
    model: fittedModel,
    train,
    sources,
    targets,
    fitted: {
      rolloutSec: check.rolloutSec,
      meanInEngine: check.meanInEngine,
      queuePeak: check.queuePeak[0] ?? 0,
      runningPeak: check.runningPeak[0] ?? 0,
    },
  };
}
