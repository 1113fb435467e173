// What a rollout function gets and returns, and the options of a run.
import { ConfigError, describeValue } from '../errors.js';
import type { Phase, PhaseTimings, RolloutEvent, RolloutEventType, RolloutResult } from '../rollout.js';
import type { Sample } from '../sample.js';

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
> & { t?: number | undefined };

/** What a rollout function gets besides its task: its ids, signal, events and phase timing. */
export interface RolloutContext extends RolloutRef {
  /** Aborted when the guard fires, the run's signal aborts, or the consumer stops reading. Pass it on. */
  signal: AbortSignal;
  /** Emit a rollout event. */
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
  status?: 'completed' | 'truncated' | undefined;
  /** Training rows; the runner stamps `group_index`, `index`, `rollout_id` (and `status`/`reward` where unset). */
  samples?: Sample[] | undefined;
  sessionId?: string | undefined;
  turns?: number | undefined;
  /** Phase durations in ms; merged over the ones recorded with `ctx.phase`. */
  timings?: PhaseTimings | undefined;
  metadata?: Record<string, unknown> | undefined;
}

/** One rollout of one task: the function `runRollouts` calls. */
export type RolloutFunction<T> = (
  task: T,
  context: RolloutContext,
) => RolloutOutcome | Promise<RolloutOutcome>;

/** Options of `runRollouts`. */
export interface RunRolloutsOptions {
  /** Rollouts per task (the GRPO group size). Default 1. */
  samplesPerPrompt?: number | undefined;
  /** Most rollouts in flight at once. No other limit applies. */
  concurrency: number;
  /** Wall-clock budget of one rollout in ms (`Infinity` for none). */
  guardMs: number;
  /**
   * After a rollout's signal aborts, how long (ms) the runner waits for the function to return before it
   * yields the aborted result anyway and frees the slot. Default 5000.
   */
  graceMs?: number | undefined;
  /** Aborting stops admitting rollouts and aborts those in flight; the iterator then ends normally. */
  signal?: AbortSignal | undefined;
  /** Group index of the first task (continue numbering across steps). Default 0. */
  firstGroupIndex?: number | undefined;
  /** Rollouts to leave out, e.g. those already in a `SampleQueue` when resuming. */
  skip?: ((ref: RolloutRef) => boolean) | undefined;
  logger?:
    | {
        /** Log a warning. */
        warn(message: string, data?: Record<string, unknown>): void;
      }
    | undefined;
}

/** Counts of a run so far. */
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

/** What `runRollouts` needs of a task: an id. */
export interface TaskLike {
  id: string;
}

const positiveInt = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 1;

export function checkOptions(options: RunRolloutsOptions): void {
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
