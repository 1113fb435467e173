/**
 * slime's side of Vime: the rollout server slime's generate function calls (`vime-rollout-server`), its
 * durable sample units, the slime command builder with its flag allow-list, and the bridge's Python modules.
 *
 * @module @vime/slime
 */
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
