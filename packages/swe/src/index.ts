/**
 * SWE-smith prep, from a dataset row to a reward: rows to tasks, the buggy start state in a sandbox, the
 * agent's patch, grading in a fresh sandbox with anti-hack checks, the log parsers, the offline task set, and
 * `sweRollout`, one SWE rollout for any agent.
 *
 * @module @vime/swe
 */
export {
  type HackFlag,
  type HackFlagKind,
  type HackPolicy,
  patchHacks,
  SUSPICIOUS,
  scanTranscript,
} from './antihack.js';
export {
  type CapturedPatch,
  type CaptureFailure,
  captureAgentPatch,
  MAX_PATCH_BYTES,
  patchFromDiff,
} from './capture.js';
export {
  emitPools,
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
export {
  DatasetError,
  type DatasetFormat,
  type DatasetProblem,
  loadDataset,
  loadJsonl,
  loadParquet,
  parseJsonlRows,
  problemLine,
} from './dataset-file.js';
export { type LoadOptions, type LoadResult, type RowIssue, rowIssueLine } from './dataset-rows.js';
export { ENVIRONMENTS_FILE, type SandboxKind, type SweEnvironment, SweEnvironments } from './environment.js';
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
} from './eval-report.js';
export {
  GradingSandboxLost,
  gradeInFreshSandbox,
  gradeSweTask,
  gradingPreflight,
  type SandboxSource,
} from './grade-in-sandbox.js';
export {
  APPLY_COMMANDS,
  DEFAULT_GRADE_TIMEOUT_MS,
  type Graded,
  type GradeOutcome,
  type GradeSweOptions,
  type InfraError,
  type InfraReason,
  type SweGradeResult,
} from './grade-types.js';
export type { CanaryVerdict, RunStatus } from './grade-verdict.js';
export { type BugKind, bugKindOf, offlineProfile } from './offline/assets.js';
export {
  buildOfflineTaskSet,
  type CombinedInstance,
  type OfflineTaskSet,
  type OfflineTaskSetOptions,
} from './offline/build.js';
export {
  OPERATOR_FAMILIES,
  type OperatorFamily,
  type ProceduralSplit,
} from './offline/procedural.js';
export {
  buildProceduralTaskSet,
  type ProceduralInstance,
  type ProceduralSetOptions,
  type ProceduralTaskSet,
} from './offline/procedural-build.js';
export { buildOfflineDockerImage, writeSweSmithParquet } from './offline/publish.js';
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
export { type SwePoolStats, SwePools, type SwePoolsOptions } from './pools.js';
export { ProbeError, sandboxHacks } from './probe.js';
export {
  CONDA_ENV,
  defineProfile,
  LANGUAGE_PROFILES,
  OFFLINE_TEST_COMMAND,
  resolveProfile,
  type SweProfile,
  testCommandFor,
} from './profiles.js';
export {
  type SweAgent,
  type SweAgentInput,
  type SweAgentRun,
  type SweRolloutOptions,
  sweRollout,
} from './rollout.js';
export {
  checkoutInstance,
  type InstanceCheckout,
  type SetupSweOptions,
  type SweSession,
  setupSweTask,
  taskTestFiles,
} from './setup.js';
export {
  type RowVerdict,
  type ValidateDatasetOptions,
  type ValidationReport,
  validateDataset,
} from './validate.js';
