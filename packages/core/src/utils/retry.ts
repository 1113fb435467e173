import { VimeError } from '../errors.js';
import { sleep } from './sleep.js';

/** Exponential backoff: the first delay, its cap and its jitter. */
export interface BackoffOptions {
  /** Delay before the first retry (default 500 ms); it doubles per attempt. */
  initialDelayMs?: number | undefined;
  /** Ceiling for one delay (default 8 s). */
  maxDelayMs?: number | undefined;
  /** Random spread around each delay, as a fraction (default 0.2: ±20 %), so retries do not synchronise. */
  jitter?: number | undefined;
}

/** Options of `retry`. */
export interface RetryOptions extends BackoffOptions {
  /** Attempts after the first (default 2, as openai-node's `maxRetries`). */
  retries?: number | undefined;
  signal?: AbortSignal | undefined;
  /** Whether a failure is worth another attempt. Default: the error's own `isRetryable` flag. */
  shouldRetry?: ((error: unknown, attempt: number) => boolean) | undefined;
  /** Called before each wait. */
  onRetry?: ((info: { attempt: number; delayMs: number; error: unknown }) => void) | undefined;
}

/** Whether an error says it may succeed on another try (`EngineError.isRetryable` and the like). */
export function isRetryableError(error: unknown): boolean {
  return (error as { isRetryable?: unknown } | null)?.isRetryable === true;
}

/** A server's `Retry-After` hint carried by an error (`retryAfterMs`), if any. */
function retryAfterOf(error: unknown): number | undefined {
  const value = (error as { retryAfterMs?: unknown } | null)?.retryAfterMs;
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/** The exponential delay before retry number `attempt` (1-based), with jitter. */
export function backoffDelay(attempt: number, options: BackoffOptions = {}): number {
  const { initialDelayMs = 500, maxDelayMs = 8_000, jitter = 0.2 } = options;
  const base = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.max(0, attempt - 1));
  return base * (1 - jitter + 2 * jitter * Math.random());
}

/**
 * Run `fn` until it succeeds, retrying failures that `shouldRetry` accepts with exponential backoff. A
 * server's Retry-After (an error's `retryAfterMs`) replaces the computed delay. An abort stops at once
 * and rejects with the signal's reason; the last failure is rethrown when attempts run out.
 */
export async function retry<T>(fn: (attempt: number) => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const { retries = 2, signal, shouldRetry = isRetryableError, onRetry } = options;
  for (let attempt = 0; ; attempt++) {
    signal?.throwIfAborted();
    try {
      return await fn(attempt);
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      if (isAbort(error) || attempt >= retries || !shouldRetry(error, attempt)) throw error;
      const delayMs = retryAfterOf(error) ?? backoffDelay(attempt + 1, options);
      onRetry?.({ attempt: attempt + 1, delayMs, error });
      await sleep(delayMs, signal);
    }
  }
}

function isAbort(error: unknown): boolean {
  if (VimeError.isInstance(error)) return error.code === 'aborted';
  return (error as { name?: unknown } | null)?.name === 'AbortError';
}
