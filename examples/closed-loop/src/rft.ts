/**
 * The rejection-sampling fine-tuning arm (the "is it RL?" control): the same rollouts as the GRPO run
 * (same tasks, same sample budget), but each step trains the current weights with `vime_policy.sft` on the
 * step's successful samples only (`--min-reward 1`: plain next-token cross-entropy on the policy's
 * tokens, no advantages, no clipping), then the policy server loads the result under the step's version.
 * A step without a successful sample leaves the weights as they were (loaded again under the new
 * version, so versions keep following steps). It answers like the GRPO trainer process, so the RL phase
 * drives either through one interface.
 */
import { cp, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError, decodeSamples } from '@vime/core';
import { type ClosedLoopOptions, runPython, tokenizerOf } from './run.js';
import type { RunningTrainer, TrainerStep } from './trainer.js';

export const RFT_LABEL =
  'rejection-sampling fine-tuning (vime_policy.sft on the successful samples), not GRPO';

export function startRftTrainer(options: {
  modelPath: string;
  /** Trainer folder: weights/step-N like the GRPO trainer's. */
  out: string;
  serverUrl: string;
  /** The first step's weight version is the next after this one. */
  weightVersion: string;
  closedLoop: ClosedLoopOptions;
}): RunningTrainer {
  let current = options.modelPath;
  const steps: TrainerStep[] = [];
  const logs: string[] = [];
  const o = options.closedLoop;
  const train = async (step: number, batchPath: string, signal?: AbortSignal): Promise<TrainerStep> => {
    signal?.throwIfAborted();
    const started = performance.now();
    const rows = decodeSamples(await readFile(batchPath));
    const successes = rows.filter((r) => typeof r.reward === 'number' && r.reward >= 1).length;
    const checkpoint = join(options.out, 'weights', `step-${step}`);
    let loss: number | undefined;
    if (successes > 0) {
      const onLine = (line: string) => {
        logs.push(line);
        o.log(`rft: ${line}`);
      };
      await runPython({ ...o, log: onLine }, [
        ...['-m', 'vime_policy.sft', '--data', batchPath, '--init', current, '--out', checkpoint],
        ...['--epochs', '1', '--min-reward', '1', '--lr', String(o.lr), '--warmup', '0'],
        ...['--seed', String(o.seed ?? 1), '--tokenizer', tokenizerOf(o), '--device', o.device],
      ]);
      const log = JSON.parse(await readFile(join(checkpoint, 'sft_log.json'), 'utf8')) as {
        steps: Array<{ loss: number }>;
      };
      loss = log.steps.at(-1)?.loss;
    } else {
      o.log(`rft: step ${step} has no successful sample; the weights stay as they are`);
      await cp(current, checkpoint, { recursive: true });
    }
    const trainSeconds = (performance.now() - started) / 1000;
    const version = String(step);
    const res = await fetch(`${options.serverUrl}/update_weights_from_disk`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model_path: checkpoint, weight_version: version }),
      ...(signal ? { signal } : {}),
    });
    if (!res.ok)
      throw new ConfigError(
        `rft: the policy server did not load ${checkpoint}: HTTP ${res.status} ${await res.text()}`,
      );
    current = checkpoint;
    const event: TrainerStep = {
      event: 'step',
      step,
      weight_version: version,
      checkpoint,
      metrics: {
        ...(loss === undefined ? {} : { loss }),
        rft_successes: successes,
        rft_samples: rows.length,
        train_seconds: trainSeconds,
        update_seconds: (performance.now() - started) / 1000 - trainSeconds,
      },
    };
    steps.push(event);
    return event;
  };
  return {
    ready: { event: 'ready', backend: 'rft', label: RFT_LABEL, weight_version: options.weightVersion },
    pid: process.pid,
    steps,
    train,
    close: async () => 0,
    logs,
  };
}
