/**
 * One JSON-over-HTTP client for every upstream Vime talks to (inference engines, the Ray dashboard, engine
 * health and Prometheus endpoints): undici underneath, with the same options everywhere — a dispatcher,
 * a per-request timeout, a retry policy and a logger.
 */
import { type Dispatcher, Pool } from 'undici';
import type { z } from 'zod';
import { EngineError, VimeError } from '../errors.js';
import { parseWith } from '../validate.js';
import type { Logger } from './logger.js';
import { type BackoffOptions, isRetryableError, retry } from './retry.js';

/** HTTP statuses worth retrying: the request may succeed on another try or another server. */
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([408, 409, 429, 500, 502, 503, 504]);

/** Options of `HttpClient`. */
export interface HttpClientOptions {
  /**
   * undici dispatcher to send through: a shared `Agent`, a `ProxyAgent`, a unix-socket `Pool`. Default: a
   * keep-alive pool of `connections` owned by this client.
   */
  dispatcher?: Dispatcher | undefined;
  /** Most keep-alive connections of the default pool (default 256). Requests beyond it wait. */
  connections?: number | undefined;
  /** Sent as `Authorization: Bearer <apiKey>`. */
  apiKey?: string | undefined;
  headers?: Record<string, string> | undefined;
  /** Per-attempt timeout in milliseconds (default none: callers bound their calls with signals). */
  timeoutMs?: number | undefined;
  /** Attempts after the first for retryable failures: connection errors, timeouts, 408/409/429/5xx (default 0). */
  maxRetries?: number | undefined;
  /** Backoff between retries; a `Retry-After` header takes precedence. */
  backoff?: BackoffOptions | undefined;
  logger?: Logger | undefined;
  /** What answers at the URL, for messages: `is the engine running?` (default `server`). */
  service?: string | undefined;
}

/** An HTTP method the client sends. */
export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'DELETE';

/** A request body already encoded as JSON text (sent as it is). */
export class JsonText {
  constructor(readonly text: string) {}
}

/**
 * JSON of an object whose `ids` member is written from a typed array directly (`Array.from` plus
 * `JSON.stringify` of a long prompt costs several times more), the other members by `JSON.stringify`.
 */
export function jsonWithIds(key: string, ids: ArrayLike<number>, rest: Record<string, unknown>): JsonText {
  const tail = JSON.stringify(rest);
  // A typed array's own join is native; Array.prototype.join on one walks it generically, far slower.
  const list = ArrayBuffer.isView(ids) ? (ids as Int32Array).join(',') : Array.prototype.join.call(ids, ',');
  return new JsonText(`{${JSON.stringify(key)}:[${list}]${tail === '{}' ? '}' : `,${tail.slice(1)}`}`);
}

/** One request of `HttpClient`. */
export interface HttpRequest {
  method: HttpMethod;
  /** Path (and query) under the client's base URL. */
  path: string;
  /** JSON-encoded when given (`JsonText` is sent as it is). */
  body?: unknown;
  headers?: Record<string, string> | undefined;
  signal?: AbortSignal | undefined;
}

/** A response of `HttpClient`. */
export interface HttpResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  /** The full URL that answered. */
  url: string;
}

/**
 * An HTTP client over undici for one base URL: JSON bodies, per-request timeouts, retries and errors that
 * name the request.
 */
export class HttpClient {
  /** Origin plus base path, without a trailing slash. */
  readonly url: string;
  readonly #origin: string;
  readonly #basePath: string;
  readonly #dispatcher: Dispatcher;
  readonly #ownsDispatcher: boolean;
  readonly #headers: Record<string, string>;
  readonly #options: HttpClientOptions;

  constructor(baseUrl: string, options: HttpClientOptions = {}) {
    let parsed: URL;
    try {
      parsed = new URL(baseUrl);
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new TypeError('not http(s)');
    } catch (cause) {
      throw new EngineError(`invalid URL ${JSON.stringify(baseUrl)}; expected e.g. http://host:30000`, {
        cause,
      });
    }
    this.#origin = parsed.origin;
    this.#basePath = parsed.pathname.replace(/\/+$/, '');
    this.url = this.#origin + this.#basePath;
    this.#ownsDispatcher = options.dispatcher === undefined;
    this.#dispatcher =
      options.dispatcher ??
      new Pool(this.#origin, { connections: options.connections ?? 256, pipelining: 1 });
    this.#headers = {
      ...(options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {}),
      ...options.headers,
    };
    this.#options = options;
  }

  /** One request (retrying connection failures and timeouts per the policy); any status is returned. */
  send(request: HttpRequest): Promise<HttpResponse> {
    return this.#retrying(request, () => this.#once(request));
  }

