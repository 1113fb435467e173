/**
 * Sandbox errors that carry more than a code: a backend's "too many requests" with its retry delay. The
 * other sandbox failures are `SandboxError`s (from `@vime/core`) with a `code`.
 */
import { errorMarker, hasErrorMarker, SandboxError, type VimeErrorOptions } from '@vime/core';

const rateLimitedMarker = errorMarker('SandboxRateLimited');

/**
 * A backend refused a call for now (HTTP 429): `retryAfterMs` is its `Retry-After`, when it sent one. The
 * fleet waits that long before it sends that backend another create; nothing about the sandbox was wrong.
 */
export class SandboxRateLimited extends SandboxError {
  readonly [rateLimitedMarker] = true;
  readonly retryAfterMs: number | undefined;
  constructor(message: string, options: VimeErrorOptions & { retryAfterMs?: number | undefined } = {}) {
    super(message, { ...options, code: 'rate_limited' });
    this.retryAfterMs = options.retryAfterMs;
  }

  /** Whether `value` is a `SandboxRateLimited`, from any copy of this package. */
  static override isInstance(value: unknown): value is SandboxRateLimited {
    return hasErrorMarker(value, rateLimitedMarker);
  }
}

/** The code of the error a fleet sandbox's operation throws when its backend stopped answering. */
export const BACKEND_LOST = 'sandbox_backend_lost';
