/**
 * Durable queues: the segment log (`SampleQueue`) and prompt groups as work units (`GroupQueue`).
 *
 * @module @vime/core/queue
 */
export { QueueError } from './format.js';
export type { DropReason, Failure, SampleVersions, VersionSpan } from './group-events.js';
export type {
  AttemptRef,
  Continuation,
  FailOutcome,
  GcReport,
  GroupLease,
  GroupQueueEvents,
  GroupQueueOptions,
  GroupQueueStats,
  HandedGroup,
  HandedSibling,
  LeaseOptions,
  PartialInput,
  Receipt,
  SiblingAttempt,
  SiblingInput,
  SiblingResult,
  TrainingBatch,
} from './group-types.js';
export { GroupQueue } from './groups.js';
export { type QueueEvents, SampleQueue, type SampleQueueOptions } from './queue.js';
export type { CommitOptions, QueueBatch, QueueRecord, ReadOptions } from './reader.js';
export type { RepairReport } from './repair.js';
export {
  type GradeEntry,
  type GroupsOutcome,
  type GroupWork,
  type RunGroupsOptions,
  runGroups,
  scoredOf,
} from './worker.js';
export type { AppendResult } from './writer.js';
