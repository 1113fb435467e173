export {
  auditTrainerTokens,
  checkStep,
  checkWeightVersions,
  type StepChecks,
  type TokenAudit,
} from './checks.js';
export { lastCheckpoint, parseCli, runPhase, usage } from './command.js';
export {
  bundledTokenizerDir,
  type PolicyServerOptions,
  type RunningPolicyServer,
  startPolicyServer,
} from './policy-server.js';
export { exampleDir, pythonEnv, pythonPath } from './python.js';
export { RFT_LABEL, startRftTrainer } from './rft.js';
export {
  type ClosedLoopOptions,
  type EvalResult,
  evaluate,
  paths,
  scoreRow,
  warmstart,
} from './run.js';
export { type PassAt1, type PassDelta, passAt1, passDelta } from './stats.js';
export { renderSummary, type Summary, writeSummary } from './summary.js';
export {
  type ProceduralSplitOptions,
  proceduralSplit,
  type SplitOptions,
  splitTasks,
  type TaskSplit,
} from './tasks.js';
export { type StepRecord, type TrainRunResult, train } from './train.js';
export {
  type RunningTrainer,
  startTrainer,
  TrainerError,
  type TrainerOptions,
  trainerHook,
  trainResultOf,
} from './trainer.js';
