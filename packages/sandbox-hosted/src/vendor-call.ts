/** How every vendor adapter calls its SDK: errors mapped by the vendor's `rethrow`, and calls without a signal raced against one. */

/** A vendor's mapping of what its SDK threw to a typed error (a rate limit to `HostedRateLimitError`). */
export type Rethrow = (operation: string, error: unknown) => never;

/** `call(operation, fn)`: runs one SDK call, mapping what it throws through `rethrow`. */
export function vendorCall(rethrow: Rethrow): <T>(operation: string, fn: () => Promise<T>) => Promise<T> {
  return async (operation, fn) => {
    try {
      return await fn();
    } catch (error) {
      rethrow(operation, error);
    }
  };
}

/** Rejects when `signal` aborts (an SDK call that takes no signal is abandoned, not cancelled). */
export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
