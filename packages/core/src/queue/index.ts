export { QueueError } from './format.js';
export { type QueueEvents, SampleQueue, type SampleQueueOptions } from './queue.js';
export type { CommitOptions, QueueBatch, QueueRecord, ReadOptions } from './reader.js';
export type { RepairReport } from './repair.js';
export {
  type RolloutGroup,
  RolloutQueue,
  type RolloutSlot,
  type StepBatch,
} from './rollouts.js';
export type { AppendResult } from './writer.js';
