// @vime/slime: slime's side of Vime. Every export is named here; the README documents each group.
export {
  checkSlimeConfig,
  type ResolvedSlimeConfig,
  type SlimeCommand,
  type SlimeConfig,
  SlimeConfigSchema,
  type SlimeProblem,
  slimeArgs,
} from './args.js';
export { KNOWN_FLAGS, REFUSED_FLAGS } from './flags.js';
export {
  type BridgeRollout,
  type InfraFailure,
  infraFailureSample,
  type RolloutRequest,
  type RolloutServer,
  type RolloutServerOptions,
  startRolloutServer,
} from './rollout-server.js';
export { handOffAnswered, runSampleUnit, UnitDropped, type UnitRun, unitKey } from './sample-units.js';
export { serveMain } from './serve/main.js';
