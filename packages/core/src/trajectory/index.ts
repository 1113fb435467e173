export {
  type DriftReport,
  type FinishOptions,
  type RewardSplit,
  type TrajectoryEvents,
  TrajectoryManager,
  type TrajectoryManagerOptions,
} from './manager.js';
export { type DriftCounts, type PackedRow, type PackOptions, type PackResult, packTurns } from './pack.js';
