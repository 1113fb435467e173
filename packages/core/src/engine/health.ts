/**
 * Engine health gate: poll every inference engine until each answers healthy, with per-engine backoff,
 * and fail after a deadline naming the engines that never came up and the first error each one gave.
 */

import type { Dispatcher } from 'undici';
import { EngineError } from '../errors.js';
import { parseDuration } from '../utils/duration.js';
import { describeCause, HttpClient } from '../utils/http.js';
import { httpUrl } from '../utils/http-url.js';
import { retry } from '../utils/retry.js';
import { deadlineSignal } from '../utils/signals.js';
import type { EngineKind } from './types.js';

/**
 * Health paths per engine kind. SGLang's `/health_generate` runs a one-token generation, so it only
 * passes after warm-up (older SGLang answers `/health` 200 as soon as HTTP is up); vLLM's `/health`
 * reflects the engine process.
 */
export const HEALTH_PATHS: Record<EngineKind, string> = { sglang: '/health_generate', vllm: '/health' };

/** The state of one engine in `waitForEngines`. */
export type EngineHealthState =
  /** Not polled yet. */
  | 'pending'
  /** No HTTP answer: connection refused, DNS not resolvable yet, timeout. */
  | 'unreachable'
  /** HTTP answered, but not healthy (SGLang/vLLM answer 503 while loading or warming up). */
  | 'starting'
  /** Was healthy, then failed again. */
  | 'flapping'
  /** Answered healthy `stableChecks` times in a row. */
  | 'healthy';

/** An engine to wait for: its URL and, optionally, its kind and health path. */
export interface EngineTarget {
  /** Base URL, e.g. `http://sglang-0.my-group:30000`. */
  url: string;
  kind?: EngineKind | undefined;
  /** Health path; defaults from the kind. */
  path?: string | undefined;
}

/** One engine's health as `waitForEngines` last saw it. */
export interface EngineHealthStatus {
  url: string;
  healthUrl: string;
  state: EngineHealthState;
  /** Health requests made. */
  attempts: number;
  /** The first failure seen (usually the most telling: refused, 503, DNS). */
  firstError?: string | undefined;
  lastError?: string | undefined;
  /** Milliseconds from the start of the wait until the engine was declared healthy. */
  healthyAfterMs?: number | undefined;
}

/** Options of `waitForEngines`. */
export interface WaitForEnginesOptions {
  /** Time budget: milliseconds, or a duration such as `"30m"`. */
  deadline: number | string;
  signal?: AbortSignal | undefined;
  /** Default engine kind for plain URLs. Default `sglang`. */
  kind?: EngineKind | undefined;
  /** Consecutive healthy answers required (guards against flapping). Default 2. */
  stableChecks?: number | undefined;
  /** First poll interval; doubles per failure up to `maxDelayMs`. Defaults 250 ms and 10 s. */
  initialDelayMs?: number | undefined;
  maxDelayMs?: number | undefined;
  /** Per-request timeout. Default 5 s. */
  requestTimeoutMs?: number | undefined;
  /** Extra headers, e.g. `Authorization` for an engine started with `--api-key`. */
  headers?: Record<string, string> | undefined;
  /** Called on every state change. */
  onState?: ((status: Readonly<EngineHealthStatus>) => void) | undefined;
  dispatcher?: Dispatcher | undefined;
}

function healthUrl(target: EngineTarget, kind: EngineKind): string {
  const path = target.path ?? HEALTH_PATHS[target.kind ?? kind];
  const base = httpUrl(target.url, 'engine URL', 'http://HOST:PORT (e.g. http://sglang-0.my-group:30000)');
  if (!base.pathname.endsWith('/')) base.pathname += '/';
  return new URL(path, base).toString();
}

