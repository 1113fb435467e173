export * from './plan.js';
export * from './presets/qwen3.js';
export * from './skypilot/patterns.js';
export * from './skypilot/render.js';
export * from './skypilot/validate.js';
export * from './slime/args.js';
export { KNOWN_FLAGS, REFUSED_FLAGS } from './slime/flags.js';
