/**
 * The run's report (`report.json` + `report.html`): every rollout by step, the engines' decode-batch
 * readings, sandbox claims, tokens, and a capacity curve fitted on the run itself. The stand-in engine
 * is labelled as such on the page and in the JSON.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { RolloutResult } from '@vime/core';
import { writeFileAtomic } from '@vime/core/utils';
import type { HandoffAudit } from '@vime/grpo';
import {
  type CapacityInput,
  capacityCurve,
  type EngineInput,
  fitRun,
  loadPointsOf,
  observationFrom,
  parseMetricsFile,
  parseSglangDecodeLog,
  type RolloutMetrics,
  type RunRecord,
  type RunReportInput,
  renderHtmlReport,
  runReport,
  type StepSpecDecode,
} from '@vime/metrics';
import { scrapeEngines } from '@vime/metrics/scrape';
import { type ConfigSources, configSettings } from './config/render.js';
import type { Config } from './config/schema.js';

/** What the run report is drawn from. */
export interface ReportInput {
  out: string;
  runId: string;
  startedAt: number;
  config: Config;
  /** Where each value of the config came from (`default` for any not named). */
  sources: ConfigSources;
  standIn: boolean;
  engineCount: number;
  /** Decode-batch log lines per stand-in engine (none for engines given by URL). */
  engineLogs: string[][];
  /** Every engine's `/metrics`, read every 250 ms over the run (`sampleEngines`). */
  engineSamples: EngineInput[];
  steps: Array<{
    step: number;
    results: RolloutResult[];
    rolloutSeconds: number;
    handoffSeconds: number;
    /** The token audit of the step's hand-off (absent for a step handed off before a restart). */
    audit?: (HandoffAudit & { seconds: number }) | undefined;
    /** Handed off before a restart: not timed in this process. */
    resumed: boolean;
    /** The step's speculative decoding (from its rows, or the engines' counters), when any was reported. */
    spec?: StepSpecDecode | undefined;
    /** The trainer hook's timings, when a trainer is attached. */
    train?:
      | {
          trainSeconds: number;
          weightUpdateSeconds: number;
          weightVersion: string;
          /** The trainer's scalars (loss, KL, grad norm, …): the report's trainer curves. */
          metrics?: Record<string, number> | undefined;
        }
      | undefined;
  }>;
  claims: Array<{ warm: boolean; latencyMs: number }>;
  outputTokens: number;
  rolloutSeconds: number;
  overall: RolloutMetrics;
  /** The queue's work-unit counters (groups created, handed off, dropped by reason, attempts, …). */
  workUnits?: Record<string, number> | undefined;
  extra: Record<string, unknown>;
}

const STAND_IN_LABEL = "stand-in engine: a scripted coding policy served over SGLang's wire, not a model";

/** The code's version: the checkout's commit when there is one, else the package version. */
async function codeVersion(): Promise<string> {
  try {
    const { stdout } = await promisify(execFile)('git', ['rev-parse', '--short=12', 'HEAD'], {
      cwd: new URL('.', import.meta.url),
      timeout: 5000,
    });
    return `git ${stdout.trim()}`;
  } catch {
    return 'coding-agent example (no git checkout)';
  }
}

/**
 * Read every engine's `/metrics` every 250 ms until `stop()`: the load is drawn as continuous lines,
 * idle stretches included (an engine logs decode batches only while it decodes).
 */
export function sampleEngines(urls: readonly string[]): {
  /** Stop reading; each engine's readings. */
  stop(): Promise<EngineInput[]>;
} {
  const controller = new AbortController();
  const series = scrapeEngines(
    urls.map((u) => `${u}/metrics`),
    { intervalMs: 250, durationMs: 7 * 24 * 3600_000, signal: controller.signal, timeoutMs: 2000 },
  );
  return {
    async stop() {
      controller.abort();
      return (await series).map((s, i) => ({
        name: `eng${i}`,
        points: loadPointsOf(s.scrapes),
        scrapes: s.scrapes,
      }));
    },
  };
}

/**
 * The trainer hook's scalars per step, for the report's trainer curves; none without a trainer. A step
 * trained before a restart was not trained in this process: its scalars come from the step line an earlier
 * start wrote to `metrics.jsonl` (`train/<name>`).
 */
async function trainerCurves(out: string, steps: ReportInput['steps']): Promise<RunReportInput['trainer']> {
  const logged = steps.some((s) => !s.train?.metrics)
    ? parseMetricsFile(await readFile(join(out, 'metrics.jsonl'), 'utf8').catch(() => '')).steps
    : [];
  const trained = steps.flatMap((s) => {
    const line = logged.find((l) => l.step === s.step)?.scalars ?? {};
    const fromLine = Object.fromEntries(
      Object.entries(line).filter(
        (e): e is [string, number] => e[0].startsWith('train/') && typeof e[1] === 'number',
      ),
    );
    const metrics = s.train?.metrics ?? fromLine;
    return Object.keys(metrics).length ? [{ step: s.step, metrics }] : [];
  });
  return trained.length
    ? { source: "trainer hook (the metrics of each step's TrainResult)", steps: trained }
    : undefined;
}

