/**
 * `vime plan --simulate`: fit the step model on 1-engine run records (`--from report.json`, or a
 * benchmark record with several runs; default: the reference example's 1-engine sync and async runs),
 * then predict the plan's step time and queue depth for 1..N engines and, with `--target-step`, the
 * fewest engines and sandboxes that reach it.
 */
import { ConfigError } from '@vime/core';
import { type CliIo, parseDuration, positiveInt, readTextFile } from '@vime/core/utils';
import {
  type CapacityAnswer,
  type CapacityCurve,
  capacityCurve,
  capacityFor,
  type FittedRun,
  fitRun,
  observationFrom,
  REFERENCE_BENCHMARK,
  type RunObservation,
} from '@vime/metrics';
import type { LaunchPlan } from '../../plan.js';

export const SIMULATE_OPTIONS = {
  simulate: { type: 'boolean' },
  from: { type: 'string', multiple: true },
  'max-engines': { type: 'string' },
  'target-step': { type: 'string' },
} as const;

export const SIMULATE_HELP = `Simulation (--simulate):
  --simulate                    predict step time and queue depth per engine count (a discrete-event model)
  --from FILE                   1-engine run record to fit on: report.json of a run, vime-metrics JSON,
                                or a benchmark record with {"runs": {...}} (repeat; default: the reference
                                example's 1-engine sync and async runs)
  --max-engines N               engine counts to predict, 1..N (default 8)
  --target-step DURATION        also answer: fewest engines and sandboxes for this step time (e.g. 15m)`;

export interface SimulationOutput {
  fittedOn: string[];
  fit: Pick<FittedRun, 'model' | 'train' | 'sources' | 'targets' | 'fitted'>;
  curve: CapacityCurve;
  answer: CapacityAnswer | null;
}

async function observations(
  files: string[],
  io: Pick<CliIo, 'cwd'>,
): Promise<Array<[string, RunObservation]>> {
  if (files.length === 0) {
    return (['sync_1eng', 'async_1eng'] as const).map((k) => [
      `reference ${k}`,
      observationFrom(REFERENCE_BENCHMARK.runs[k], `reference ${k}`),
    ]);
  }
  const out: Array<[string, RunObservation]> = [];
  for (const file of files) {
    const text = await readTextFile(file, '--from', { cwd: io.cwd });
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (cause) {
      throw new ConfigError(
        `--from ${file}: not JSON (${(cause as Error).message}); pass a run's report.json`,
      );
    }
    const runs = (parsed as { runs?: unknown }).runs;
    if (runs && typeof runs === 'object') {
      for (const [key, run] of Object.entries(runs as Record<string, unknown>)) {
        if ((run as { engines?: unknown }).engines === 1)
          out.push([`${file} ${key}`, observationFrom(run, `--from ${file} runs.${key}`)]);
      }
      if (!out.length) throw new ConfigError(`--from ${file}: no run with "engines": 1 under "runs"`);
    } else {
      out.push([file, observationFrom(parsed, `--from ${file}`)]);
    }
  }
  return out;
}

export async function simulatePlan(
  plan: LaunchPlan,
  values: Record<string, unknown>,
  io: Pick<CliIo, 'cwd'>,
): Promise<SimulationOutput> {
  const obs = await observations((values.from as string[] | undefined) ?? [], io);
  const rolloutsPerStep = plan.config.rollout.batchSize * plan.config.rollout.samplesPerPrompt;
  const fit = fitRun(
    obs.map(([, o]) => o),
    { labels: obs.map(([label]) => label) },
  );
  const maxEngines = positiveInt(values['max-engines'] as string | undefined, '--max-engines') ?? 8;
  const mode = plan.config.mode;
  const curve = capacityCurve(fit, {
    mode,
    maxEngines: Math.max(maxEngines, plan.config.engines.count),
    rolloutsPerStep,
    source: `fitted on ${obs.map(([label]) => label).join(', ')}`,
  });
  const target = values['target-step'] as string | undefined;
  const answer =
    target === undefined
      ? null
      : capacityFor(fit, {
          targetStepSec: parseDuration(target, '--target-step') / 1000,
          mode,
          rolloutsPerStep,
          maxEngines: Math.max(16, maxEngines),
        });
  const { model, train, sources, targets, fitted } = fit;
  return { fittedOn: obs.map(([l]) => l), fit: { model, train, sources, targets, fitted }, curve, answer };
}

export function printSimulation(out: SimulationOutput, plan: LaunchPlan, io: CliIo): void {
  const m = out.fit.model;
  io.stdout(
    `Simulation (${out.curve.mode}, ${out.curve.rollouts_per_step} rollouts per step), ${out.curve.source}\n`,
  );
  io.stdout(
    `  fitted: engine decode ${m.engine.decodeTokensPerSec.toFixed(0)} tok/s at full batch, sandbox ${m.execSecPerTurn.toFixed(1)} s per turn; ` +
      `fit reproduces rollout ${out.fit.fitted.rolloutSec.toFixed(0)} s, ${out.fit.fitted.meanInEngine.toFixed(0)} requests in the engine\n`,
  );
  io.stdout('  engines  step (s)  rollout (s)  queue peak  sandboxes\n');
  for (const p of out.curve.points) {
    const mark = p.engines === plan.config.engines.count ? ' <- plan' : '';
    io.stdout(
      `  ${String(p.engines).padStart(7)}  ${p.step_time_sec.toFixed(0).padStart(8)}  ${p.rollout_time_sec.toFixed(0).padStart(11)}  ${String(p.queue_req_peak).padStart(10)}  ${String(p.sandboxes_peak).padStart(9)}${mark}\n`,
    );
  }
  const a = out.answer;
  if (a) {
    io.stdout(
      a.engines === null
        ? `  target ${a.targetStepSec.toFixed(0)} s: not reached with up to 16 engines (the step's own latency bounds it)\n`
        : `  target ${a.targetStepSec.toFixed(0)} s: ${a.engines} engine(s) (step ${a.stepSec!.toFixed(0)} s), ${a.sandboxes} sandboxes at once\n`,
    );
  }
}
