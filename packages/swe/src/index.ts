// SWE-smith prep: dataset rows to tasks, setup, patch capture, hidden-test restore, log parsing, grading.
export * from './antihack.js';
export * from './dataset.js';
export { evalScript } from './eval-script.js';
export * from './grading.js';
export * from './layout.js';
export {
  type BugKind,
  bugKindOf,
  buildOfflineTaskSet,
  type CombinedInstance,
  OFFLINE_BUNDLE_NAME,
  OFFLINE_SETUP_PREFIX,
  OFFLINE_TEST_COMMAND,
  type OfflineTaskSet,
  type OfflineTaskSetOptions,
  offlineAssetsDir,
  offlineProfile,
  offlineTasks,
} from './offline.js';
export * from './parsers/index.js';
export * from './profiles.js';
export * from './steps.js';
