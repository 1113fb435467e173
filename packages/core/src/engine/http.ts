import { Pool } from 'undici';
import type { z } from 'zod';
import { EngineError, VimeError } from '../errors.js';
import { parseWith } from '../validate.js';
import type { EngineOptions } from './types.js';

/** HTTP statuses worth retrying: the request may succeed on another try or another engine. */
const RETRYABLE = new Set([408, 409, 429, 500, 502, 503, 504]);

/** A small JSON client over one undici keep-alive pool. */
export class JsonClient {
  readonly url: string;
  readonly #pool: Pool;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number | undefined;

  constructor(url: string, options: EngineOptions = {}) {
    let origin: URL;
    try {
      origin = new URL(url);
    } catch (cause) {
      throw new EngineError(`invalid engine url ${JSON.stringify(url)}; expected e.g. http://host:30000`, {
        cause,
      });
    }
    this.url = origin.origin;
    this.#pool = new Pool(this.url, { connections: options.connections ?? 256, pipelining: 1 });
    this.#headers = {
      'content-type': 'application/json',
      ...(options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {}),
      ...options.headers,
    };
    this.#timeoutMs = options.timeoutMs;
  }

  /** Send a request and parse the JSON answer with `schema`. Throws `EngineError` on any failure. */
  async request<S extends z.ZodType>(
    method: 'GET' | 'POST',
    path: string,
    body: unknown,
    schema: S,
    options: { signal?: AbortSignal | undefined; headers?: Record<string, string> } = {},
  ): Promise<z.output<S>> {
    const url = this.url + path;
    const signals = [
      options.signal,
      this.#timeoutMs ? AbortSignal.timeout(this.#timeoutMs) : undefined,
    ].filter((s): s is AbortSignal => s !== undefined);
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
    let status: number;
    let text: string;
    try {
      const res = await this.#pool.request({
        method,
        path,
        headers: options.headers ? { ...this.#headers, ...options.headers } : this.#headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        ...(signal ? { signal } : {}),
      });
      status = res.statusCode;
      text = await res.body.text();
    } catch (cause) {
      if (signal?.aborted) {
        const reason = signal.reason as { name?: string } | undefined;
        const timedOut = reason?.name === 'TimeoutError';
        throw new EngineError(`${method} ${url} ${timedOut ? 'timed out' : 'was aborted'}`, {
          cause: signal.reason,
          isRetryable: timedOut,
          url,
        });
      }
      throw new EngineError(`${method} ${url} failed: ${(cause as Error).message}; is the engine running?`, {
        cause,
        isRetryable: true,
        url,
      });
    }
    if (status < 200 || status >= 300) {
      throw new EngineError(`${method} ${url} answered ${status}: ${errorText(text)}`, {
        status,
        url,
        isRetryable: RETRYABLE.has(status),
      });
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (cause) {
      throw new EngineError(`${method} ${url} answered non-JSON: ${text.slice(0, 200)}`, {
        cause,
        url,
        status,
      });
    }
    try {
      return parseWith(schema, json, `response of ${method} ${path}`);
    } catch (cause) {
      const message = VimeError.isInstance(cause) ? cause.message : String(cause);
      throw new EngineError(`${url}: ${message}`, { cause, url, status });
    }
  }

  /** GET `path` and report whether it answered 200 (network errors count as unhealthy). */
  async ok(path: string, signal: AbortSignal | undefined): Promise<boolean> {
    try {
      const res = await this.#pool.request({ method: 'GET', path, ...(signal ? { signal } : {}) });
      await res.body.dump();
      return res.statusCode === 200;
    } catch (cause) {
      if (signal?.aborted) throw cause;
      return false;
    }
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}

function errorText(text: string): string {
  try {
    const json = JSON.parse(text) as {
      error?: { message?: string } | string;
      message?: string;
      detail?: string;
    };
    const e = json.error;
    const msg = typeof e === 'string' ? e : (e?.message ?? json.message ?? json.detail);
    if (typeof msg === 'string') return msg;
  } catch {
    // not JSON
  }
  return text.slice(0, 300) || '(empty body)';
}

let ridCounter = 0;
/** A process-unique request id. */
export function newRequestId(prefix = 'vime'): string {
  ridCounter = (ridCounter + 1) % Number.MAX_SAFE_INTEGER;
  return `${prefix}-${process.pid.toString(36)}-${Date.now().toString(36)}-${ridCounter.toString(36)}`;
}
