/**
 * The capture proxy, its engine router and the trajectory manager.
 *
 * @module @vime/core/proxy
 */
export type { ChatRequest, Dialect, TurnReply } from './dialects.js';
export type { ProxyEvents, ProxyTurnEvent } from './events.js';
export {
  type CaptureProxy,
  type CaptureProxyOptions,
  type CaptureSession,
  captureFetch,
  type SessionOptions,
  startCaptureProxy,
} from './proxy.js';
export {
  type CheckTrigger,
  type EngineLease,
  EngineRouter,
  type EngineRouterOptions,
  type EngineStatus,
  type RouterEvents,
} from './router.js';
export { DEFAULT_PROXY_LIMITS, type ProxyLimits } from './server.js';
export {
  type EngineSpec,
  type ShardedCaptureProxy,
  type ShardedCaptureProxyOptions,
  type ShardedProxyEvents,
  startShardedCaptureProxy,
} from './shards/sharded.js';
export type { StitchInfo, StitchKind, StitchTotals } from './stitch.js';
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
export type { RowTopK } from './trajectory/topk.js';
export type { VersionRun, WeightUpdatePolicy } from './turn.js';
export { type WeightLogEntry, type WeightLogSource, WeightUpdateLog } from './weight-log.js';
