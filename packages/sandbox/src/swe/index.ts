// SWE-smith prep: dataset rows to tasks, setup, patch capture, hidden-test restore, log parsing, grading.

export * from './antihack.js';
export * from './dataset.js';
export * from './grading.js';
export * from './offline.js';
export * from './parsers/index.js';
export * from './profiles.js';
export * from './steps.js';
