/**
 * What the fitted model answers: the step time and peak queue depth for each engine count (the curve
 * the run report draws), and the fewest engines and sandboxes that reach a target step time.
 */
import { ConfigError } from '@vime/core';
import type { FittedRun } from './fit.js';
import { type StepModel, type StepPrediction, simulateStep } from './model.js';

/** Options of simulating a run. */
export interface SimulateRunOptions {
  engines: number;
  mode: 'sync' | 'async';
  /** Rollouts per step (default: the fitted run's). */
  rolloutsPerStep?: number | undefined;
  /** Rollouts (and so sandboxes) at once (default: every rollout of the step). */
  concurrency?: number | undefined;
  /** Steps to run (default 1); steps after the first repeat the steady state. */
  steps?: number | undefined;
}

/** A predicted run: its steps and their total time. */
export interface RunPrediction extends StepPrediction {
  steps: number;
  /** Seconds for all steps. */
  totalSec: number;
}

/** The fitted model for `mode`: that mode's measured train and weight-update time when the fit had one. */
export function modelFor(fit: FittedRun, options: Omit<SimulateRunOptions, 'engines' | 'steps'>): StepModel {
  const train = fit.train[options.mode] ?? fit.train.sync ?? fit.train.async;
  return {
    ...fit.model,
    ...(train ?? {}),
    rolloutsPerStep: options.rolloutsPerStep ?? fit.model.rolloutsPerStep,
    concurrency: options.concurrency ?? fit.model.concurrency,
  };
}

/** Predict a run of `steps` steps on `engines` engines with the fitted model. */
export function simulateRun(fit: FittedRun, options: SimulateRunOptions): RunPrediction {
  if (!Number.isInteger(options.engines) || options.engines < 1) {
    throw new ConfigError(`engines: expected a whole number >= 1, got ${JSON.stringify(options.engines)}`);
  }
  const steps = options.steps ?? 1;
  const step = simulateStep(modelFor(fit, options), options.engines, options.mode);
  return { ...step, steps, totalSec: step.stepSec * steps };
}

/** One point of the engines-vs-step-time curve, in the run report's units. */
export interface CapacityPoint {
  engines: number;
  step_time_sec: number;
  rollout_time_sec: number;
  queue_req_peak: number;
  running_req_peak: number;
  sandboxes_peak: number;
}

/** Predicted step time for each engine count. */
export interface CapacityCurve {
  mode: 'sync' | 'async';
  rollouts_per_step: number;
  points: CapacityPoint[];
  /** Where the model came from (e.g. the run it was fitted on). */
  source: string;
}

const round1 = (v: number) => Math.round(v * 10) / 10;

/** Predicted step time for 1 to `maxEngines` engines, from a fitted run. */
export function capacityCurve(
  fit: FittedRun,
  options: {
    mode: 'sync' | 'async';
    maxEngines?: number | undefined;
    source?: string | undefined;
    rolloutsPerStep?: number | undefined;
  },
): CapacityCurve {
  const max = options.maxEngines ?? 8;
  const points: CapacityPoint[] = [];
  for (let engines = 1; engines <= max; engines++) {
    const p = simulateRun(fit, { engines, mode: options.mode, rolloutsPerStep: options.rolloutsPerStep });
    points.push({
      engines,
      step_time_sec: round1(p.stepSec),
      rollout_time_sec: round1(p.rolloutSec),
      queue_req_peak: Math.max(...p.queuePeak),
      running_req_peak: Math.max(...p.runningPeak),
      sandboxes_peak: p.sandboxPeak,
    });
  }
  return {
    mode: options.mode,
    rollouts_per_step: options.rolloutsPerStep ?? fit.model.rolloutsPerStep,
    points,
    source: options.source ?? 'fitted run',
  };
}

/** How many engines a target step time needs. */
export interface CapacityAnswer {
  targetStepSec: number;
  /** Fewest engines whose predicted step is within the target; `null` when none up to `maxEngines` is. */
  engines: number | null;
  stepSec: number | null;
  /** Fewest rollouts at once (sandboxes claimed at once) that keep that step within the target. */
  sandboxes: number | null;
}

/** The fewest engines, then the fewest concurrent sandboxes, that reach `targetStepSec`. */
export function capacityFor(
  fit: FittedRun,
  options: {
    targetStepSec: number;
    mode: 'sync' | 'async';
    maxEngines?: number | undefined;
    rolloutsPerStep?: number | undefined;
  },
): CapacityAnswer {
  const { targetStepSec, mode } = options;
  const max = options.maxEngines ?? 16;
  const rolloutsPerStep = options.rolloutsPerStep ?? fit.model.rolloutsPerStep;
  for (let engines = 1; engines <= max; engines++) {
    const p = simulateRun(fit, { engines, mode, rolloutsPerStep });
    if (p.stepSec > targetStepSec) continue;
    // Fewer rollouts at once only lengthen the step: bisect on the count.
    let lo = 1;
    let hi = Math.min(rolloutsPerStep, fit.model.concurrency ?? rolloutsPerStep);
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      if (simulateRun(fit, { engines, mode, rolloutsPerStep, concurrency: mid }).stepSec <= targetStepSec)
        hi = mid;
      else lo = mid + 1;
    }
    const withSandboxes = simulateRun(fit, { engines, mode, rolloutsPerStep, concurrency: lo });
    return { targetStepSec, engines, stepSec: p.stepSec, sandboxes: withSandboxes.sandboxPeak };
  }
  return { targetStepSec, engines: null, stepSec: null, sandboxes: null };
}
