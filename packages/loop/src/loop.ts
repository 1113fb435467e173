/**
 * The coding-agent RL loop. Per step: pick tasks, make each a prompt group of `samplesPerPrompt` siblings
 * in the durable `GroupQueue` (groups.ts), run the siblings (`sweRollout`; each graded one is recorded
 * with a receipt as it finishes, an infra failure gets a replacement or drops its group), then hand the
 * step off: the consumer takes the step's complete groups from the queue, computes GRPO advantages (slime
 * preset), writes `steps/<step>.msgpack` and commits the step. Sync mode hands off after each step; async
 * mode keeps rolling out the next step while the consumer takes the last one. Metrics and the report
 * cover every step.
 */
import type { RolloutMetrics, WeightStaleness } from '@vime/metrics';
import type { RowVerdict } from '@vime/swe';
import type { LoopAgent } from './agents.js';
import type { ConfigSources } from './config/render.js';
import { readStoredConfig } from './config/resolve.js';
import type { Config } from './config/schema.js';
import type { RouterLogEntry } from './router-log.js';
import { LoopRun } from './run.js';
import type { StepSummary, TrainResult } from './steps.js';

/**
 * Trains on a step's batch once `steps/<step>.msgpack` is written, and resolves when the engines serve
 * the new weights. Sync mode waits for it before the next step's rollouts; async mode trains step N
 * while step N+1 rolls out. A rejection fails the run (its batch stays on disk).
 */
export type TrainerHook = (
  step: { step: number; batchPath: string },
  signal?: AbortSignal,
) => Promise<TrainResult>;

/** What `runLoop` writes to and is stopped by: a log, a signal, and an optional trainer. */
export interface LoopIO {
  /** Where the run's progress lines go. */
  log: (line: string) => void;
  signal?: AbortSignal | undefined;
  /** Optional trainer, called in each step's hand-off (none: the batch file is the hand-off). */
  trainer?: TrainerHook | undefined;
  /** Where each value of the config came from (`resolveConfig`), for the run folder and the report. */
  sources?: ConfigSources | undefined;
  /** Your own agent for every sample, in place of the harnesses (`--agent`, `metadata.agent`). */
  agent?: LoopAgent | undefined;
}

/** What a run did: its folder, dataset, steps, metrics, report and engines. */
export interface RunSummary {
  out: string;
  /** The dataset file the tasks came from (the published offline set by default). */
  dataset: string;
  /** Rows left out by the baseline check. */
  excluded: RowVerdict[];
  steps: StepSummary[];
  overall: RolloutMetrics;
  reportJson: string;
  reportHtml: string;
  engines: string[];
  standIn: boolean;
  pool: { warmHits: number; fallbacks: number };
  /** Sandboxes left by a killed run and removed before resuming. */
  reapedSandboxes: number;
  /** Rollouts found already completed in the queue (a resumed run) and not run again. */
  resumedRollouts: number;
  /** Duration of each agent command in the sandbox (ms): p50 and p99. */
  execPerCall: { p50: number | null; p99: number | null };
  /** Failed and aborted rollouts by error code. */
  failuresByCause: Record<string, number>;
  /** Graded rollouts by how the grade came about (`tests_ran`, `eval_timeout`, `hack_detected`, …). */
  gradeOutcomes: Record<string, number>;
  /** Detected hacks by kind (each rollout counts once per kind). */
  hacksByKind: Record<string, number>;
  tokensPerSecond: number;
  /** What the engine router did: engines taken down and readmitted (with what triggered the check), breaker openings. */
  router: RouterLogEntry[];
  /** Sessions that moved to another engine. */
  sessionMoves: number;
  /** Turns retried on another engine after a failed request, and turns continued across a weight update. */
  turnRetries: number;
  turnInterruptions: number;
  staleness: WeightStaleness;
}

/** Run the loop: every step rolled out, handed off and reported; resumes a killed run (`config.resume`). */
export async function runLoop(config: Config, io: LoopIO): Promise<RunSummary> {
  const run = await LoopRun.start(config, io);
  try {
    await run.runSteps();
  } finally {
    await run.close();
  }
  return run.summarize();
}

/** The configuration a run in `dir` was started with (for `--resume`). */
export async function readConfigOf(dir: string): Promise<Config> {
  return readStoredConfig(dir);
}
