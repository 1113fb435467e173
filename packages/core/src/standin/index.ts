/**
 * A scripted stand-in engine on SGLang's wire (the `@vime/core/standin` entry): a real HTTP server with a
 * real tokenizer and a policy you script, labelled as a stand-in wherever its output appears. Not a model.
 *
 * @module @vime/core/standin
 */
export {
  type StandInEngine,
  type StandInEngineOptions,
  type StandInEvents,
  type StandInFault,
  type StandInPolicy,
  type StandInRequest,
  type StandInStats,
  startStandInEngine,
} from './engine.js';
export type { PauseMode } from './generation.js';
export { closedPort, type HealthScript, type HealthStandIn, startHealthStandIn } from './health.js';
export { type StandInRouting, standInExpert, standInRoutes } from './routing.js';
export type { ServiceModel } from './scheduler.js';
