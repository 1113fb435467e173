export * from './advantages.js';
export * from './check.js';
export * from './dump.js';
export * from './estimators.js';
export { type Dtype, type FloatArray, torchOuterSumF32, torchSumF32 } from './f32.js';
export { type Grouping, type GroupingOptions, resolveGroups } from './groups.js';
export * from './loss.js';
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
export * from './passk.js';
export * from './presets.js';
export {
  isTensor,
  loadTorchFile,
  type TorchDtype,
  type TorchFile,
  type TorchTensor,
  tensorNumbers,
} from './pt/torch.js';
export * from './sessions.js';
export * from './slime.js';
export * from './tokens.js';
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
