import { z } from 'zod';
import { SampleSchema } from './sample.js';
import { typedArray } from './validate.js';

/** Phases a rollout's wall-clock time is split into (milliseconds). */
export const PhaseSchema = z.enum(['claim', 'setup', 'agent', 'model', 'exec', 'eval']);
/** A phase of a rollout (claim, setup, agent, model, exec, eval). */
export type Phase = z.infer<typeof PhaseSchema>;
/** Schema of a rollout's time per phase. */
export const PhaseTimingsSchema = z.partialRecord(PhaseSchema, z.number().nonnegative());
/** Milliseconds a rollout spent in each phase. */
export type PhaseTimings = z.infer<typeof PhaseTimingsSchema>;

/** One model call of a trajectory, exactly as the engine saw and produced it. */
export const TurnSchema = z.object({
  index: z.number().int().nonnegative(),
  promptIds: typedArray('Int32Array'),
  outputIds: typedArray('Int32Array'),
  /** One log prob per output token. */
  logprobs: typedArray('Float32Array'),
  finishReason: z.enum(['stop', 'length', 'abort', 'tool_calls', 'error']),
  /** Policy (weight) version that produced the output (the last one, when an update interrupted the turn). */
  policyVersion: z.string().optional(),
  /**
   * The weight version of every output token, as runs over `outputIds` in order (`tokens` sum to its
   * length). Absent when the engine reports no version.
   */
  versionRuns: z.array(z.object({ version: z.string(), tokens: z.number().int().nonnegative() })).optional(),
  /**
   * Sampler replay data (top-p < 1): the kept ids of output token i are `ids[offsets[i]:offsets[i + 1]]`,
   * with their log probs where the engine reports them.
   */
  topP: z
    .object({
      ids: typedArray('Int32Array'),
      offsets: typedArray('Int32Array'),
      logprobs: typedArray('Float32Array').optional(),
    })
    .optional(),
  /**
   * Top-k log probs of every output token (score centering, `Sampling.topLogprobs`): token i's k ids and
   * log probs are `ids[i * k .. (i + 1) * k]`, most likely first.
   */
  topK: z
    .object({
      k: z.number().int().positive(),
      ids: typedArray('Int32Array'),
      logprobs: typedArray('Float32Array'),
    })
    .optional(),
  /**
   * MoE routing replay (R3): the experts picked for every forwarded position of the turn, prompt then
   * output (`promptIds.length + outputIds.length − 1` rows from `start` 0), `layers × topK` ids a row.
   */
  routes: z
    .object({
      layers: z.number().int().positive(),
      topK: z.number().int().positive(),
      start: z.number().int().nonnegative(),
      experts: typedArray('Int32Array'),
    })
    .optional(),
  /** The engines that produced the output, in order (more than one when the turn moved between engines). */
  engines: z.array(z.string()).optional(),
  /**
   * Speculative decoding over the turn, when every generation of it reported its verification passes
   * (SGLang's `meta_info.spec_verify_ct`): `acceptedTokens` = output tokens − `verifyPasses`, and the
   * acceptance length is output tokens / `verifyPasses`. Absent when the engine reported none.
   */
  spec: z
    .object({ verifyPasses: z.number().int().nonnegative(), acceptedTokens: z.number().int().nonnegative() })
    .optional(),
  /** Milliseconds (monotonic clock). */
  startedAt: z.number(),
  endedAt: z.number(),
  firstTokenAt: z.number().optional(),
  /** The rendered messages of this turn (for debugging and drift reports). */
  messages: z.array(z.unknown()).optional(),
});
/** One model call of a trajectory. */
export type Turn = z.infer<typeof TurnSchema>;

/** Every turn of one agent session, in order. */
export const TrajectorySchema = z.object({
  sessionId: z.string(),
  turns: z.array(TurnSchema),
  /** Drift counters: how many times packing needed a fork, a realign, or re-tokenized tokens. */
  drift: z
    .object({ forks: z.number().int(), realigns: z.number().int(), retokenizedTokens: z.number().int() })
    .default({ forks: 0, realigns: 0, retokenizedTokens: 0 }),
});
/** Every turn of one agent session, in order. */
export type Trajectory = z.output<typeof TrajectorySchema>;

