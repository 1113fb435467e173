/**
 * The coding-agent RL step loop: prompt groups as durable units, sync or async hand-off, a trainer hook,
 * engines (yours or stand-ins), sinks and the run report; `runLoop` and the `vime-loop` CLI.
 *
 * @module @vime/loop
 */
export {
  checkAgents,
  harnessSocket,
  type LoopAgent,
  type LoopRolloutDeps,
  loopRollout,
  samplingOf,
  usesHarness,
} from './agents.js';
export { loopMain } from './cli/main.js';
export { summaryText } from './cli/summary.js';
export {
  type ConfigFile,
  fileLayout,
  RunConfigFileSchema,
  readConfigFile,
  runConfigJsonSchema,
} from './config/file.js';
export { configFromEnv, usage } from './config/flags.js';
export { KNOBS, type Knob, type KnobKind } from './config/knobs.js';
export {
  type ConfigSources,
  configSettings,
  RUN_CONFIG_FILE,
  readRunConfigSources,
  renderRunConfig,
} from './config/render.js';
export {
  checkConfig,
  parseConfig,
  type ResolvedConfig,
  type ResolveOptions,
  readStoredConfig,
  resolveConfig,
} from './config/resolve.js';
export { type Config, type ConfigField, ConfigSchema, SandboxLimitsSchema } from './config/schema.js';
export { bundledTokenizerDir, defaultRunFolder } from './defaults.js';
export { type RunEngines, startEngines, startRunProxy } from './engines.js';
export { createStepGroups, doneSiblings, type GroupPayload, groupKey } from './groups.js';
export { type LoopIO, type RunSummary, readConfigOf, runLoop, type TrainerHook } from './loop.js';
export { type ReportInput, sampleEngines, writeRunReport } from './report.js';
export type { RouterLogEntry } from './router-log.js';
export { openRunSinks } from './sinks.js';
export { candidateEdits, debuggerPolicy, issueFacts } from './standin/debugger.js';
export {
  codingAgentPolicy,
  defaultOdds,
  type PolicyOdds,
  type PolicyTask,
  patchedFiles,
} from './standin/policy.js';
export type { StepAudit, StepSummary, TrainResult } from './steps.js';
export { datasetPath, loadRunTasks, mixAgents, type RunTasks, readTasks } from './tasks.js';
export { auditRolloutRows, TURN_LOG_FILE, TurnLog } from './turn-log.js';
