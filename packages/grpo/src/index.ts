export * from './advantages.js';
export { type Dtype, type FloatArray, torchSumF32 } from './f32.js';
export { type Grouping, type GroupingOptions, resolveGroups } from './groups.js';
export * from './presets.js';
