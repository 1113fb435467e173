/**
 * A run's `metrics.jsonl` (schema `vime.metrics/1`, written by `jsonlSink`) read back into a run report's
 * input: rollout lines become rollout results (reward, status, turns, phases, errors), step lines give the
 * step time and the trainer's `train/*` scalars, the run line the config and the engine. Training rows (a
 * step's batch) add what the lines do not carry: response tokens and advantages.
 */
import { isScored, type Phase, PhaseSchema, type RolloutResult, type Sample } from '@vime/core';
import type { RunReportInput, RunSetting } from './report-input.js';
import type { RolloutMetricRecord, StepMetricRecord } from './sinks/sink.js';
import { type RolloutShape, rolloutShapeOf, rowFigures } from './training.js';

/** The JSONL schema this reader takes. */
export const METRICS_FILE_SCHEMA = 'vime.metrics/1';

/** A `metrics.jsonl` parsed; nothing is dropped silently. */
export interface MetricsFile {
  /** The first `run` line; `null` when the text has none (not a metrics file). */
  run: { runId: string; startedAt: number | null; engine: string | null; config: unknown } | null;
  /** `run` lines: one per start of a resumed run. */
  starts: number;
  /** The last line for each rollout id (a resumed run may record one again), in file order. */
  rollouts: RolloutMetricRecord[];
  /** The last line for each step. */
  steps: StepMetricRecord[];
  /** The latest `t` of any line (epoch ms). */
  lastT: number | null;
  lines: number;
  /** Lines that are not JSON objects of a known kind. */
  malformed: number;
  malformedLines: number[];
}

type Line = { kind?: unknown; [key: string]: unknown };

/** Parse a `metrics.jsonl` text. Never throws: unreadable lines are counted. */
export function parseMetricsFile(text: string): MetricsFile {
  const out: MetricsFile = {
    run: null,
    starts: 0,
    rollouts: [],
    steps: [],
    lastT: null,
    lines: 0,
    malformed: 0,
    malformedLines: [],
  };
  const rollouts = new Map<number, RolloutMetricRecord>();
  const steps = new Map<number, StepMetricRecord>();
  for (const raw of text.split('\n')) {
    out.lines++;
    if (raw.trim() === '') continue;
    let line: Line | undefined;
    try {
      const v = JSON.parse(raw) as unknown;
      line = v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Line) : undefined;
    } catch {
      line = undefined;
    }
    if (typeof line?.t === 'number') out.lastT = Math.max(out.lastT ?? 0, line.t);
    if (line?.kind === 'run' && line.schema === METRICS_FILE_SCHEMA) {
      out.starts++;
      const started = Date.parse(String(line.started_at));
      out.run ??= {
        runId: String(line.run_id),
        startedAt: Number.isFinite(started) ? started : null,
        engine: typeof line.engine === 'string' ? line.engine : null,
        config: line.config ?? null,
      };
    } else if (
      line?.kind === 'rollout' &&
      typeof line.step === 'number' &&
      typeof line.rollout_id === 'number'
    ) {
      rollouts.delete(line.rollout_id);
      rollouts.set(line.rollout_id, line as unknown as RolloutMetricRecord);
    } else if (line?.kind === 'step' && typeof line.step === 'number' && typeof line.scalars === 'object') {
      steps.set(line.step, line as unknown as StepMetricRecord);
    } else if (line?.kind !== 'end') {
      out.malformed++;
      if (out.malformedLines.length < 20) out.malformedLines.push(out.lines);
    }
  }
  // A trailing newline is not a line.
  if (text.endsWith('\n')) out.lines--;
  out.rollouts = [...rollouts.values()];
  out.steps = [...steps.values()].sort((a, b) => a.step - b.step);
  return out;
}

const PHASES = new Set<string>(PhaseSchema.options);

/** A rollout line as a rollout result (no rows: those live in the step's batch). */
export function resultOfRecord(r: RolloutMetricRecord): RolloutResult {
  const timings: RolloutResult['timings'] = {};
  for (const [k, v] of Object.entries(r.phases_ms ?? {}))
    if (PHASES.has(k) && typeof v === 'number') timings[k as Phase] = v;
  const base = {
    taskId: r.task_id,
    groupIndex: r.group,
    sampleIndex: 0,
    rolloutId: r.rollout_id,
    samples: [],
    turns: r.turns,
    timings,
    ...(typeof r.duration_ms === 'number' ? { startedAt: r.t - r.duration_ms, endedAt: r.t } : {}),
    // The versions its rows came from: the staleness section reads them when a result has no rows.
    metadata: { hacks: r.hacks ?? [], weight_versions: r.weight_versions ?? [] },
  };
  if ((r.status === 'completed' || r.status === 'truncated') && typeof r.reward === 'number')
    return { ...base, status: r.status, reward: r.reward };
  // `code (phase)`, as the sink wrote it.
  const m = /^(.*?)(?: \((\w+)\))?$/.exec(r.error ?? 'unknown');
  const phase = m?.[2] && PHASES.has(m[2]) ? (m[2] as Phase) : undefined;
  return {
    ...base,
    status: r.status === 'aborted' ? 'aborted' : 'failed',
    error: { code: m?.[1] || 'unknown', message: r.error ?? '', ...(phase ? { phase } : {}) },
  };
}