/** Schema of a rollout's error. */
export const RolloutErrorSchema = z.object({
  code: z.string(),
  message: z.string(),
  /** The phase the rollout was in when it failed. */
  phase: PhaseSchema.optional(),
  cause: z.unknown().optional(),
});
/** Why a rollout failed or was aborted: a code, a message, the phase it was in and the cause. */
export type RolloutError = z.infer<typeof RolloutErrorSchema>;

const rolloutBase = {
  taskId: z.string(),
  /** Index of the prompt group (one per task per step). */
  groupIndex: z.number().int().nonnegative(),
  /** Index of this rollout within its group. */
  sampleIndex: z.number().int().nonnegative(),
  rolloutId: z.number().int().nonnegative(),
  sessionId: z.string().optional(),
  /** Training rows this rollout produced (several when the trajectory forked). */
  samples: z.array(SampleSchema).default([]),
  turns: z.number().int().nonnegative().default(0),
  timings: PhaseTimingsSchema.default({}),
  startedAt: z.number().optional(),
  endedAt: z.number().optional(),
  metadata: z.record(z.string(), z.unknown()).default({}),
};

/**
 * The outcome of one rollout. `completed | truncated` carry a reward; `failed | aborted` carry an error
 * and have no reward field at all, so an infrastructure failure can never be counted as reward 0.
 */
export const RolloutResultSchema = z.discriminatedUnion('status', [
  z.object({ ...rolloutBase, status: z.literal('completed'), reward: z.number() }),
  z.object({ ...rolloutBase, status: z.literal('truncated'), reward: z.number() }),
  z.object({ ...rolloutBase, status: z.literal('failed'), error: RolloutErrorSchema }),
  z.object({ ...rolloutBase, status: z.literal('aborted'), error: RolloutErrorSchema }),
]);
/**
 * The outcome of one rollout: `completed` or `truncated` with a reward, `failed` or `aborted` with an error
 * and no reward.
 */
export type RolloutResult = z.output<typeof RolloutResultSchema>;
/** A rollout that has a reward. */
export type ScoredRollout = Extract<RolloutResult, { status: 'completed' | 'truncated' }>;
/** A rollout that failed or was aborted: it has an error and no reward. */
export type UnscoredRollout = Extract<RolloutResult, { status: 'failed' | 'aborted' }>;

/** Whether a rollout has a reward. */
export function isScored(result: RolloutResult): result is ScoredRollout {
  return result.status === 'completed' || result.status === 'truncated';
}

/** Typed events with monotonic timestamps (`t`, milliseconds from `performance.now()`). */
export type RolloutEvent =
  | {
      type: 'rollout:start';
      t: number;
      rolloutId: number;
      taskId: string;
      groupIndex: number;
      sampleIndex: number;
    }
  | {
      type: 'rollout:turn';
      t: number;
      rolloutId: number;
      sessionId?: string | undefined;
      turn: number;
      promptTokens: number;
      outputTokens: number;
      durationMs: number;
    }
  | {
      type: 'rollout:exec';
      t: number;
      rolloutId: number;
      command: string;
      exitCode: number | null;
      durationMs: number;
    }
  | {
      type: 'rollout:eval';
      t: number;
      rolloutId: number;
      reward?: number | undefined;
      durationMs: number;
      detail?: Record<string, unknown> | undefined;
    }
  | { type: 'rollout:phase'; t: number; rolloutId: number; phase: Phase; durationMs: number }
  | {
      type: 'rollout:finish';
      t: number;
      rolloutId: number;
      status: RolloutResult['status'];
      reward?: number | undefined;
      durationMs: number;
    }
  | {
      type: 'trajectory:drift';
      t: number;
      sessionId: string;
      kind: 'fork' | 'realign' | 'retokenize';
      tokens: number;
      turn: number;
    };

/** The `type` of a rollout event. */
export type RolloutEventType = RolloutEvent['type'];

/** Monotonic milliseconds for event timestamps. */
export const now = (): number => performance.now();
