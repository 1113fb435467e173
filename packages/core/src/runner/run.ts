/**
 * `runRollouts`: run `samplesPerPrompt` rollouts per task under an explicit concurrency cap and a
 * per-rollout wall-clock guard, and yield every outcome as a `RolloutResult` in completion order.
 * A rollout that throws or overruns its guard becomes a `failed` / `aborted` result naming its cause
 * and phase; nothing a rollout does escapes the iterator.
 */
import { EventEmitter } from 'eventemitter3';
import { ConfigError, describeValue, ValidationError, VimeError } from '../errors.js';
import { now, type RolloutError, type RolloutEvent, type RolloutResult } from '../rollout.js';
import {
  checkOptions,
  type RolloutContext,
  type RolloutFunction,
  type RolloutOutcome,
  type RolloutRef,
  type RunEvents,
  type RunRolloutsOptions,
  type RunStats,
  type TaskLike,
} from './options.js';
import { completedResult, toRolloutError, unscoredResult } from './outcome.js';
import { PhaseRecorder } from './phases.js';

/**
 * Run `rollout` `samplesPerPrompt` times for every task, at most `concurrency` at once, and yield the
 * results as they finish. Tasks may be an async iterable (pulled only when a slot is free). Attach
 * listeners to the returned run before iterating it. Breaking out of the loop aborts the rollouts in
 * flight and waits up to `graceMs` for them to return.
 */
export function runRollouts<T extends TaskLike>(
  tasks: Iterable<T> | AsyncIterable<T>,
  rollout: RolloutFunction<T>,
  options: RunRolloutsOptions,
): RolloutRun<T> {
  checkOptions(options);
  if (typeof rollout !== 'function') {
    throw new ConfigError(`runRollouts rollout: expected a function, found ${describeValue(rollout)}`);
  }
  return new RolloutRun(tasks, rollout, options);
}

interface Running {
  /** Abort the rollout's signal and wake the runner waiting on it. */
  abort: (reason: VimeError) => void;
  settled: Promise<void>;
}

type Next<T> = [T, RolloutRef] | undefined;

const abortError = (code: 'aborted' | 'timeout', message: string) => new VimeError(code, message);

