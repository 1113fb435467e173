// @vime/swe: the public surface. Every export is named here; the README documents each group.

export { type HackFlag, type HackFlagKind, type HackPolicy, scanTranscript } from './antihack.js';
// Datasets: SWE-smith rows (JSONL, parquet) to tasks, per-repo pools.
export {
  emitPools,
  type LoadOptions,
  type LoadResult,
  loadJsonl,
  loadParquet,
  parseJsonlRows,
  type RowIssue,
  type RowToTaskOptions,
  repoPoolName,
  reversePatch,
  rowToTask,
  type SweSmithRow,
  SweSmithRowSchema,
  selectRows,
  swesmithNames,
  taskPrompt,
} from './dataset.js';
// Grading and log parsing, exactly as SWE-bench and SWE-smith do it.
export {
  type EvalType,
  type GradeInput,
  type GradeOptions,
  type GradeReport,
  type GradingSemantics,
  getLogsEval,
  gradeReport,
  type Resolution,
  readTestOutput,
  type TestBucket,
  type TestsStatus,
  validReport,
} from './grading.js';
// The offline task set (a small Python library in SWE-smith's format).
export {
  type BugKind,
  bugKindOf,
  buildOfflineTaskSet,
  type CombinedInstance,
  type OfflineTaskSet,
  type OfflineTaskSetOptions,
  offlineProfile,
  offlineTasks,
} from './offline.js';
export {
  type LogParser,
  type ParseOptions,
  type ParserId,
  parseTestLog,
  type RunnerParser,
  type StatusMap,
  type SwebenchParser,
  type SwebenchRef,
  type TestStatus,
} from './parsers/index.js';
export {
  defineProfile,
  LANGUAGE_PROFILES,
  resolveProfile,
  type SweProfile,
  testCommandFor,
} from './profiles.js';
// One task in a sandbox: the buggy state, the agent's patch, the grade.
export {
  type CapturedPatch,
  captureAgentPatch,
  type Graded,
  type GradeSweOptions,
  gradeSweTask,
  type InfraError,
  type InfraReason,
  type SetupSweOptions,
  type SweGradeResult,
  type SweSession,
  setupSweTask,
} from './steps.js';
