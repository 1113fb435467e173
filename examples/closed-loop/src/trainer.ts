/**
 * The trainer process of the closed loop (`python -m vime_megatron.loop_trainer`) as a child process:
 * one JSON request line per step on its stdin, one JSON event line per step on its stdout (validated
 * with zod), logs on stderr. `trainerHook()` turns it into the coding-agent loop's `TrainerHook`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { EngineError, errorMarker, hasErrorMarker, ValidationError } from '@vime/core';
import { findPython } from '@vime/core/utils';
import type { TrainerHook, TrainResult } from '@vime/loop';
import { z } from 'zod';
import { exampleDir, pythonEnv } from './python.js';

const ReadySchema = z.object({
  event: z.literal('ready'),
  backend: z.string(),
  label: z.string().optional(),
  weight_version: z.string(),
});
const StepSchema = z.object({
  event: z.literal('step'),
  step: z.number().int().positive(),
  weight_version: z.string(),
  checkpoint: z.string(),
  metrics: z.record(z.string(), z.unknown()),
});
const ErrorSchema = z.object({
  event: z.literal('error'),
  step: z.number().int().nullable(),
  code: z.string(),
  message: z.string(),
});
const EventSchema = z.discriminatedUnion('event', [ReadySchema.loose(), StepSchema.loose(), ErrorSchema]);
export type TrainerReady = z.output<typeof ReadySchema> & Record<string, unknown>;
export type TrainerStep = z.output<typeof StepSchema>;

const trainerMarker = errorMarker('TrainerError');

/** The trainer process failed or answered what it should not: an infrastructure failure of the run. */
export class TrainerError extends EngineError {
  readonly [trainerMarker] = true;

  static override isInstance(value: unknown): value is TrainerError {
    return hasErrorMarker(value, trainerMarker);
  }
}

