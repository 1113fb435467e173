export { type RolloutProgress, type RolloutProgressOptions, rolloutProgressBar } from './progress.js';
export {
  type RolloutContext,
  type RolloutEventInput,
  type RolloutFunction,
  type RolloutOutcome,
  type RolloutRef,
  RolloutRun,
  type RunEvents,
  type RunRolloutsOptions,
  type RunStats,
  runRollouts,
  type TaskLike,
} from './run.js';
