const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A signal that aborts when any of `signals` does or after `ms`, whichever comes first; `clear()` drops
 * the timer and the listeners once the wait is over.
 *
 * Not Node's own combination of a timeout signal with others: on Node 20 the combined signal holds the
 * timeout signal only weakly, so after a garbage collection the timeout never fires and a wait on the
 * combined signal lasts forever. Here the timer and the sources' listeners hold the signal strongly.
 */
export function deadlineSignal(
  ms: number,
  ...signals: Array<AbortSignal | undefined>
): {
  signal: AbortSignal;
  /** Drop the timer and the listeners (the wait is over). */
  clear(): void;
} {
  const controller = new AbortController();
  const sources = signals.filter((s): s is AbortSignal => s !== undefined);
  const clear = () => {
    clearTimeout(timer);
    for (const s of sources) s.removeEventListener('abort', onAbort);
  };
  const onAbort = function (this: AbortSignal) {
    clear();
    controller.abort(this.reason);
  };
  // Past what a timer can hold (about 24.8 days, or Infinity) setTimeout would fire at once: no deadline.
  const timer =
    ms <= MAX_TIMER_MS
      ? setTimeout(() => {
          clear();
          controller.abort(new DOMException(`The operation timed out after ${ms} ms`, 'TimeoutError'));
        }, ms)
      : undefined;
  for (const s of sources) {
    if (s.aborted) {
      clear();
      controller.abort(s.reason);
      break;
    }
    s.addEventListener('abort', onAbort, { once: true });
  }
  return { signal: controller.signal, clear };
}
