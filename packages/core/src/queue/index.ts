export { QueueError } from './format.js';
export {
  type AppendResult,
  type QueueBatch,
  type QueueEvents,
  type QueueRecord,
  type ReadOptions,
  SampleQueue,
  type SampleQueueOptions,
} from './queue.js';
