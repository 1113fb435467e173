/**
 * Hosted sandboxes (E2B, Daytona, Modal) over each vendor's official TypeScript SDK, as `@vime/sandbox`
 * providers: the same `Sandbox` interface, the run's label as the vendor's metadata, the vendor's own
 * lifetime as the leak backstop, `reapOrphans` by run, and a vendor's 429 as a `HostedRateLimitError`.
 *
 * @module @vime/sandbox-hosted
 */
export { DAYTONA_RATE_WINDOW_MS, type DaytonaProviderOptions, daytonaProvider } from './daytona/provider.js';
export { E2B_RATE_WINDOW_MS, type E2bProviderOptions, e2bProvider } from './e2b/provider.js';
export { HostedRateLimitError, type HostedVendor } from './errors.js';
export { MODAL_RATE_WINDOW_MS, type ModalProviderOptions, modalProvider } from './modal/provider.js';
export {
  DEFAULT_HOSTED_LIFETIME_MS,
  type HostedProvider,
  type HostedProviderOptions,
  type HostedReapOptions,
  type HostedReapReport,
} from './provider.js';
