import { describe, expect, it } from 'vitest';
import { capacityCurve, capacityFor, simulateRun } from './curve.js';
import { fitRun, observationFrom } from './fit.js';
import { simulateRolloutPhase } from './model.js';
import { REFERENCE_BENCHMARK } from './reference.js';

const runs = REFERENCE_BENCHMARK.runs;
const steady = String(REFERENCE_BENCHMARK.steady_state_step) as '2';
// Fitted on the two 1-engine runs alone; nothing of the 2- and 3-engine runs enters the fit.
const fit = fitRun([observationFrom(runs.sync_1eng), observationFrom(runs.async_1eng)]);

describe('the capacity planner on the reference benchmark', () => {
  it('reproduces the 1-engine runs it was fitted on', () => {
    const meanRollout =
      (runs.sync_1eng.steps[steady].rollout_time_sec + runs.async_1eng.steps[steady].rollout_time_sec) / 2;
    expect(fit.fitted.rolloutSec / meanRollout).toBeCloseTo(1, 2);
    expect(fit.sources).toMatchObject({
      decodeTokensPerSec: 'fitted',
      execSecPerTurn: 'fitted',
      kvTokens: 'measured',
    });
    // The KV limit taken from the running peak gives back that peak, and a queue of the same size.
    expect(Math.abs(fit.fitted.runningPeak - 168)).toBeLessThanOrEqual(5);
    expect(fit.fitted.queuePeak).toBeGreaterThan(0.8 * 122);
  });

  it('predicts the 2- and 3-engine step times within ±15% and the fall of the peak queue', () => {
    for (const mode of ['sync', 'async'] as const) {
      const peaks: number[] = [];
      for (const engines of [1, 2, 3] as const) {
        const reference = runs[`${mode}_${engines}eng`];
        const predicted = simulateRun(fit, { engines, mode });
        const observed = reference.steps[steady].step_time_sec;
        if (engines > 1)
          expect(Math.abs(predicted.stepSec / observed - 1), `${mode} ${engines} engines`).toBeLessThan(0.15);
        peaks.push(Math.max(...predicted.queuePeak));
      }
      const observedPeaks = [1, 2, 3].map((n) =>
        Math.max(...runs[`${mode}_${n}eng` as keyof typeof runs].sglang.queue_req_peak_per_eng),
      );
      // The reference's trend: the peak falls with every engine added, to near nothing at 3.
      expect(observedPeaks[0]).toBeGreaterThan(observedPeaks[1]!);
      expect(observedPeaks[1]).toBeGreaterThan(observedPeaks[2]!);
      expect(peaks[0]).toBeGreaterThan(peaks[1]!);
      expect(peaks[1]).toBeGreaterThan(peaks[2]!);
      expect(peaks[2]! / peaks[0]!).toBeLessThan(0.1);
      expect(peaks[1]! / peaks[0]!).toBeGreaterThan(0.1);
      expect(peaks[1]! / peaks[0]!).toBeLessThan(0.5);
    }
  });

  it('answers how many engines and sandboxes a target step time needs', () => {
    const curve = capacityCurve(fit, { mode: 'async', maxEngines: 4 });
    expect(curve.points.map((p) => p.engines)).toEqual([1, 2, 3, 4]);
    for (let i = 1; i < curve.points.length; i++)
      expect(curve.points[i]!.step_time_sec).toBeLessThanOrEqual(curve.points[i - 1]!.step_time_sec);
    const answer = capacityFor(fit, { targetStepSec: 900, mode: 'async' });
    expect(answer.engines).toBe(2);
    expect(answer.sandboxes).toBeGreaterThan(0);
    expect(answer.sandboxes).toBeLessThanOrEqual(184);
    // Fewer sandboxes than that miss the target.
    const short = simulateRun(fit, { engines: 2, mode: 'async', concurrency: answer.sandboxes! - 10 });
    expect(short.stepSec).toBeGreaterThan(900);
    // A step cannot be shorter than its own longest rollout: an impossible target says so.
    expect(capacityFor(fit, { targetStepSec: 60, mode: 'sync', maxEngines: 4 }).engines).toBeNull();
  });

  it('is a discrete-event model: one rollout alone takes its turns, its tokens and its sandbox time', () => {
    const phase = simulateRolloutPhase(
      {
        rolloutsPerStep: 1,
        turns: { min: 3, max: 3 },
        tokensPerTurn: 100,
        promptTokens: 10,
        observationTokens: 0,
        execSecPerTurn: 2,
        claimSec: 1,
        evalSec: 5,
        engine: { decodeTokensPerSec: 200, halfBatch: 1, kvTokens: 1e6, maxRunning: 8 },
        trainSec: 0,
        updateWeightsSec: 0,
      },
      1,
    );
    // claim 1 + 3 turns × 100 tokens at 200/(1+1) tok/s + 2 exec waits × 2 s + eval 5.
    expect(phase.rolloutSec).toBeCloseTo(1 + 3 + 4 + 5, 9);
  });
});