/** What the lines do not carry, from the run's other files. */
export interface MetricsFileExtras {
  /** A step's rollout results as the run kept them (`steps/<n>.results.json`): win over its rollout lines. */
  results?: ReadonlyMap<number, ReadonlyArray<RolloutResult>> | undefined;
  /** A step's training rows (`steps/<n>.msgpack`): response tokens and advantages per rollout. */
  rows?: ReadonlyMap<number, ReadonlyArray<Sample>> | undefined;
  /** The run's settings with their sources (`run-config.yaml`). */
  settings?: ReadonlyArray<RunSetting> | undefined;
  /** The run's name on the page (default `<mode>_<engines>eng`). */
  name?: string | undefined;
}

const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** A metrics file (and the extras found beside it) as the input of `runReport`. */
export function reportInputFromMetrics(file: MetricsFile, extras: MetricsFileExtras = {}): RunReportInput {
  const config = (file.run?.config ?? {}) as Record<string, unknown>;
  const mode = typeof config.mode === 'string' ? config.mode : undefined;
  const engineCount =
    (Array.isArray(config.engineUrls) ? config.engineUrls.length : 0) || num(config.standInEngines) || 1;
  const stepIds = [...new Set([...file.rollouts.map((r) => r.step), ...file.steps.map((s) => s.step)])].sort(
    (a, b) => a - b,
  );
  const results = stepIds.map((step) => ({
    step,
    results: [
      ...(extras.results?.get(step) ?? file.rollouts.filter((r) => r.step === step).map(resultOfRecord)),
    ],
  }));
  const trained = file.steps.some((s) => num(s.scalars['perf/train_time']) !== undefined);
  const trainerSteps = file.steps
    .map((s) => ({ step: s.step, metrics: s.scalars }))
    .filter((s) => Object.keys(s.metrics).some((k) => k.startsWith('train/')));
  const engine = file.run?.engine ?? null;
  return {
    name: extras.name ?? `${mode ?? 'run'}_${engineCount}eng`,
    mode,
    run: {
      id: file.run?.runId,
      startedAt: file.run?.startedAt ?? undefined,
      endedAt: file.lastT ?? undefined,
      config: file.run?.config,
      settings: extras.settings,
    },
    engineKind: engine
      ? /stand-in/i.test(engine)
        ? { kind: 'sglang', standIn: true, label: engine }
        : { kind: engine, standIn: false }
      : undefined,
    results,
    shapes: results.flatMap(({ step, results: rs }) =>
      shapesOf(step, rs, file.rollouts, extras.rows?.get(step)),
    ),
    perf: file.steps.map((s) => {
      const rollout = num(s.scalars['perf/rollout_time']);
      const handoff = num(s.scalars['perf/handoff_time']);
      return {
        rolloutId: s.step,
        stepTime: rollout !== undefined && handoff !== undefined ? rollout + handoff : undefined,
        rolloutTime: rollout,
        trainWaitTime: rollout,
        trainTime: num(s.scalars['perf/train_time']) ?? handoff,
        updateWeightsTime: num(s.scalars['perf/update_weights_time']),
        metrics: {},
      };
    }),
    stepNotes: trained
      ? {
          train:
            'the trainer: one optimizer step on the handed-off batch ("update weights": the new weights written and loaded)',
        }
      : {
          train:
            'no trainer attached: "train" is the hand-off (GRPO advantages and the batch file written for the trainer)',
          update_weights: 'not in this run: no trainer, so the engine keeps its weights',
        },
    trainer: trainerSteps.length
      ? { source: "metrics file (each step line's train/* scalars: the trainer hook's)", steps: trainerSteps }
      : undefined,
  };
}

/** A step's rollouts' shapes: token counts and advantages from the step's rows, else from the lines. */
function shapesOf(
  step: number,
  results: ReadonlyArray<RolloutResult>,
  records: ReadonlyArray<RolloutMetricRecord>,
  rows: ReadonlyArray<Sample> | undefined,
): RolloutShape[] {
  const byRollout = new Map<number, Sample[]>();
  for (const row of rows ?? []) {
    if (row.rollout_id === null) continue;
    byRollout.set(row.rollout_id, [...(byRollout.get(row.rollout_id) ?? []), row]);
  }
  const lines = new Map(records.filter((r) => r.step === step).map((r) => [r.rollout_id, r]));
  return results.map((r) => {
    const shape = rolloutShapeOf(step, r);
    const own = byRollout.get(r.rolloutId);
    if (own) return { ...shape, ...rowFigures(own) };
    const line = lines.get(r.rolloutId);
    if (line && isScored(r) && typeof line.response_tokens === 'number')
      return { ...shape, responseTokens: line.response_tokens, trainedTokens: line.trained_tokens ?? null };
    return shape;
  });
}
