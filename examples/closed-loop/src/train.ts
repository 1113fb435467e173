/**
 * The RL phase: a policy server, the trainer process, and the coding-agent loop with the trainer hook.
 * Each step's batch is trained on and the server loads the new weights under the next version before
 * the next step samples (sync mode). Every trained step is appended to `train/closed-loop-steps.jsonl`
 * as it finishes, so a run stopped between steps continues from its last checkpoint when started again
 * (the optimizer's moments start afresh there; the weights, the step numbers and versions go on).
 */
import { existsSync } from 'node:fs';
import { appendFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { decodeSamples, type Sample } from '@vime/core';
import { type RunSummary, runLoop, type TrainResult } from '@vime/loop';
import { checkStep, checkWeightVersions, type StepChecks, type VersionCheck } from './checks.js';
import { startPolicyServer } from './policy-server.js';
import { startRftTrainer } from './rft.js';
import { type ClosedLoopOptions, loopConfig, paths, scoreRow, taskSplit, tokenizerOf } from './run.js';
import { startTrainer, type TrainerStep, trainResultOf } from './trainer.js';

/** Mean and max |a − b| over the trained tokens (loss mask 1) of a row. */
function gap(row: Sample, a: ArrayLike<number>, b: ArrayLike<number>): { mean: number; max: number } {
  let sum = 0;
  let max = 0;
  let n = 0;
  for (let i = 0; i < row.response_length; i++) {
    if (row.loss_mask && row.loss_mask[i] !== 1) continue;
    const d = Math.abs(a[i]! - b[i]!);
    sum += d;
    max = Math.max(max, d);
    n++;
  }
  return { mean: n ? sum / n : 0, max };
}

/** What the hook records of a trained step, one JSON line each, as it happens. */
interface TrainedStep {
  step: number;
  servedVersion: string;
  probe: StepRecord['probe'];
  event: TrainerStep;
}

async function readTrained(file: string): Promise<TrainedStep[]> {
  if (!existsSync(file)) return [];
  return (await readFile(file, 'utf8'))
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as TrainedStep);
}

export interface StepRecord {
  step: number;
  rollouts: number;
  meanReward: number | null;
  passAt1: number | null;
  /** The version the engine served while the step rolled out, and the one it serves after training. */
  servedVersion: string | undefined;
  nextVersion: string;
  logprobAbsDiffMean: number | null;
  train: TrainResult;
  /**
   * The step's first trained row scored under the served weights before and after the update:
   * `replay` = |served − rollout log-probs| (≈ 0: the row came from those weights),
   * `change` = |after − before| (> 0: the update moved the policy on this very sequence).
   */
  probe: {
    rolloutId: number | null;
    replay: { mean: number; max: number };
    change: { mean: number; max: number };
  } | null;
  /** null for the rejection-sampling arm: it writes no GRPO dumps to check. */
  checks: StepChecks | null;
  /** The rejection-sampling arm's one check: every row carries the version served while it rolled out. */
  versions?: VersionCheck | undefined;
}

export interface TrainRunResult {
  /** The arm (grpo, shuffled, rft) and the run's seed. */
  arm?: 'grpo' | 'shuffled' | 'rft' | undefined;
  seed?: number | undefined;
  model: string;
  trainer: { backend: string; label?: string | undefined; ready: Record<string, unknown> };
  steps: StepRecord[];
  summary: RunSummary;
}

