export * from './advantages.js';
export * from './check.js';
export * from './dump.js';
export * from './estimators.js';
export { type Dtype, type FloatArray, torchSumF32 } from './f32.js';
export { type Grouping, type GroupingOptions, resolveGroups } from './groups.js';
export * from './loss.js';
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
