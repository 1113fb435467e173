export { type CliIo, EXIT, main } from './cli/main.js';
export * from './engines/health.js';
export * from './plan.js';
export * from './preflight.js';
export * from './presets/coding-agent.js';
export * from './presets/qwen3.js';
export * from './ray/client.js';
export * from './ray/job.js';
export * from './ray/types.js';
export * from './skypilot/patterns.js';
export * from './skypilot/render.js';
export * from './skypilot/validate.js';
export * from './slime/args.js';
export { KNOWN_FLAGS, REFUSED_FLAGS } from './slime/flags.js';
export {
  type BridgeRollout,
  type RolloutRequest,
  type RolloutServer,
  type RolloutServerOptions,
  startRolloutServer,
} from './slime/rollout-server.js';