/** A running set of rollouts: its results as an async iterable, its events and its stats. */
export class RolloutRun<T extends TaskLike>
  extends EventEmitter<RunEvents>
  implements AsyncIterable<RolloutResult>
{
  /** Total rollouts to run, once known (immediately for arrays; when an async source ends otherwise). */
  total: number | undefined;
  readonly stats: RunStats = {
    started: 0,
    inFlight: 0,
    peakInFlight: 0,
    finished: 0,
    skipped: 0,
    abandoned: 0,
    byStatus: { completed: 0, truncated: 0, failed: 0, aborted: 0 },
  };

  readonly #rollout: RolloutFunction<T>;
  readonly #samplesPerPrompt: number;
  readonly #concurrency: number;
  readonly #guardMs: number;
  readonly #graceMs: number;
  readonly #options: RunRolloutsOptions;
  readonly #tasks: Iterable<T> | AsyncIterable<T>;
  #source: Iterator<T> | AsyncIterator<T> | undefined;
  #task: T | undefined;
  #groupIndex: number;
  #sampleIndex: number;
  #exhausted = false;
  #stopped = false;
  #filling = false;
  #iterating = false;
  #sourceError: unknown;
  #ready: RolloutResult[] = [];
  #wake: (() => void) | undefined;
  readonly #running = new Set<Running>();
  #stopReason: VimeError | undefined;

  constructor(
    tasks: Iterable<T> | AsyncIterable<T>,
    rollout: RolloutFunction<T>,
    options: RunRolloutsOptions,
  ) {
    super();
    this.#tasks = tasks;
    this.#rollout = rollout;
    this.#options = options;
    this.#samplesPerPrompt = options.samplesPerPrompt ?? 1;
    this.#concurrency = options.concurrency;
    this.#guardMs = options.guardMs;
    this.#graceMs = options.graceMs ?? 5000;
    this.#groupIndex = (options.firstGroupIndex ?? 0) - 1;
    this.#sampleIndex = this.#samplesPerPrompt;
    if (Array.isArray(tasks)) this.total = tasks.length * this.#samplesPerPrompt;
  }

  /** The results as they finish (one pass; a second iteration is an error). */
  async *[Symbol.asyncIterator](): AsyncGenerator<RolloutResult, void, undefined> {
    if (this.#iterating) {
      throw new ConfigError(
        'this rollout run is already being iterated; call runRollouts again for a new run',
      );
    }
    this.#iterating = true;
    const signal = this.#options.signal;
    const onAbort = () =>
      this.#stop(
        VimeError.isInstance(signal?.reason)
          ? signal.reason
          : abortError('aborted', `the run was aborted: ${String(signal?.reason ?? 'no reason given')}`),
      );
    if (signal?.aborted) onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    let complete = false;
    try {
      void this.#fill();
      for (;;) {
        const next = this.#ready.shift();
        if (next) {
          void this.#fill();
          yield next;
          continue;
        }
        const drained = this.#stopped || (this.#exhausted && !this.#filling);
        if (drained && this.stats.inFlight === 0) break;
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
        });
      }
      complete = true;
      if (this.#sourceError !== undefined) {
        throw new VimeError('invalid_argument', 'runRollouts: the task source threw', {
          cause: this.#sourceError,
        });
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      if (!complete) {
        this.#stop(abortError('aborted', 'the consumer stopped reading rollout results'));
        await Promise.all([...this.#running].map((r) => r.settled));
      }
      this.emit('end', this.stats);
    }
  }

  #stop(reason: VimeError): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#stopReason = reason;
    this.#exhausted = true;
    for (const r of this.#running) r.abort(reason);
    // Close a generator source so its own cleanup runs; a pending next() may still settle later.
    void Promise.resolve(this.#source?.return?.()).catch(() => {});
    this.#signalReady();
  }

  #signalReady(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** Start rollouts while there is a free slot and the unread results do not exceed the cap. */
  async #fill(): Promise<void> {
    if (this.#filling) return;
    this.#filling = true;
    try {
      while (
        !this.#exhausted &&
        this.stats.inFlight < this.#concurrency &&
        this.#ready.length < this.#concurrency
      ) {
        let next = this.#nextRef();
        if (next instanceof Promise) next = await next;
        if (next === undefined || this.#stopped) break;
        if (this.#options.skip?.(next[1])) {
          this.stats.skipped++;
          continue;
        }
        this.#launch(next);
      }
    } catch (error) {
      this.#sourceError = error;
      this.#exhausted = true;
    } finally {
      this.#filling = false;
      this.#signalReady();
    }
  }

  /** The next rollout to start; synchronous unless a new task must come from an async source. */
  #nextRef(): Next<T> | Promise<Next<T>> {
    if (this.#sampleIndex < this.#samplesPerPrompt) return this.#ref();
    this.#source ??=
      Symbol.asyncIterator in this.#tasks
        ? (this.#tasks as AsyncIterable<T>)[Symbol.asyncIterator]()
        : (this.#tasks as Iterable<T>)[Symbol.iterator]();
    const step = this.#source.next();
    return step instanceof Promise ? step.then((s) => this.#nextTask(s)) : this.#nextTask(step);
  }

  #nextTask(step: IteratorResult<T>): Next<T> {
    const position = this.#groupIndex + 1 - (this.#options.firstGroupIndex ?? 0);
    if (step.done) {
      this.#exhausted = true;
      this.total = position * this.#samplesPerPrompt;
      return undefined;
    }
    const task = step.value;
    if (task === null || typeof task !== 'object' || typeof task.id !== 'string') {
      throw new ValidationError(
        `tasks[${position}].id`,
        `expected a task with a string id, found ${describeValue(task)}`,
      );
    }
    this.#task = task;
    this.#groupIndex++;
    this.#sampleIndex = 0;
    return this.#ref();
  }

  #ref(): Next<T> {
    const sampleIndex = this.#sampleIndex++;
    const task = this.#task!;
    return [
      task,
      {
        groupIndex: this.#groupIndex,
        sampleIndex,
        rolloutId: this.#groupIndex * this.#samplesPerPrompt + sampleIndex,
        taskId: task.id,
      },
    ];
  }

  #launch([task, ref]: [T, RolloutRef]): void {
    const stats = this.stats;
    stats.started++;
    stats.inFlight++;
    stats.peakInFlight = Math.max(stats.peakInFlight, stats.inFlight);
    const controller = new AbortController();
    // Resolved wherever the runner aborts the signal (cheaper than an abort listener per rollout).
    let wake: (value: null) => void = () => {};
    const aborted = new Promise<null>((resolve) => {
      wake = resolve;
    });
    const running: Running = {
      abort: (reason) => {
        controller.abort(reason);
        wake(null);
      },
      settled: Promise.resolve(),
    };
    this.#running.add(running);
    running.settled = this.#execute(task, ref, controller.signal, running.abort, aborted).then((result) => {
      this.#running.delete(running);
      stats.inFlight--;
      stats.finished++;
      stats.byStatus[result.status]++;
      this.#ready.push(result);
      this.#signalReady();
      void this.#fill();
    });
  }

  #emit(event: RolloutEvent): void {
    this.emit(event.type, event as never);
    this.emit('event', event);
  }

  async #execute(
    task: T,
    ref: RolloutRef,
    signal: AbortSignal,
    abort: (reason: VimeError) => void,
    aborted: Promise<null>,
  ): Promise<RolloutResult> {
    const { rolloutId } = ref;
    const startedAt = now();
    this.#emit({ type: 'rollout:start', t: startedAt, ...ref });
    const phases = new PhaseRecorder((phase, durationMs) =>
      this.#emit({ type: 'rollout:phase', t: now(), rolloutId, phase, durationMs }),
    );
    const context: RolloutContext = {
      ...ref,
      signal,
      emit: (event) => this.#emit({ t: now(), rolloutId, ...event } as RolloutEvent),
      phase: (phase, fn) => phases.run(phase, fn),
    };
    const guard =
      Number.isFinite(this.#guardMs) && !this.#stopped
        ? setTimeout(
            () =>
              abort(abortError('timeout', `rollout exceeded its wall-clock guard of ${this.#guardMs} ms`)),
            this.#guardMs,
          )
        : undefined;
    if (this.#stopped && this.#stopReason) abort(this.#stopReason);
    let result: RolloutResult;
    try {
      // Called inside an async function, so a synchronous throw becomes a rejection too.
      const running = (async () => this.#rollout(task, context))();
      result = await this.#settle(running, ref, phases, startedAt, signal, aborted);
    } finally {
      clearTimeout(guard);
    }
    const finish: RolloutEvent = {
      type: 'rollout:finish',
      t: now(),
      rolloutId,
      status: result.status,
      durationMs: (result.endedAt ?? now()) - startedAt,
    };
    if ('reward' in result) finish.reward = result.reward;
    this.#emit(finish);
    return result;
  }

  /** What the rollout's promise comes to: its outcome, its own failure, or the abort that came first. */
  async #settle(
    running: Promise<RolloutOutcome>,
    base: RolloutRef,
    phases: PhaseRecorder,
    startedAt: number,
    signal: AbortSignal,
    aborted: Promise<null>,
  ): Promise<RolloutResult> {
    type Settled = { ok: true; value: unknown } | { ok: false; error: unknown };
    const settled: Promise<Settled> = running.then(
      (value) => ({ ok: true, value }),
      (error: unknown) => ({ ok: false, error }),
    );
    const first = await Promise.race([settled, aborted]);
    if (first?.ok) return completedResult(base, first.value, phases.timings, startedAt);
    if (first && !signal.aborted) {
      // A rollout may give up on its own by throwing a VimeError with code `aborted`.
      const status =
        VimeError.isInstance(first.error) && first.error.code === 'aborted' ? 'aborted' : 'failed';
      return unscoredResult(
        status,
        base,
        toRolloutError(first.error, phases.failed),
        phases.timings,
        startedAt,
      );
    }
    // Aborted: give the rollout `graceMs` to return, then report the abort (with its own error, if any).
    const phase = phases.failed ?? phases.current;
    const late =
      first ?? (await Promise.race([settled, new Promise<null>((r) => setTimeout(r, this.#graceMs, null))]));
    if (late === null) {
      this.stats.abandoned++;
      this.#options.logger?.warn('rollout ignored its aborted signal; abandoning it', {
        rolloutId: base.rolloutId,
        graceMs: this.#graceMs,
      });
    }
    const reason = signal.reason as VimeError;
    const error: RolloutError = { code: reason.code, message: reason.message, cause: reason };
    if (phase) error.phase = phase;
    if (late && !late.ok && late.error !== reason) error.cause = late.error;
    return unscoredResult('aborted', base, error, phases.timings, startedAt);
  }
}
