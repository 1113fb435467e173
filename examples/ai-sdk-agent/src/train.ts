/**
 * One training step of the AI SDK agent: each task's group of rollouts through `sweRollout` (the agent's
 * sandbox from the task's pool, every model call captured by the proxy, the patch graded in a fresh
 * sandbox), slime-preset GRPO advantages per group, the step's batch written in slime's wire format, and
 * the batch handed to the trainer hook.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { encodeSamples, isScored, type RolloutResult, type Sample, type TaskSpec } from '@vime/core';
import type { CaptureProxy } from '@vime/core/proxy';
import { runRollouts } from '@vime/core/runner';
import { grpoAdvantages } from '@vime/grpo';
import type { TrainerHook, TrainResult } from '@vime/loop';
import { type SwePools, sweRollout } from '@vime/swe';
import { codingAgent } from './agent.js';

/** What one step needs: the tasks, the proxy and pools the rollouts use, and where the batch goes. */
export interface StepOptions {
  tasks: readonly TaskSpec[];
  proxy: CaptureProxy;
  pools: SwePools;
  /** The run folder: the batch is `steps/<step>.msgpack` in it. */
  out: string;
  step: number;
  /** Rollouts per task (the GRPO group). */
  groupSize: number;
  /** Rollouts in flight at once. */
  concurrency?: number | undefined;
  trainer?: TrainerHook | undefined;
  signal?: AbortSignal | undefined;
}

/** What one step did: every rollout's result, the trained rows and the batch file, the trainer's answer. */
export interface StepResult {
  results: RolloutResult[];
  rows: Sample[];
  batchPath: string;
  train: TrainResult | undefined;
}

/** One step: roll out, score, write the batch, hand it to the trainer. */
export async function trainStep(options: StepOptions): Promise<StepResult> {
  const { tasks, proxy, pools, out, step, groupSize, trainer, signal } = options;
  const rollout = sweRollout({ pools, proxy, agent: codingAgent });
  const results: RolloutResult[] = [];
  const run = runRollouts(tasks, rollout, {
    samplesPerPrompt: groupSize,
    concurrency: options.concurrency ?? 2,
    guardMs: 600_000,
    signal,
  });
  for await (const result of run) results.push(result);
  const scored = results.filter(isScored);
  const rows: Sample[] = [];
  if (scored.length > 0) {
    const advantages = grpoAdvantages(
      scored.map((r) => r.reward),
      { groups: scored.map((r) => r.groupIndex), preset: 'slime', allowUnevenGroups: true },
    );
    scored.forEach((r, i) => {
      for (const row of r.samples) {
        row.metadata = { ...row.metadata, advantage: advantages[i]! };
        rows.push(row);
      }
    });
  }
  await mkdir(join(out, 'steps'), { recursive: true });
  const batchPath = join(out, 'steps', `${step}.msgpack`);
  await writeFile(batchPath, encodeSamples(rows));
  const train = trainer ? await trainer({ step, batchPath }, signal) : undefined;
  return { results, rows, batchPath, train };
}
