/**
 * Launching a disaggregated agentic-RL run from one typed config: SkyPilot Job Group and volume YAML, the
 * slime command, the engine health gate, the Ray Jobs REST client, preflight, the capacity planner and the
 * `vime` CLI.
 *
 * @module @vime/launch
 */
export { main } from './cli/main.js';
export { MODEL_ARCH_ARGS } from './models.js';
export {
  expandEnv,
  type LaunchConfig,
  LaunchConfigSchema,
  type LaunchPlan,
  type ResolvedLaunchConfig,
  resolvePlan,
} from './plan.js';
export {
  type PreflightProblem,
  type PreflightReport,
  preflight,
} from './preflight.js';
export {
  CODING_AGENT_CONFIGS,
  codingAgentPlan,
} from './presets/coding-agent.js';
export {
  RayJobFailedError,
  RayJobsClient,
  type RayJobsClientOptions,
  RayJobsError,
  type RayJobsEvents,
  type SubmitResult,
} from './ray/client.js';
export {
  FORWARDED_ENV,
  redactRequest,
  type SlimeJobOptions,
  slimeJobRequest,
} from './ray/job.js';
export {
  DeleteSchema,
  isTerminal,
  type JobDetails,
  JobDetailsSchema,
  JobListSchema,
  type JobStatus,
  JobStatusSchema,
  type JobSubmitRequest,
  JobSubmitRequestSchema,
  LogsSchema,
  type RayVersion,
  type RuntimeEnv,
  RuntimeEnvSchema,
  StopSchema,
  SubmitResponseSchema,
  TERMINAL_STATUSES,
  VersionSchema,
} from './ray/types.js';
export { checkRenderedJobGroup, type LaunchCheckReport, type LaunchProblem } from './skypilot/check.js';
export {
  ACCELERATOR_PATTERN,
  DURATION_PATTERN,
  ENV_KEY_PATTERN,
  INFRA_PATTERN,
  NAME_PATTERN,
  VOLUME_INFRA_PATTERN,
  VOLUME_SIZE_PATTERN,
} from './skypilot/patterns.js';
export {
  type EngineKind,
  EngineKindSchema,
  type EnginesConfig,
  EnginesConfigSchema,
  engineAddresses,
  engineJobNames,
  JOBGROUP_NAME_ENV,
  type JobGroupConfig,
  JobGroupConfigSchema,
  jobGroupDocuments,
  type ResolvedJobGroupConfig,
  type ResolvedTaskConfig,
  type ResolvedVolumeConfig,
  renderJobGroup,
  renderTask,
  renderVolume,
  resolveJobGroupConfig,
  type TaskConfig,
  TaskConfigSchema,
  type TrainerConfig,
  TrainerConfigSchema,
  taskDocument,
  type VolumeConfig,
  VolumeConfigSchema,
} from './skypilot/render.js';
export {
  formatProblem,
  type SkyPilotProblem,
  type SkyPilotValidation,
  type SkyPilotYamlKind,
  validateSkyPilotYaml,
} from './skypilot/validate.js';
