// A rollout's return value or failure, checked and turned into its `RolloutResult`.
import { describeValue, ValidationError, VimeError } from '../errors.js';
import {
  now,
  type Phase,
  PhaseSchema,
  type PhaseTimings,
  type RolloutError,
  type RolloutResult,
} from '../rollout.js';
import { assertSampleInvariants, type Sample } from '../sample.js';
import type { RolloutOutcome, RolloutRef } from './options.js';

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

/** The result of a rollout that returned: `completed`/`truncated` with its reward, or `failed` if the outcome is malformed. */
export function completedResult(
  base: RolloutRef,
  value: unknown,
  timings: PhaseTimings,
  startedAt: number,
): RolloutResult {
  const invalid = checkOutcome(value);
  if (invalid) {
    const error = new ValidationError(
      `outcome${invalid[0]}`,
      `the rollout function returned an invalid outcome: ${invalid[1]}; return { reward: number, samples?: Sample[] } or throw`,
    );
    return unscoredResult('failed', base, toRolloutError(error, undefined), timings, startedAt);
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
    return unscoredResult('failed', base, toRolloutError(error, undefined), timings, startedAt);
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

/** A `failed` or `aborted` result: an error and no reward. */
export function unscoredResult(
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

/** A thrown value as a `RolloutError`: VimeErrors keep their code; `phase` from the error's data wins. */
export function toRolloutError(error: unknown, phase: Phase | undefined): RolloutError {
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
