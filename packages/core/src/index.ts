/**
 * The data model; the runtimes are on subpaths (`./engine`, `./proxy`, `./queue`,
 * `./runner`, `./standin`) and the shared helpers on `./utils`.
 *
 * @module @vime/core
 */
export { decodeSamples, encodeSamples } from './codec.js';
export {
  ConfigError,
  DriftError,
  describeValue,
  EngineError,
  type EngineErrorOptions,
  errorMarker,
  GradingError,
  hasErrorMarker,
  SandboxError,
  ValidationError,
  VimeError,
  type VimeErrorCode,
  type VimeErrorOptions,
} from './errors.js';
export {
  type CapturedTurn,
  CapturedTurnSchema,
  capturedTurnRecord,
  outputRouting,
} from './proxy/trajectory/turn-log.js';
export {
  isScored,
  now,
  type Phase,
  PhaseSchema,
  type PhaseTimings,
  PhaseTimingsSchema,
  type RolloutError,
  RolloutErrorSchema,
  type RolloutEvent,
  type RolloutEventType,
  type RolloutResult,
  RolloutResultSchema,
  type ScoredRollout,
  type Trajectory,
  TrajectorySchema,
  type Turn,
  TurnSchema,
  type UnscoredRollout,
} from './rollout.js';
export {
  assertSampleInvariants,
  type ChatMessage,
  ChatMessageSchema,
  createSample,
  fromSlimeDict,
  type PrefixCacheInfo,
  PrefixCacheInfoSchema,
  type Sample,
  type SampleInit,
  SampleSchema,
  type SampleStatus,
  SampleStatusSchema,
  SLIME_SAMPLE_FIELDS,
  type SlimeSampleDict,
  SlimeSampleDictSchema,
  type SpecInfo,
  SpecInfoSchema,
  toSlimeDict,
} from './sample.js';
export {
  type GraderSpec,
  GraderSpecSchema,
  type StagedFile,
  StagedFileSchema,
  type TaskSpec,
  type TaskSpecInput,
  TaskSpecSchema,
} from './task.js';
export { formatPath, parseWith } from './validate.js';
