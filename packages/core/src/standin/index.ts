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
export type { ServiceModel } from './scheduler.js';
