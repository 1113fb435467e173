/**
 * Running rollouts concurrently with events, phases and a progress bar.
 *
 * @module @vime/core/runner
 */
export type {
  RolloutContext,
  RolloutEventInput,
  RolloutFunction,
  RolloutOutcome,
  RolloutRef,
  RunEvents,
  RunRolloutsOptions,
  RunStats,
  TaskLike,
} from './options.js';
export { type RolloutProgress, type RolloutProgressOptions, rolloutProgressBar } from './progress.js';
export { RolloutRun, runRollouts } from './run.js';
