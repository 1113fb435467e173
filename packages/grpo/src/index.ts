export {
  type GroupMoments,
  type GroupReport,
  type GroupStatistics,
  type GrpoOptions,
  groupMoments,
  groupStatistics,
  grpoAdvantages,
  isUniform,
  normalizeGroups,
} from './advantages.js';
export {
  type CheckInput,
  type CheckOptions,
  type CheckReport,
  checkAgainstTrainer,
  type SampleCheck,
  type TokenMismatch,
  type Tolerance,
} from './check.js';
export {
  type RolloutDump,
  type RolloutDumpSample,
  RolloutDumpSampleSchema,
  RolloutDumpSchema,
  readRolloutDump,
  readTrainDump,
  rewardScalar,
  type TrainDump,
  type TrainDumpSample,
  TrainDumpSampleSchema,
  TrainDumpSchema,
} from './dump.js';
export {
  drGrpoAdvantages,
  type EstimatorOptions,
  gpgAdvantages,
  grpoPassKAdvantages,
  type MultiRewardOptions,
  normalizeThenSum,
  opoAdvantages,
  reinforceBaselineAdvantages,
  rlooAdvantages,
  sumThenNormalize,
} from './estimators.js';
export { type Dtype, type FloatArray, torchSumF32 } from './f32.js';
export { type Grouping, type GroupingOptions, resolveGroups } from './groups.js';
export {
  type AggregateOptions,
  type AggregationMode,
  aggregateLoss,
  approxKl,
  cispoLoss,
  gspoSequenceKl,
  type KlType,
  type PolicyLoss,
  type PolicyLossOptions,
  policyLoss,
  sumOfSampleMean,
} from './loss.js';
export {
  passAtK,
  slimePassRate,
} from './passk.js';
export {
  type BroadcastMode,
  type ConventionOptions,
  type Conventions,
  PRESET_CONVENTIONS,
  PRESETS,
  type Preset,
  resolveConventions,
  type Scale,
  type SingletonPolicy,
  type StdKind,
} from './presets.js';
export {
  isTensor,
  loadTorchFile,
  type TorchDtype,
  type TorchFile,
  type TorchTensor,
  tensorNumbers,
} from './pt/torch.js';
export {
  type CollapsedSessions,
  collapseSessions,
  type FanoutRows,
  fanoutRowsOf,
  sessionAdvantages,
} from './sessions.js';
export {
  flattenTokens,
  logProbsFromLogits,
  SLIME_ESTIMATORS,
  type SlimeAdvantageInput,
  type SlimeAdvantageResult,
  type SlimeEstimator,
  type SlimeLoss,
  type SlimeLossInput,
  slimeAdvantagesAndReturns,
  slimePolicyLoss,
  type TokenValues,
} from './slime.js';
export {
  type BroadcastOptions,
  broadcastToTokens,
  discountedReturns,
  flattenMasks,
  type GaeResult,
  gae,
  type LossMasks,
  maskedWhiten,
  reinforcePlusPlusReturns,
  splitTokens,
  tokenOffsets,
  type WhitenOptions,
} from './tokens.js';