/** The RL run: policy server + trainer + the coding-agent loop with the trainer hook, then the checks. */
export async function train(options: ClosedLoopOptions, model: string): Promise<TrainRunResult> {
  const split = await taskSplit(options);
  const p = paths(options.out);
  await mkdir(p.trainer, { recursive: true });
  const stepsFile = join(p.train, 'closed-loop-steps.jsonl');
  // A run started before continues from the checkpoint of its last trained step.
  const trained = await readTrained(stepsFile);
  const resume = existsSync(join(p.train, 'config.json'));
  const last = trained.at(-1);
  const startModel = last ? last.event.checkpoint : resolve(model);
  if (last)
    options.log(
      `train: continuing after step ${last.step} from ${startModel} (weight version ${last.event.weight_version})`,
    );
  const server = await startPolicyServer({
    modelPath: startModel,
    tokenizerPath: tokenizerOf(options),
    python: options.python,
    device: options.device,
    args: ['--weight-version', last ? last.event.weight_version : '0', ...options.serverArgs],
    signal: options.signal,
  });
  const arm = options.arm ?? 'grpo';
  const seed = options.seed ?? 1;
  let trainer: Awaited<ReturnType<typeof startTrainer>> | undefined;
  try {
    trainer =
      arm === 'rft'
        ? startRftTrainer({
            modelPath: startModel,
            out: p.trainer,
            serverUrl: server.url,
            weightVersion: last ? last.event.weight_version : '0',
            closedLoop: options,
          })
        : await startTrainer({
            modelPath: startModel,
            out: p.trainer,
            engineUrls: [server.url],
            backend: options.backend,
            device: options.device,
            python: options.python,
            entry: options.trainerEntry,
            pythonPath: options.trainerPythonPath,
            args: ['--lr', String(options.lr), '--seed', String(seed), ...options.trainerArgs],
            onLog: (line) => options.log(`trainer: ${line}`),
            signal: options.signal,
          });
    options.log(
      `trainer ready: ${trainer.ready.backend}${trainer.ready.label ? ` (${trainer.ready.label})` : ''}, weight version ${trainer.ready.weight_version}`,
    );
    const running = trainer;
    const config = loopConfig(options, {
      out: p.train,
      dataset: split.train,
      engineUrls: [server.url],
      steps: options.steps,
      promptsPerStep: options.prompts,
      samplesPerPrompt: options.samples,
      mode: options.mode,
      // Procedural tasks: fresh training instances every step, drawn without replacement (draws/<step>.json).
      ...(split.kind === 'procedural' ? { taskDraw: 'fresh', taskDrawSeed: seed } : {}),
      ...(arm === 'shuffled' ? { shuffleRewardsSeed: seed } : {}),
      ...(resume ? { resume: p.train } : {}),
    });
    const summary = await runLoop(config, {
      log: options.log,
      signal: options.signal,
      trainer: async ({ step, batchPath }, signal) => {
        // Trained before a stop that cut off the loop's own record of the step: the server already
        // serves its weights.
        const done = trained.find((t) => t.step === step);
        if (done) return trainResultOf(done.event);
        const servedVersion = await servedVersionOf(server.url);
        const rows = decodeSamples(await readFile(batchPath));
        const row = rows.find((r) => r.loss_mask?.some((m) => m === 1) && r.rollout_log_probs);
        const before = row ? await scoreRow(server.url, row, signal) : undefined;
        const event = await running.train(step, batchPath, signal);
        let probe: StepRecord['probe'] = null;
        if (row && before) {
          const after = await scoreRow(server.url, row, signal);
          probe = {
            rolloutId: row.rollout_id,
            replay: gap(row, before, row.rollout_log_probs!),
            change: gap(row, after, before),
          };
        }
        const record: TrainedStep = { step, servedVersion, probe, event };
        trained.push(record);
        await appendFile(stepsFile, `${JSON.stringify(record)}\n`);
        return trainResultOf(event);
      },
    });
    const steps: StepRecord[] = [];
    for (const s of summary.steps) {
      const t = trained.find((x) => x.step === s.step);
      if (!t) continue;
      const checks =
        arm === 'rft'
          ? null
          : await checkStep({
              step: s.step,
              batchPath: s.batchPath,
              trainerOut: p.trainer,
              expectedVersion: options.mode === 'sync' ? t.servedVersion : undefined,
            });
      const diff = t.event.metrics.logprob_abs_diff_mean;
      steps.push({
        step: s.step,
        rollouts: s.rollouts,
        meanReward: s.metrics.reward.mean,
        passAt1: s.metrics.passAtK.find((k) => k.k === 1)?.value ?? null,
        servedVersion: t.servedVersion,
        nextVersion: t.event.weight_version,
        logprobAbsDiffMean: typeof diff === 'number' ? diff : null,
        train: trainResultOf(t.event),
        probe: t.probe,
        checks,
        ...(checks
          ? {}
          : {
              versions: checkWeightVersions(
                decodeSamples(await readFile(s.batchPath)),
                options.mode === 'sync' ? t.servedVersion : undefined,
              ),
            }),
      });
    }
    const result: TrainRunResult = {
      arm,
      seed,
      model: resolve(model),
      trainer: { backend: trainer.ready.backend, label: trainer.ready.label, ready: trainer.ready },
      steps,
      summary,
    };
    await writeFile(join(p.train, 'closed-loop.json'), `${JSON.stringify(result, null, 2)}\n`);
    return result;
  } finally {
    await trainer?.close();
    await server.close();
  }
}

async function servedVersionOf(url: string): Promise<string> {
  const res = await fetch(`${url}/get_weight_version`);
  const body = (await res.json()) as { weight_version: string };
  return body.weight_version;
}
