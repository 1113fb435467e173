export {
  type GroupReport,
  type GroupStatistics,
  type GrpoOptions,
  groupStatistics,
  grpoAdvantages,
  isUniform,
  normalizeGroups,
} from './advantages.js';
export {
  type AuditDifference,
  auditTokens,
  type SampleAudit,
  type TokenAuditReport,
  type TurnRef,
} from './audit.js';
export { readAuditBatch, readTurnLog } from './audit-input.js';
export {
  type AutoReport,
  CHECK_ESTIMATORS,
  type CheckEstimator,
  type CheckInput,
  type CheckOptions,
  type CheckReport,
  type ConventionMatch,
  checkAgainstTrainer,
  type SampleCheck,
  type TokenMismatch,
  type Tolerance,
  TRAINER_ESTIMATORS,
  type TrainerEstimator,
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
  opoAdvantages,
  reinforceBaselineAdvantages,
  rlooAdvantages,
} from './estimators.js';
export { type Dtype, type FloatArray, torchOuterSumF32, torchSumF32 } from './f32.js';
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
  groupMoments,
  MOMENTS_KINDS,
  type Moments,
  type MomentsKind,
  type MomentsOptions,
} from './moments.js';
export {
  OPENRLHF_ESTIMATORS,
  type OpenrlhfEstimator,
  type OpenrlhfInput,
  type OpenrlhfOptions,
  type OpenrlhfResult,
  openrlhfAdvantages,
  openrlhfApproxKl,
} from './openrlhf.js';
export {
  BROADCAST_MODES,
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
export {
  type MultiRewardOptions,
  nanmean,
  nanstd,
  normalizeThenSum,
  type RewardScores,
  sumThenNormalize,
  TRL_LOSS_TYPES,
  type TrlLoss,
  type TrlLossInput,
  type TrlLossOptions,
  type TrlLossType,
  trlLoss,
} from './trl.js';
export {
  asTorchIndex,
  VERL_ESTIMATORS,
  type VerlAdvantageInput,
  type VerlAdvantageOptions,
  type VerlAdvantages,
  type VerlEstimator,
  type VerlGroupStats,
  verlAdvantages,
  verlGroupMeanStd,
  verlMaskedWhiten,
} from './verl.js';
export {
  ROLLOUT_RS_OPTIONS,
  type RolloutCorrectionConfig,
  type RolloutRsOption,
} from './verl-correction.js';
export {
  type KlPenalty,
  klPenalty,
  VERL_KL_TYPES,
  VERL_LOSS_MODES,
  type VerlActorConfig,
  type VerlGlobalBatchInfo,
  type VerlKlType,
  type VerlLossMode,
  type VerlPolicyLoss,
  type VerlPolicyLossInput,
  type VerlPolicyLossOptions,
  verlPolicyLoss,
} from './verl-loss.js';
