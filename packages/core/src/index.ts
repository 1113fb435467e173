// @vime/core: the public surface. Every export is named here; the README documents each group.
export { decodeSamples, encodeSamples } from './codec.js';
export {
  type NucleusCheck,
  type NucleusReplay,
  nucleusProblem,
  readSglangNucleus,
  wantsNucleus,
} from './engine/nucleus.js';
export { sglangEngine } from './engine/sglang.js';
export type {
  Engine,
  EngineFinishReason,
  EngineOptions,
  GenerateRequest,
  GenerateResult,
  GenerateStreamOptions,
  ModelInfo,
  PauseMode,
  Sampling,
  TokenChunk,
  WeightControl,
  WeightUpdateRequest,
} from './engine/types.js';
export { type VllmEngineOptions, vllmEngine } from './engine/vllm.js';
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
export type { ChatRequest, Dialect, TurnReply } from './proxy/dialects.js';
export type { ProxyEvents, ProxyTurnEvent } from './proxy/events.js';
export {
  type CaptureProxy,
  type CaptureProxyOptions,
  type CaptureSession,
  captureFetch,
  type SessionOptions,
  startCaptureProxy,
} from './proxy/proxy.js';
export {
  type CheckTrigger,
  type EngineLease,
  EngineRouter,
  type EngineRouterOptions,
  type EngineStatus,
  type RouterEvents,
} from './proxy/router.js';
export { DEFAULT_PROXY_LIMITS, type ProxyLimits } from './proxy/server.js';
export {
  type EngineSpec,
  type ShardedCaptureProxy,
  type ShardedCaptureProxyOptions,
  type ShardedProxyEvents,
  startShardedCaptureProxy,
} from './proxy/shards/sharded.js';
export type { StitchInfo, StitchKind, StitchTotals } from './proxy/stitch.js';
export type { VersionRun, WeightUpdatePolicy } from './proxy/turn.js';
export { QueueError } from './queue/format.js';
export type { DropReason, Failure, SampleVersions, VersionSpan } from './queue/group-events.js';
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
} from './queue/group-types.js';
export { GroupQueue } from './queue/groups.js';
export { type QueueEvents, SampleQueue, type SampleQueueOptions } from './queue/queue.js';
export type { CommitOptions, QueueBatch, QueueRecord, ReadOptions } from './queue/reader.js';
export type { RepairReport } from './queue/repair.js';
export { type RolloutGroup, RolloutQueue, type RolloutSlot, type StepBatch } from './queue/rollouts.js';
export type { AppendResult } from './queue/writer.js';
export { seededRandom } from './random.js';
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
} from './runner/options.js';
export { type RolloutProgress, type RolloutProgressOptions, rolloutProgressBar } from './runner/progress.js';
export { RolloutRun, runRollouts } from './runner/run.js';
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
export {
  IncrementalDecoder,
  IncrementalParser,
  type IncrementalParserOptions,
  type StreamDelta,
} from './tokenizer/incremental.js';
export {
  hermesToolParser,
  type ParsedResponse,
  type ParsedToolCall,
  parseResponse,
  type ReasoningParser,
  type ToolCallParser,
  thinkReasoningParser,
} from './tokenizer/parsers.js';
export type { ChatRenderer } from './tokenizer/renderers.js';
export type {
  RenderOptions,
  TemplateMessage,
  TemplateToolCall,
  ToolDefinition,
} from './tokenizer/template.js';
export {
  ChatTokenizer,
  type EncodeChatOptions,
  INLINE_ENCODE_CHARS,
  type LoadTokenizerOptions,
  loadTokenizer,
  type SpecialTokenText,
} from './tokenizer/tokenizer.js';
export {
  type DriftReport,
  type FinishOptions,
  type RewardSplit,
  type TrajectoryEvents,
  TrajectoryManager,
  type TrajectoryManagerOptions,
} from './trajectory/manager.js';
export {
  type DriftCounts,
  type PackedRow,
  type PackOptions,
  type PackResult,
  packTurns,
} from './trajectory/pack.js';
export type { RowReplay } from './trajectory/replay.js';
export { type CapturedTurn, CapturedTurnSchema, capturedTurnRecord } from './trajectory/turn-log.js';
export { parseDuration } from './util/duration.js';
export {
  type CallerPathOptions,
  ensureDirectory,
  pathError,
  readTextFile,
  writeFileAtomic,
} from './util/files.js';
export {
  describeCause,
  HttpClient,
  type HttpClientOptions,
  type HttpMethod,
  type HttpRequest,
  type HttpResponse,
  JsonText,
} from './util/http.js';
export type { Logger } from './util/logger.js';
export { type BackoffOptions, isRetryableError, type RetryOptions, retry } from './util/retry.js';
export { type ShellQuoteOptions, shellJoin, shellQuote } from './util/shell.js';
export { deadlineSignal } from './util/signals.js';
export { sleep } from './util/sleep.js';
export { formatPath, parseWith } from './validate.js';
