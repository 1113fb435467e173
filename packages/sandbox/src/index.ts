export type * from './types.js';
export * from './swe/index.js';
