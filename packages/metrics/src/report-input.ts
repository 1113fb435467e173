/** What a run report is built from (`runReport`'s input). */
import type { RolloutResult } from '@vime/core';
import type { ScrapeSeries } from './prometheus.js';
import type { RolloutMetrics } from './rollout.js';
import type { TokenAuditStep } from './run-sections.js';
import type { SaturationPoint } from './saturation.js';
import type { PerfStep, SlimePerfLog } from './slime-perf.js';
import type { StepSpecDecode } from './spec-decode.js';
import type { RolloutShape, TrainerStepInput } from './training.js';

/** One engine's load readings for the report. */
export interface EngineInput {
  /** A name for the engine (e.g. `eng0` or its host). */
  name: string;
  /** Load readings over time: decode-batch samples or scrape snapshots mapped to `SaturationPoint`s. */
  points: ReadonlyArray<SaturationPoint>;
  /** Prometheus scrapes of the engine, when it was scraped: adds tokens, prefix-cache hits and latency. */
  scrapes?: ScrapeSeries['scrapes'] | undefined;
}

/** Which engine served the run; a stand-in is labelled as such on the page and in the record. */
export interface EngineKind {
  kind: string;
  standIn: boolean;
  /** One line for the page, e.g. "stand-in engine: a scripted policy behind SGLang's wire, not a model". */
  label?: string | undefined;
}

/** The engines-vs-step-time curve of a capacity plan (`vime plan --simulate --json`'s `simulation.curve`). */
export interface CapacityInput {
  mode: string;
  source: string;
  points: ReadonlyArray<{
    engines: number;
    step_time_sec: number;
    queue_req_peak?: number | undefined;
    rollout_time_sec?: number | undefined;
  }>;
}

/** One setting of a run: its key, its value, and where the value came from (`default`, a file, a flag, …). */
export interface RunSetting {
  key: string;
  value: unknown;
  source: string;
}

/** What a run report is built from. */
export interface RunReportInput {
  /** Run key, e.g. `async_3eng`. */
  name?: string | undefined;
  /** `sync` (rollout then train) or `async` (train overlaps rollout). */
  mode?: string | undefined;
  /** Who, when and with what: the page's header. */
  run?:
    | {
        id?: string | undefined;
        /** Epoch milliseconds. */
        startedAt?: number | undefined;
        endedAt?: number | undefined;
        config?: unknown;
        /** The run's settings as the user sees them, each with where its value came from: a table at the top. */
        settings?: ReadonlyArray<RunSetting> | undefined;
        codeVersion?: string | undefined;
      }
    | undefined;
  engineKind?: EngineKind | undefined;
  engines?: ReadonlyArray<EngineInput> | undefined;
  /** slime perf lines (a parsed log, or its steps). */
  perf?: SlimePerfLog | ReadonlyArray<PerfStep> | undefined;
  /** Steps whose timing was not measured in this process (a resumed run): drawn as "resumed", not 0 s. */
  resumedSteps?: ReadonlyArray<number> | undefined;
  /** Why a step-time phase is missing or what it stands for in this run, by phase. */
  stepNotes?: Partial<Record<StepPhase, string>> | undefined;
  /** Rollout counts: metrics of the whole run, or plain counts. Default: the `[agent]` lines of `perf`. */
  rollouts?: RolloutMetrics | { completed: number; aborted: number; failed?: number | undefined } | undefined;
  /** Every rollout of the run, by step: reward and pass@k with intervals, tasks, failures, timing. */
  results?: ReadonlyArray<{ step: number; results: ReadonlyArray<RolloutResult> }> | undefined;
  /** When a reward counts as solved (default `r === 1`, slime's). */
  correct?: ((reward: number) => boolean) | undefined;
  /**
   * The trainer's own numbers per step (loss, KL, grad norm, …) and where they came from. Default: the
   * `step K:` train lines of `perf` (source `slime log`).
   */
  trainer?: { source: string; steps: ReadonlyArray<TrainerStepInput> } | undefined;
  /** Every rollout's shape (length, truncation, turns, group, advantage). Default: from `results`. */
  shapes?: ReadonlyArray<RolloutShape> | undefined;
  /** Reward and pass@k per step, from `rolloutMetrics` of each step's rollouts (wins over `results`). */
  quality?: ReadonlyArray<{ step: number; metrics: RolloutMetrics }> | undefined;
  /** Milliseconds per sandbox command, when the results do not carry `metadata.execCallsMs`. */
  execCallsMs?: ReadonlyArray<number> | undefined;
  /** Sandbox claims (`warm: null` when the source does not say). */
  claims?: ReadonlyArray<{ warm: boolean | null; latencyMs: number }> | undefined;
  /** Tokens the engines produced over `seconds`. */
  tokens?: { output: number; prompt?: number | undefined; seconds: number } | undefined;
  /** Work-unit counts, when the run tracked them. */
  workUnits?: Record<string, number> | undefined;
  /** The token audit of each step's hand-off, when the run audited them. */
  tokenAudit?: ReadonlyArray<TokenAuditStep & { handoffSeconds?: number | undefined }> | undefined;
  /** Speculative decoding per step from the engines' counters, for steps whose rows carry no counts (vLLM). */
  specDecode?: ReadonlyArray<StepSpecDecode & { step: number }> | undefined;
  capacity?: CapacityInput | undefined;
  /** Slices in the decile traces (default 10). */
  buckets?: number | undefined;
  /** Points per engine in the charted timeline (default 600). */
  timelinePoints?: number | undefined;
}

/** A phase of a trainer step. */
export type StepPhase = 'rollout' | 'train_wait' | 'train' | 'update_weights';
