export { main } from './cli/main.js';
export {
  type EngineState,
  type EngineStatus,
  type EngineTarget,
  HEALTH_PATHS,
  type WaitForEnginesOptions,
  waitForEngines,
} from './engines/health.js';
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
export {
  type CapacityAnswer,
  type CapacityCurve,
  type CapacityPoint,
  capacityCurve,
  capacityFor,
  modelFor,
  type RunPrediction,
  type SimulateRunOptions,
  simulateRun,
} from './simulate/capacity.js';
export {
  type FitTarget,
  type FittedRun,
  fitRun,
  type ModelDefaults,
  observationFrom,
  REFERENCE_DEFAULTS,
  type RunObservation,
  RunObservationSchema,
  WorkloadSchema,
} from './simulate/fit.js';
export {
  type EngineModel,
  type RolloutPhaseResult,
  type StepModel,
  type StepPrediction,
  simulateRolloutPhase,
  simulateStep,
} from './simulate/model.js';
export { REFERENCE_BENCHMARK, type ReferenceRunKey } from './simulate/reference.js';
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
export {
  checkSlimeConfig,
  type ResolvedSlimeConfig,
  type SlimeCommand,
  type SlimeConfig,
  SlimeConfigSchema,
  type SlimeProblem,
  slimeArgs,
} from './slime/args.js';
export { KNOWN_FLAGS, REFUSED_FLAGS } from './slime/flags.js';
export {
  type BridgeRollout,
  type InfraFailure,
  infraFailureSample,
  type RolloutRequest,
  type RolloutServer,
  type RolloutServerOptions,
  startRolloutServer,
} from './slime/rollout-server.js';