/** One health check that did not (yet) pass: retried by the poll loop. */
class NotHealthy extends Error {
  /** A healthy answer short of the streak is re-checked soon; failures back off. */
  readonly retryAfterMs: number | undefined;
  constructor(
    readonly failure: string | undefined,
    recheckMs: number,
  ) {
    super(failure ?? 'healthy, not yet stable');
    this.retryAfterMs = failure === undefined ? recheckMs : undefined;
  }
}

/**
 * Wait until every engine is healthy. Resolves with each engine's status; rejects with an `EngineError`
 * (`data.engines`) after the deadline, or with the signal's reason when aborted.
 */
export async function waitForEngines(
  engines: ReadonlyArray<string | EngineTarget>,
  options: WaitForEnginesOptions,
): Promise<EngineHealthStatus[]> {
  const kind = options.kind ?? 'sglang';
  const stable = options.stableChecks ?? 2;
  const initial = options.initialDelayMs ?? 250;
  const max = options.maxDelayMs ?? 10_000;
  const requestTimeout = options.requestTimeoutMs ?? 5_000;
  const budget =
    typeof options.deadline === 'number' ? options.deadline : parseDuration(options.deadline, 'deadline');
  const started = performance.now();
  const deadline = deadlineSignal(budget, options.signal);
  const stop = deadline.signal;

  const statuses: EngineHealthStatus[] = engines.map((e) => {
    const target = typeof e === 'string' ? { url: e } : e;
    return { url: target.url, healthUrl: healthUrl(target, kind), state: 'pending', attempts: 0 };
  });
  const setState = (status: EngineHealthStatus, state: EngineHealthState) => {
    if (status.state === state) return;
    status.state = state;
    options.onState?.({ ...status });
  };

  const poll = async (status: EngineHealthStatus) => {
    const url = new URL(status.healthUrl);
    const http = new HttpClient(url.origin, {
      dispatcher: options.dispatcher,
      headers: options.headers,
      timeoutMs: requestTimeout,
    });
    let streak = 0;
    let everHealthy = false;
    const check = async () => {
      status.attempts++;
      let failure: string | undefined;
      try {
        const response = await http.send({ method: 'GET', path: url.pathname + url.search, signal: stop });
        const body = response.text.trim();
        if (response.status === 200) {
          streak++;
          everHealthy = true;
          if (streak >= stable) return;
        } else {
          failure = `HTTP ${response.status}${body ? ` ${JSON.stringify(body.slice(0, 200))}` : ''}`;
        }
      } catch (error) {
        if (stop.aborted) throw error;
        failure = describeCause((error as Error).cause ?? error);
      }
      if (failure !== undefined) {
        status.firstError ??= failure;
        status.lastError = failure;
        setState(status, everHealthy ? 'flapping' : failure.startsWith('HTTP') ? 'starting' : 'unreachable');
        streak = 0;
      }
      throw new NotHealthy(failure, initial);
    };
    try {
      await retry(check, {
        retries: Number.POSITIVE_INFINITY,
        initialDelayMs: initial,
        maxDelayMs: max,
        signal: stop,
        shouldRetry: (error) => error instanceof NotHealthy,
      });
      status.healthyAfterMs = Math.round(performance.now() - started);
      setState(status, 'healthy');
    } catch (error) {
      if (!stop.aborted) throw error;
    } finally {
      await http.close();
    }
  };

  await Promise.all(statuses.map(poll)).finally(deadline.clear);
  if (options.signal?.aborted) throw options.signal.reason;
  const down = statuses.filter((s) => s.state !== 'healthy');
  if (down.length) {
    const lines = down.map(
      (s) =>
        `${s.url} (${s.state}, ${s.attempts} checks; first error: ${s.firstError ?? 'none'}; last: ${s.lastError ?? 'none'})`,
    );
    throw new EngineError(
      `${down.length} of ${statuses.length} engine(s) never became healthy within ${Math.round(budget / 1000)}s: ${lines.join('; ')}`,
      { isRetryable: false, data: { engines: statuses.map((s) => ({ ...s })) } },
    );
  }
  return statuses;
}
