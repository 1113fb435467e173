import { EngineError, VimeError } from '@vime/core';
import { HttpClient, sleep } from '@vime/core/utils';
import type { Dispatcher } from 'undici';
import {
  type EngineSnapshot,
  engineSnapshot,
  type PromParse,
  parsePrometheusText,
  type ScrapeSeries,
} from '../prometheus.js';

/** Engines' Prometheus `/metrics` read over HTTP; the parsing and the arithmetic on it are in the root. */

export interface PrometheusScrape extends PromParse {
  url: string;
  /** Milliseconds since the epoch when the response arrived. */
  t: number;
  snapshot: EngineSnapshot;
}

/** Options of scraping a Prometheus endpoint. */
export interface ScrapeOptions {
  signal?: AbortSignal | undefined;
  /** Per-request timeout in milliseconds (default 5,000). */
  timeoutMs?: number | undefined;
  /** undici dispatcher (connection pool) to use. */
  dispatcher?: Dispatcher | undefined;
  /** Extra request headers (e.g. `authorization`). */
  headers?: Record<string, string> | undefined;
}

/** A client for one engine's metrics URL, kept for a whole scrape series. */
function metricsClient(url: string, options: ScrapeOptions): { client: HttpClient; path: string } {
  const parsed = new URL(url);
  const client = new HttpClient(parsed.origin, {
    dispatcher: options.dispatcher,
    timeoutMs: options.timeoutMs ?? 5000,
    headers: { accept: 'text/plain;version=0.0.4', ...options.headers },
    connections: 2,
    service: 'engine',
  });
  return { client, path: parsed.pathname + parsed.search };
}

async function scrapeWith(
  url: string,
  { client, path }: { client: HttpClient; path: string },
  signal: AbortSignal | undefined,
): Promise<PrometheusScrape> {
  let text: string;
  try {
    ({ text } = await client.text({ method: 'GET', path, signal }));
  } catch (error) {
    if (signal?.aborted) {
      throw new VimeError('aborted', `scrape of ${url} was aborted`, { cause: signal.reason ?? error });
    }
    if (EngineError.isInstance(error) && error.status === 404) {
      throw new EngineError(`${error.message} (SGLang serves /metrics only with --enable-metrics)`, {
        status: 404,
        url,
        cause: error,
      });
    }
    throw error;
  }
  const parsed = parsePrometheusText(text);
  return { ...parsed, url, t: Date.now(), snapshot: engineSnapshot(parsed) };
}

/**
 * GET an engine's Prometheus `/metrics` (SGLang needs `--enable-metrics`) and parse it. Throws
 * `EngineError` (retryable for connection failures, timeouts, 429 and 5xx).
 */
export async function scrapePrometheus(url: string, options: ScrapeOptions = {}): Promise<PrometheusScrape> {
  const target = metricsClient(url, options);
  try {
    return await scrapeWith(url, target, options.signal);
  } finally {
    await target.client.close();
  }
}

/**
 * Scrape several engines every `intervalMs` for `durationMs` (or until `signal` aborts) and return one
 * series per URL. A failed scrape is recorded in `errors` and does not stop the others.
 */
export async function scrapeEngines(
  urls: ReadonlyArray<string>,
  options: ScrapeOptions & {
    intervalMs: number;
    durationMs: number;
    onScrape?: ((url: string, snapshot: EngineSnapshot) => void) | undefined;
  },
): Promise<ScrapeSeries[]> {
  const { onScrape, intervalMs, durationMs, signal } = options;
  const targets = urls.map((url) => ({
    series: { url, scrapes: [], errors: [] } as ScrapeSeries,
    target: metricsClient(url, options),
  }));
  const deadline = Date.now() + durationMs;
  try {
    while (!signal?.aborted) {
      const started = Date.now();
      await Promise.all(
        targets.map(async ({ series, target }) => {
          try {
            const r = await scrapeWith(series.url, target, signal);
            series.scrapes.push({ t: r.t, snapshot: r.snapshot });
            onScrape?.(series.url, r.snapshot);
          } catch (error) {
            if (signal?.aborted) return;
            series.errors.push({ t: Date.now(), message: (error as Error).message });
          }
        }),
      );
      if (Date.now() >= deadline) break;
      const wait = Math.min(intervalMs - (Date.now() - started), deadline - Date.now());
      if (wait > 0) await sleep(wait, signal).catch(() => {});
    }
  } finally {
    await Promise.all(targets.map(({ target }) => target.client.close()));
  }
  return targets.map(({ series }) => series);
}