/** The planner's curve fitted on this run; `null` (with the reason) when the run cannot be fitted. */
function capacityOf(record: RunRecord, mode: 'sync' | 'async'): CapacityInput | string {
  try {
    const fit = fitRun([observationFrom(record, 'this run')], { labels: [record.name] });
    return capacityCurve(fit, { mode, maxEngines: 6, source: `fitted on this run (${record.name})` });
  } catch (error) {
    return `no capacity curve: ${(error as Error).message}`;
  }
}

/** Write the run's report: `report.json` and `report.html`. */
export async function writeRunReport(
  input: ReportInput,
): Promise<{ record: RunRecord; json: string; html: string }> {
  const { config } = input;
  // The 250 ms samples when the engines answered them, else the stand-ins' decode-batch logs.
  const sampled = input.engineSamples.filter((e) => e.points.length > 1);
  const engines: EngineInput[] = sampled.length
    ? sampled
    : input.engineLogs.map((lines, i) => ({
        name: `eng${i}`,
        points: parseSglangDecodeLog(lines.join('\n')).samples,
      }));
  const report = {
    name: `${config.mode}_${Math.max(input.engineCount, 1)}eng`,
    mode: config.mode,
    run: {
      id: input.runId,
      startedAt: input.startedAt,
      endedAt: Date.now(),
      config,
      settings: configSettings(config, input.sources),
      codeVersion: await codeVersion(),
    },
    engineKind: input.standIn
      ? { kind: 'sglang', standIn: true, label: STAND_IN_LABEL }
      : { kind: config.engineKind, standIn: false },
    engines,
    results: input.steps.map((s) => ({ step: s.step, results: s.results })),
    resumedSteps: input.steps.filter((s) => s.resumed).map((s) => s.step),
    stepNotes: input.steps.some((s) => s.train)
      ? {
          train:
            'the trainer hook: one optimizer step on the handed-off batch ("update_weights": writing the checkpoint and the engines loading it)',
        }
      : {
          train:
            'no trainer attached: "train" is the hand-off (GRPO advantages and the batch file written for the trainer)',
          update_weights: 'not in this run: no trainer, so the engine keeps its weights',
        },
    trainer: await trainerCurves(input.out, input.steps),
    claims: input.claims,
    tokenAudit: input.steps.flatMap((s) =>
      s.audit ? [{ step: s.step, ...s.audit, handoffSeconds: s.handoffSeconds }] : [],
    ),
    // Steps whose rows carry counts are read from them; the engines' counter figures fill the others.
    specDecode: input.steps.flatMap((s) =>
      s.spec?.source === 'engine metrics' ? [{ ...s.spec, step: s.step }] : [],
    ),
    ...(input.workUnits ? { workUnits: input.workUnits } : {}),
    tokens: { output: input.outputTokens, seconds: input.rolloutSeconds },
    perf: input.steps.map((s) => ({
      rolloutId: s.step,
      // In slime's terms the trainer waits for the rollouts, then trains on the handed-off batch.
      stepTime: s.rolloutSeconds + s.handoffSeconds,
      rolloutTime: s.rolloutSeconds,
      trainWaitTime: s.rolloutSeconds,
      trainTime: s.train ? s.train.trainSeconds : s.handoffSeconds,
      ...(s.train ? { updateWeightsTime: s.train.weightUpdateSeconds } : {}),
      metrics: s.train ? { 'train/weight_version': s.train.weightVersion } : {},
    })),
  } satisfies Parameters<typeof runReport>[0];
  const first = runReport(report);
  const capacity = capacityOf(first, config.mode);
  const record = typeof capacity === 'string' ? first : runReport({ ...report, capacity });
  if (typeof capacity === 'string') record.absent.capacity = capacity;
  if (engines.length === 0)
    record.absent.saturation =
      "the engines' /metrics gave no load readings (SGLang needs --enable-metrics); run vime-metrics on their logs";
  const json = join(input.out, 'report.json');
  const html = join(input.out, 'report.html');
  // report.json last: a run folder that has it has the whole report (a resume checks for it).
  await writeFileAtomic(html, renderHtmlReport(record, { title: 'Coding-agent RL run' }));
  await writeFileAtomic(
    json,
    `${JSON.stringify({ ...record, rollout_metrics: input.overall, ...input.extra }, null, 2)}\n`,
  );
  return { record, json, html };
}
