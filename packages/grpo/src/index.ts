/**
 * GRPO-family advantage estimators with the conventions of the trainers people run (slime, verl, TRL,
 * OpenRLHF, Dr.GRPO), token broadcast, the loss math needed to check a trainer, the reader of slime's `.pt`
 * debug dumps, the golden check against them and the token audit of a batch. Pure computation.
 *
 * @module @vime/grpo
 */
export {
  auditTokens,
  type SampleAudit,
  type TokenAuditReport,
  type TurnRef,
} from './audit/audit.js';
export { readAuditBatch, readTurnLog } from './audit/audit-input.js';
export type { AuditDifference, AuditTurn } from './audit/difference.js';
export {
  auditHandoff,
  auditTurnOf,
  emptyHandoffAudit,
  type HandoffAudit,
  type HandoffAuditOptions,
  type HandoffAuditResult,
  TOKEN_AUDIT_FAILED,
} from './audit/handoff.js';
export type { WeightLogProblem, WeightLogView } from './audit/weight-log.js';
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
} from './check/check.js';
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
} from './check/dump.js';
export {
  type GroupReport,
  type GroupStatistics,
  type GrpoOptions,
  groupStatistics,
  grpoAdvantages,
  isUniform,
  normalizeGroups,
} from './estimators/advantages.js';
export {
  drGrpoAdvantages,
  type EstimatorOptions,
  gpgAdvantages,
  grpoPassKAdvantages,
  opoAdvantages,
  reinforceBaselineAdvantages,
  rlooAdvantages,
} from './estimators/estimators.js';
export { type Dtype, type FloatArray, torchOuterSumF32, torchSumF32 } from './estimators/f32.js';
export { type GaeResult, gae } from './estimators/gae.js';
export { type Grouping, type GroupingOptions, resolveGroups } from './estimators/groups.js';
export {
  groupMoments,
  MOMENTS_KINDS,
  type Moments,
  type MomentsKind,
  type MomentsOptions,
} from './estimators/moments.js';
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
} from './estimators/presets.js';
export {
  discountedReturns,
  maskedWhiten,
  reinforcePlusPlusReturns,
  type WhitenOptions,
} from './estimators/returns.js';
export {
  type CollapsedSessions,
  collapseSessions,
  type FanoutRows,
  fanoutRowsOf,
  sessionAdvantages,
} from './estimators/sessions.js';
export {
  isTensor,
  loadTorchFile,
  type TorchDtype,
  type TorchFile,
  type TorchTensor,
  tensorNumbers,
} from './pt/torch.js';
export {
  type BroadcastOptions,
  broadcastToTokens,
  flattenMasks,
  type LossMasks,
  splitTokens,
  tokenOffsets,
} from './tokens/tokens.js';
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
} from './trainers/loss.js';
export {
  OPENRLHF_ESTIMATORS,
  type OpenrlhfEstimator,
  type OpenrlhfInput,
  type OpenrlhfOptions,
  type OpenrlhfResult,
  openrlhfAdvantages,
  openrlhfApproxKl,
} from './trainers/openrlhf.js';
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
} from './trainers/slime.js';
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
} from './trainers/trl.js';
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
} from './trainers/verl.js';
export {
  ROLLOUT_RS_OPTIONS,
  type RolloutCorrectionConfig,
  type RolloutRsOption,
} from './trainers/verl-correction.js';
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
} from './trainers/verl-loss.js';
