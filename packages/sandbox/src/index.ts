export { type BubblewrapProviderOptions, bubblewrapProvider } from './bubblewrap.js';
export * from './lifecycle.js';
export { type LocalProviderOptions, localProvider } from './local.js';
export { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES, decodeUtf8 } from './output.js';
export * from './swe/index.js';
export type * from './types.js';