  /** A request that must answer 2xx; other statuses throw `EngineError` (retryable ones are retried). */
  text(request: HttpRequest): Promise<HttpResponse> {
    return this.#retrying(request, async () => {
      const response = await this.#once(request);
      if (response.status < 200 || response.status >= 300) throw statusError(request.method, response);
      return response;
    });
  }

  /** A 2xx JSON answer parsed with `schema`. Every failure is an `EngineError` naming the URL. */
  async json<S extends z.ZodType>(request: HttpRequest & { schema: S }): Promise<z.output<S>> {
    const response = await this.text(request);
    let value: unknown;
    try {
      value = JSON.parse(response.text);
    } catch (cause) {
      throw new EngineError(
        `${request.method} ${response.url} answered non-JSON: ${JSON.stringify(response.text.slice(0, 200))}`,
        { cause, url: response.url, status: response.status },
      );
    }
    try {
      return parseWith(request.schema, value, `response of ${request.method} ${request.path}`);
    } catch (cause) {
      const message = VimeError.isInstance(cause) ? cause.message : String(cause);
      throw new EngineError(`${response.url}: ${message}`, {
        cause,
        url: response.url,
        status: response.status,
      });
    }
  }

  /**
   * GET `path` and report whether it answered 200. A server that cannot be reached throws the
   * `EngineError` naming why (a refused connection says more than "unhealthy").
   */
  async ok(path: string, signal?: AbortSignal): Promise<boolean> {
    return (await this.#once({ method: 'GET', path, signal })).status === 200;
  }

  /** Close the client's connections. */
  async close(): Promise<void> {
    if (this.#ownsDispatcher) await this.#dispatcher.close();
  }

  #retrying(request: HttpRequest, attempt: () => Promise<HttpResponse>): Promise<HttpResponse> {
    const retries = this.#options.maxRetries ?? 0;
    if (retries === 0) return attempt();
    return retry(attempt, {
      ...this.#options.backoff,
      retries,
      signal: request.signal,
      shouldRetry: isRetryableError,
      onRetry: ({ attempt: n, delayMs, error }) =>
        this.#options.logger?.debug?.(`retrying ${request.method} ${this.url}${request.path}`, {
          attempt: n,
          delayMs: Math.round(delayMs),
          error: (error as Error).message,
        }),
    });
  }

  /**
   * A request whose 2xx body is read as it arrives (SSE from an engine); no retries, since part of the
   * answer may already be consumed. Other statuses throw `EngineError` as `text` does.
   */
  async open(request: HttpRequest): Promise<{ url: string; body: AsyncIterable<Uint8Array> }> {
    const response = await this.#once(request, true);
    return { url: response.url, body: response.stream! };
  }

  async #once(
    request: HttpRequest,
    streaming = false,
  ): Promise<HttpResponse & { stream?: AsyncIterable<Uint8Array> | undefined }> {
    const path = this.#basePath + request.path;
    const url = this.#origin + path;
    const timeoutMs = this.#options.timeoutMs;
    const timeout = timeoutMs === undefined ? undefined : AbortSignal.timeout(timeoutMs);
    const signal =
      request.signal && timeout ? AbortSignal.any([request.signal, timeout]) : (request.signal ?? timeout);
    const headers: Record<string, string> = { ...this.#headers, ...request.headers };
    if (request.body !== undefined) headers['content-type'] ??= 'application/json';
    try {
      const res = await this.#dispatcher.request({
        origin: this.#origin,
        path,
        method: request.method,
        headers,
        body:
          request.body === undefined
            ? null
            : request.body instanceof JsonText
              ? request.body.text
              : JSON.stringify(request.body),
        signal: signal ?? null,
      });
      if (streaming && res.statusCode >= 200 && res.statusCode < 300) {
        return { status: res.statusCode, headers: res.headers, text: '', url, stream: res.body };
      }
      const response = { status: res.statusCode, headers: res.headers, text: await res.body.text(), url };
      if (streaming) throw statusError(request.method, response);
      return response;
    } catch (cause) {
      if (request.signal?.aborted) throw request.signal.reason;
      if (cause instanceof EngineError) throw cause;
      if (timeout?.aborted) {
        throw new EngineError(`${request.method} ${url} timed out after ${timeoutMs} ms`, {
          cause,
          isRetryable: true,
          url,
        });
      }
      throw new EngineError(
        `${request.method} ${url} failed: ${describeCause(cause)}; is the ${this.#options.service ?? 'server'} running?`,
        {
          cause,
          isRetryable: true,
          url,
        },
      );
    }
  }
}

function statusError(method: string, response: HttpResponse): EngineError {
  const retryAfter = retryAfterMs(response.headers['retry-after']);
  return new EngineError(
    `${method} ${response.url} answered ${response.status}: ${errorText(response.text)}`,
    {
      status: response.status,
      url: response.url,
      isRetryable: RETRYABLE_STATUSES.has(response.status),
      retryAfterMs: retryAfter,
      data: { body: response.text.slice(0, 4096) },
    },
  );
}

/** `Retry-After` as seconds or an HTTP date, in milliseconds from now. */
export function retryAfterMs(value: string | string[] | undefined): number | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (!text) return undefined;
  const seconds = Number(text);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

/** The message of an upstream's JSON error body (`{error: {message}}`, `{message}`, `{detail}`), else the text. */
function errorText(text: string): string {
  try {
    const json = JSON.parse(text) as {
      error?: { message?: string | undefined } | string | undefined;
      message?: string | undefined;
      detail?: string | undefined;
    };
    const e = json.error;
    const message = typeof e === 'string' ? e : (e?.message ?? json.message ?? json.detail);
    if (typeof message === 'string') return message;
  } catch {
    // not JSON
  }
  return text.slice(0, 300) || '(empty body)';
}

/** A connection failure's code and message (`ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:1`). */
export function describeCause(error: unknown): string {
  const e = error as {
    code?: string | undefined;
    message?: string | undefined;
    cause?: { code?: string | undefined; message?: string | undefined } | undefined;
  };
  const code = e.cause?.code ?? e.code;
  const message = e.cause?.message ?? e.message ?? String(error);
  return code && !message.includes(code) ? `${code}: ${message}` : message;
}
