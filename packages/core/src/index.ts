export { decodeSamples, encodeSamples } from './codec.js';
export * from './errors.js';
export * from './rollout.js';
export * from './sample.js';
export * from './task.js';
export * from './validate.js';
