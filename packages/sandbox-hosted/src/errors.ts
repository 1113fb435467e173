/**
 * A vendor's rate limit, surfaced as one typed error whatever the SDK threw, so a fleet's limiter can wait
 * `retryAfterMs` before the next call to that vendor instead of retrying blind.
 */
import { errorMarker, hasErrorMarker, SandboxError } from '@vime/core';

/** A hosted sandbox vendor. */
export type HostedVendor = 'e2b' | 'daytona' | 'modal';

const rateLimitMarker = errorMarker('HostedRateLimitError');

/** The vendor answered 429 (or gRPC RESOURCE_EXHAUSTED): wait `retryAfterMs`, then try again. */
export class HostedRateLimitError extends SandboxError {
  readonly [rateLimitMarker] = true;
  readonly vendor: HostedVendor;
  /** How long to wait before the next call: the vendor's Retry-After where the SDK passes it on, else its documented window. */
  readonly retryAfterMs: number;
  /** Where the wait came from: the vendor's answer, or the documented rate-limit window. */
  readonly retryAfterSource: 'vendor' | 'documented-window';
  /** The operation that was refused (`create`, `exec`, `kill`, `list`, …). */
  readonly operation: string;

  constructor(
    vendor: HostedVendor,
    operation: string,
    retryAfterMs: number,
    retryAfterSource: 'vendor' | 'documented-window',
    cause: unknown,
  ) {
    super(
      `${vendor} rate-limited ${operation} (429); retry after ${retryAfterMs} ms (${retryAfterSource === 'vendor' ? "the vendor's Retry-After" : "the vendor's documented window"})`,
      { code: 'rate_limited', cause, data: { vendor, operation, retryAfterMs, retryAfterSource } },
    );
    this.vendor = vendor;
    this.retryAfterMs = retryAfterMs;
    this.retryAfterSource = retryAfterSource;
    this.operation = operation;
  }

  /** Whether `value` is a `HostedRateLimitError`, from any copy of this package. */
  static override isInstance(value: unknown): value is HostedRateLimitError {
    return hasErrorMarker(value, rateLimitMarker);
  }
}

/** Seconds (`Retry-After: 2`) or an HTTP date, as milliseconds from now; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  if (value === null || value === undefined || value.trim() === '') return undefined;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1000);
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}
