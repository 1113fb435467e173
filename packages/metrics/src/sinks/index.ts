/**
 * `@vime/metrics/sinks`: where a run's metrics go: JSON lines, TensorBoard event files, Weights & Biases
 * offline runs (the files each writes), the sink contract and the records every sink receives.
 *
 * @module @vime/metrics/sinks
 */
export { JSONL_SCHEMA, type JsonlSinkOptions, jsonlSink } from './jsonl.js';
export {
  fanOut,
  finiteScalars,
  type MetricSink,
  type RolloutMetricRecord,
  type RunMetadata,
  rolloutRecordOf,
  type StepMetricRecord,
  stepRecordOf,
} from './sink.js';
export { eventProto, TFEVENTS_FILE_VERSION, tensorboardSink, tfRecord } from './tfevents.js';
export {
  type WandbOfflineOptions,
  wandbLogChunks,
  wandbOfflineSink,
  wandbRunId,
} from './wandb.js';