export interface TrainerOptions {
  /** The initial Hugging Face checkpoint (weight version 0). */
  modelPath: string;
  /** Trainer folder: weights/, rollout_data/, train_data/, metrics.jsonl. */
  out: string;
  /** Policy servers to update after each step. */
  engineUrls: string[];
  backend: 'megatron' | 'torch';
  device?: string | undefined;
  /** More trainer flags (`--lr`, `--eps-clip`, ...). */
  args?: string[] | undefined;
  python?: string | undefined;
  /** What runs after the interpreter (default `-m vime_megatron.loop_trainer`). */
  entry?: string[] | undefined;
  /** Extra PYTHONPATH entries (before the project's Python). */
  pythonPath?: string[] | undefined;
  onLog?: ((line: string) => void) | undefined;
  /** How long the process may take to load the model and say `ready` (default 10 min). */
  startTimeoutMs?: number | undefined;
  /** How long one step (train + checkpoint + every engine's update) may take (default 30 min). */
  stepTimeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

export interface RunningTrainer {
  ready: TrainerReady;
  pid: number;
  /** Every step event so far, in order. */
  steps: TrainerStep[];
  /** Send one step's batch and wait for its event; an `error` event or an exit rejects. */
  train(step: number, batchPath: string, signal?: AbortSignal): Promise<TrainerStep>;
  /** Close stdin (the trainer exits 0 on EOF); SIGTERM then SIGKILL after `graceMs`. */
  close(graceMs?: number): Promise<number | null>;
  logs: string[];
}

type Waiter = { resolve(e: z.output<typeof EventSchema>): void; reject(e: Error): void };

export async function startTrainer(options: TrainerOptions): Promise<RunningTrainer> {
  let python = options.python;
  if (!python) {
    const found = findPython();
    if ('missing' in found) throw new TrainerError(`no Python with torch for the trainer: ${found.missing}`);
    python = found.python;
  }
  const argv = [
    ...(options.entry ?? ['-m', 'vime_megatron.loop_trainer']),
    '--model-path',
    options.modelPath,
    '--out',
    options.out,
    '--backend',
    options.backend,
    ...(options.device ? ['--device', options.device] : []),
    ...options.engineUrls.flatMap((u) => ['--engine-url', u]),
    ...(options.args ?? []),
  ];
  const env = pythonEnv();
  if (options.pythonPath?.length) env.PYTHONPATH = [...options.pythonPath, env.PYTHONPATH].join(':');
  const child: ChildProcess = spawn(python, argv, { cwd: exampleDir, env, stdio: ['pipe', 'pipe', 'pipe'] });
  const logs: string[] = [];
  let stderrTail = '';
  createInterface({ input: child.stderr! }).on('line', (line) => {
    stderrTail = `${stderrTail}${line}\n`.slice(-4000);
    logs.push(line);
    options.onLog?.(line);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const waiters: Waiter[] = [];
  const events: Array<z.output<typeof EventSchema>> = [];
  let failure: Error | undefined;
  const fail = (error: Error) => {
    failure ??= error;
    for (const w of waiters.splice(0)) w.reject(failure);
  };
  createInterface({ input: child.stdout! }).on('line', (line) => {
    if (!line.trim()) return;
    let parsed: z.output<typeof EventSchema>;
    try {
      const result = EventSchema.safeParse(JSON.parse(line));
      if (!result.success) throw new Error(result.error.issues.map((i) => i.message).join('; '));
      parsed = result.data;
    } catch (error) {
      fail(
        new ValidationError('trainer stdout', `not a protocol event (${(error as Error).message}): ${line}`),
      );
      return;
    }
    const waiter = waiters.shift();
    if (waiter) waiter.resolve(parsed);
    else events.push(parsed);
  });
  exited.then((code) => fail(new TrainerError(`the trainer exited with code ${code}\n${stderrTail.trim()}`)));
  child.on('error', (error) => fail(new TrainerError(`the trainer did not start: ${error.message}`)));

  const next = (timeoutMs: number, signal: AbortSignal | undefined, what: string) =>
    new Promise<z.output<typeof EventSchema>>((resolve, reject) => {
      const queued = events.shift();
      if (queued) return resolve(queued);
      if (failure) return reject(failure);
      const timer = setTimeout(
        () => done(new TrainerError(`the trainer gave no answer to ${what} within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const onAbort = () => done(new TrainerError(`${what} was aborted`));
      const waiter: Waiter = {
        resolve: (e) => done(undefined, e),
        reject: (e) => done(e),
      };
      function done(error?: Error, event?: z.output<typeof EventSchema>) {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const i = waiters.indexOf(waiter);
        if (i >= 0) waiters.splice(i, 1);
        if (error) reject(error);
        else resolve(event!);
      }
      waiters.push(waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (signal?.aborted) onAbort();
    });

  const close = async (graceMs = 30_000) => {
    if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
    child.stdin?.end();
    const timer = setTimeout(() => child.kill('SIGTERM'), graceMs);
    const kill = setTimeout(() => child.kill('SIGKILL'), graceMs * 2);
    const code = await exited;
    clearTimeout(timer);
    clearTimeout(kill);
    return code;
  };

  const first = await next(options.startTimeoutMs ?? 600_000, options.signal, 'start-up').catch(
    async (error: Error) => {
      await close(1000);
      throw error;
    },
  );
  if (first.event !== 'ready') {
    await close(1000);
    throw new TrainerError(
      first.event === 'error'
        ? `the trainer failed to start (${first.code}): ${first.message}`
        : `the trainer's first event was ${first.event}, not ready`,
    );
  }
  const steps: TrainerStep[] = [];
  const train = async (step: number, batchPath: string, signal?: AbortSignal) => {
    if (failure) throw failure;
    child.stdin!.write(`${JSON.stringify({ step, batch: batchPath })}\n`);
    const event = await next(options.stepTimeoutMs ?? 1_800_000, signal, `step ${step}`);
    if (event.event === 'error')
      throw new TrainerError(`the trainer failed step ${step} (${event.code}): ${event.message}`);
    if (event.event !== 'step' || event.step !== step)
      throw new TrainerError(`the trainer answered step ${step} with ${JSON.stringify(event)}`);
    steps.push(event);
    return event;
  };
  return { ready: first as TrainerReady, pid: child.pid!, steps, train, close, logs };
}

const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** A step event as the loop's `TrainResult`: optimizer time, weight-update time (save + engines load). */
export function trainResultOf(event: TrainerStep): TrainResult {
  const m = event.metrics;
  const metrics: Record<string, number> = {};
  for (const [k, v] of Object.entries(m)) {
    const n = typeof v === 'boolean' ? Number(v) : num(v);
    if (n !== undefined) metrics[k] = n;
  }
  const total = num(m.seconds) ?? 0;
  const trainSeconds = num(m.train_seconds) ?? total;
  const update = (num(m.save_seconds) ?? 0) + (num(m.update_seconds) ?? 0);
  return {
    weightVersion: event.weight_version,
    trainSeconds,
    weightUpdateSeconds: update || Math.max(0, total - trainSeconds),
    metrics,
  };
}

/** The running trainer as the coding-agent loop's trainer hook. */
export function trainerHook(trainer: RunningTrainer): TrainerHook {
  return async ({ step, batchPath }, signal) => trainResultOf(await trainer.train(step, batchPath, signal));
}
