/**
 * `runRollouts`: run `samplesPerPrompt` rollouts per task under an explicit concurrency cap and a
 * per-rollout wall-clock guard, and yield every outcome as a `RolloutResult` in completion order.
 * A rollout that throws or overruns its guard becomes a `failed` / `aborted` result naming its cause
 * and phase; nothing a rollout does escapes the iterator.
 */
import { EventEmitter } from 'eventemitter3';
import { ConfigError, describeValue, ValidationError, VimeError } from '../errors.js';
import {
  now,
  type Phase,
  PhaseSchema,
  type PhaseTimings,
  type RolloutError,
  type RolloutEvent,
  type RolloutEventType,
  type RolloutResult,
} from '../rollout.js';
import { assertSampleInvariants, type Sample } from '../sample.js';

/** Identity of one rollout. `rolloutId = groupIndex * samplesPerPrompt + sampleIndex`, stable across runs. */
export interface RolloutRef {
  groupIndex: number;
  sampleIndex: number;
  rolloutId: number;
  taskId: string;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** What a rollout may emit: any `RolloutEvent` except start/finish (the runner emits those); `t` and `rolloutId` are filled in. */
export type RolloutEventInput = DistributiveOmit<
  Exclude<RolloutEvent, { type: 'rollout:start' | 'rollout:finish' }>,
  't' | 'rolloutId'
> & { t?: number };

export interface RolloutContext extends RolloutRef {
  /** Aborted when the guard fires, the run's signal aborts, or the consumer stops reading. Pass it on. */
  signal: AbortSignal;
  emit(event: RolloutEventInput): void;
  /**
   * Run `fn` as `phase`: its duration is added to the result's `timings`, a `rollout:phase` event is
   * emitted, and a failure or guard timeout inside it is reported with this phase.
   */
  phase<R>(phase: Phase, fn: () => R | Promise<R>): Promise<R>;
}

/** What a rollout function returns when it produced a reward. */
export interface RolloutOutcome {
  reward: number;
  /** `truncated` when a budget cut the trajectory short but it was still graded. Default `completed`. */
  status?: 'completed' | 'truncated';
  /** Training rows; the runner stamps `group_index`, `index`, `rollout_id` (and `status`/`reward` where unset). */
  samples?: Sample[];
  sessionId?: string;
  turns?: number;
  /** Phase durations in ms; merged over the ones recorded with `ctx.phase`. */
  timings?: PhaseTimings;
  metadata?: Record<string, unknown>;
}

export type RolloutFunction<T> = (
  task: T,
  context: RolloutContext,
) => RolloutOutcome | Promise<RolloutOutcome>;

export interface RunRolloutsOptions {
  /** Rollouts per task (the GRPO group size). Default 1. */
  samplesPerPrompt?: number;
  /** Most rollouts in flight at once. No other limit applies. */
  concurrency: number;
  /** Wall-clock budget of one rollout in ms (`Infinity` for none). */
  guardMs: number;
  /**
   * After a rollout's signal aborts, how long (ms) the runner waits for the function to return before it
   * yields the aborted result anyway and frees the slot. Default 5000.
   */
  graceMs?: number;
  /** Aborting stops admitting rollouts and aborts those in flight; the iterator then ends normally. */
  signal?: AbortSignal;
  /** Group index of the first task (continue numbering across steps). Default 0. */
  firstGroupIndex?: number;
  /** Rollouts to leave out, e.g. those already in a `SampleQueue` when resuming. */
  skip?: (ref: RolloutRef) => boolean;
  logger?: { warn(message: string, data?: Record<string, unknown>): void };
}

export interface RunStats {
  /** Rollouts started so far. */
  started: number;
  inFlight: number;
  peakInFlight: number;
  /** Results produced (read or waiting to be read). */
  finished: number;
  skipped: number;
  /** Rollouts that ignored their aborted signal past `graceMs`; they may still be running. */
  abandoned: number;
  byStatus: Record<RolloutResult['status'], number>;
}

/** Event map of a run: one event per `RolloutEvent` type, `event` for all of them, `end` once. */
export type RunEvents = { [K in RolloutEventType]: [Extract<RolloutEvent, { type: K }>] } & {
  event: [RolloutEvent];
  end: [RunStats];
};

export interface TaskLike {
  id: string;
}

const positiveInt = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 1;

function checkOptions(options: RunRolloutsOptions): void {
  if (options === null || typeof options !== 'object') {
    throw new ConfigError(
      `runRollouts options: expected an object with concurrency and guardMs, found ${describeValue(options)}`,
    );
  }
  const { samplesPerPrompt = 1, concurrency, guardMs, graceMs = 5000, firstGroupIndex = 0 } = options;
  if (!positiveInt(samplesPerPrompt)) {
    throw new ConfigError(
      `runRollouts options.samplesPerPrompt: expected an integer ≥ 1, found ${describeValue(samplesPerPrompt)}`,
    );
  }
  if (!positiveInt(concurrency)) {
    throw new ConfigError(
      `runRollouts options.concurrency: expected an integer ≥ 1 (the most rollouts in flight), found ${describeValue(concurrency)}`,
    );
  }
  if (typeof guardMs !== 'number' || !(guardMs > 0)) {
    throw new ConfigError(
      `runRollouts options.guardMs: expected a wall-clock budget in ms > 0 (Infinity for none), found ${describeValue(guardMs)}`,
    );
  }
  if (typeof graceMs !== 'number' || !(graceMs >= 0) || !Number.isFinite(graceMs)) {
    throw new ConfigError(
      `runRollouts options.graceMs: expected a finite number of ms ≥ 0, found ${describeValue(graceMs)}`,
    );
  }
  if (!Number.isInteger(firstGroupIndex) || firstGroupIndex < 0) {
    throw new ConfigError(
      `runRollouts options.firstGroupIndex: expected an integer ≥ 0, found ${describeValue(firstGroupIndex)}`,
    );
  }
}

const STATUSES = new Set(['completed', 'truncated']);

/** Where a returned outcome is malformed (`[path, message]`), or undefined. Hand-written: it runs per rollout. */
function checkOutcome(value: unknown): [string, string] | undefined {
  if (value === null || typeof value !== 'object')
    return ['', `expected an object, found ${describeValue(value)}`];
  const o = value as Record<string, unknown>;
  if (typeof o.reward !== 'number' || !Number.isFinite(o.reward)) {
    return ['.reward', `expected a finite number, found ${describeValue(o.reward)}`];
  }
  if (o.status !== undefined && !STATUSES.has(o.status as string)) {
    return ['.status', `expected 'completed' or 'truncated', found ${describeValue(o.status)}`];
  }
  if (o.samples !== undefined) {
    if (!Array.isArray(o.samples))
      return ['.samples', `expected an array of Sample, found ${describeValue(o.samples)}`];
    for (const [i, sample] of o.samples.entries()) {
      if (
        sample === null ||
        typeof sample !== 'object' ||
        !((sample as Sample).tokens instanceof Int32Array)
      ) {
        return [
          `.samples[${i}]`,
          `expected a Sample (build it with createSample), found ${describeValue(sample)}`,
        ];
      }
    }
  }
  const turns = o.turns;
  if (turns !== undefined && !(typeof turns === 'number' && Number.isInteger(turns) && turns >= 0)) {
    return ['.turns', `expected an integer ≥ 0, found ${describeValue(turns)}`];
  }
  for (const key of ['timings', 'metadata'] as const) {
    const v = o[key];
    if (v !== undefined && (v === null || typeof v !== 'object' || Array.isArray(v))) {
      return [`.${key}`, `expected an object, found ${describeValue(v)}`];
    }
  }
  if (o.sessionId !== undefined && typeof o.sessionId !== 'string') {
    return ['.sessionId', `expected a string, found ${describeValue(o.sessionId)}`];
  }
  return undefined;
}

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
    const timings: PhaseTimings = {};
    const phases: Phase[] = [];
    let failedPhase: Phase | undefined;
    const context: RolloutContext = {
      ...ref,
      signal,
      emit: (event) => this.#emit({ t: now(), rolloutId, ...event } as RolloutEvent),
      phase: async (phase, fn) => {
        phases.push(phase);
        const t0 = now();
        try {
          return await fn();
        } catch (error) {
          failedPhase ??= phase;
          throw error;
        } finally {
          const durationMs = now() - t0;
          timings[phase] = (timings[phase] ?? 0) + durationMs;
          phases.pop();
          this.#emit({ type: 'rollout:phase', t: now(), rolloutId, phase, durationMs });
        }
      },
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

    type Settled = { ok: true; value: unknown } | { ok: false; error: unknown };
    const settled: Promise<Settled> = (async () => this.#rollout(task, context))().then(
      (value) => ({ ok: true, value }),
      (error: unknown) => ({ ok: false, error }),
    );
    const base = { taskId: ref.taskId, groupIndex: ref.groupIndex, sampleIndex: ref.sampleIndex, rolloutId };
    let result: RolloutResult;
    try {
      const first = await Promise.race([settled, aborted]);
      if (first?.ok) {
        result = this.#completed(base, first.value, timings, startedAt);
      } else if (first && !signal.aborted) {
        // A rollout may give up on its own by throwing a VimeError with code `aborted`.
        const status =
          VimeError.isInstance(first.error) && first.error.code === 'aborted' ? 'aborted' : 'failed';
        result = this.#unscored(status, base, toRolloutError(first.error, failedPhase), timings, startedAt);
      } else {
        const phase = failedPhase ?? phases.at(-1);
        const late =
          first ??
          (await Promise.race([settled, new Promise<null>((r) => setTimeout(r, this.#graceMs, null))]));
        if (late === null) {
          this.stats.abandoned++;
          this.#options.logger?.warn('rollout ignored its aborted signal; abandoning it', {
            rolloutId,
            graceMs: this.#graceMs,
          });
        }
        const reason = signal.reason as VimeError;
        const error: RolloutError = { code: reason.code, message: reason.message, cause: reason };
        if (phase) error.phase = phase;
        if (late && !late.ok && late.error !== reason) error.cause = late.error;
        result = this.#unscored('aborted', base, error, timings, startedAt);
      }
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

  #completed(base: RolloutRef, value: unknown, timings: PhaseTimings, startedAt: number): RolloutResult {
    const invalid = checkOutcome(value);
    if (invalid) {
      const error = new ValidationError(
        `outcome${invalid[0]}`,
        `the rollout function returned an invalid outcome: ${invalid[1]}; return { reward: number, samples?: Sample[] } or throw`,
      );
      return this.#unscored('failed', base, toRolloutError(error, undefined), timings, startedAt);
    }
    const outcome = value as RolloutOutcome;
    const status = outcome.status ?? 'completed';
    const samples: Sample[] = [];
    try {
      for (const [i, sample] of (outcome.samples ?? []).entries()) {
        assertSampleInvariants(sample, `outcome.samples[${i}]`);
        samples.push({
          ...sample,
          group_index: base.groupIndex,
          index: base.rolloutId,
          rollout_id: base.rolloutId,
          status: sample.status === 'pending' ? status : sample.status,
          reward: sample.reward ?? outcome.reward,
          session_id: sample.session_id ?? outcome.sessionId ?? null,
        });
      }
    } catch (error) {
      return this.#unscored('failed', base, toRolloutError(error, undefined), timings, startedAt);
    }
    const result: RolloutResult = {
      ...base,
      status,
      reward: outcome.reward,
      samples,
      turns: outcome.turns ?? 0,
      timings: { ...timings, ...outcome.timings },
      startedAt,
      endedAt: now(),
      metadata: outcome.metadata ?? {},
    };
    if (outcome.sessionId !== undefined) result.sessionId = outcome.sessionId;
    return result;
  }

  #unscored(
    status: 'failed' | 'aborted',
    base: RolloutRef,
    error: RolloutError,
    timings: PhaseTimings,
    startedAt: number,
  ): RolloutResult {
    return {
      ...base,
      status,
      error,
      samples: [],
      turns: 0,
      timings,
      startedAt,
      endedAt: now(),
      metadata: {},
    };
  }
}

/** A thrown value as a `RolloutError`: VimeErrors keep their code; `phase` from the error's data wins. */
function toRolloutError(error: unknown, phase: Phase | undefined): RolloutError {
  const out: RolloutError = VimeError.isInstance(error)
    ? { code: error.code, message: error.message, cause: error }
    : error instanceof Error
      ? { code: 'rollout_error', message: `${error.name}: ${error.message}`, cause: error }
      : { code: 'rollout_error', message: `the rollout threw ${describeValue(error)}`, cause: error };
  const dataPhase = PhaseSchema.safeParse(VimeError.isInstance(error) ? error.data?.phase : undefined);
  const named = dataPhase.success ? dataPhase.data : phase;
  if (named) out.phase = named;
  return out;
}
