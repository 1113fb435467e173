/**
 * A small Docker Engine REST client (undici) over the unix socket, or over TCP with TLS client
 * certificates to a remote engine. Also speaks to Podman's compatible service. Negotiates the API version
 * with `GET /version` instead of hard-coding one.
 */
import type { Readable } from 'node:stream';
import { ConfigError, SandboxError } from '@vime/core';
import { retryAfterMs } from '@vime/core/utils';
import { type Dispatcher, Pool } from 'undici';
import { SandboxRateLimited } from '../errors.js';

/** Newest Engine API this client is written against, and the oldest it accepts. */
export const DOCKER_API_MAX = '1.47';
/** The oldest Docker Engine API version spoken. */
export const DOCKER_API_MIN = '1.40';

function compareVersions(a: string, b: string): number {
  const [a1 = 0, a2 = 0] = a.split('.').map(Number);
  const [b1 = 0, b2 = 0] = b.split('.').map(Number);
  return a1 - b1 || a2 - b2;
}

/** The socket from `DOCKER_HOST` (`unix://…`), else `/var/run/docker.sock`. */
export function defaultDockerSocket(): string {
  const host = process.env.DOCKER_HOST;
  if (host?.startsWith('unix://')) return host.slice('unix://'.length);
  return '/var/run/docker.sock';
}

/** TLS of a remote engine: PEM contents (not paths), as `dockerd --tlsverify` expects of its clients. */
export interface DockerTls {
  /** The CA that signed the engine's certificate: the engine is verified against it (and only it). */
  ca: string | Buffer;
  /** This client's certificate, signed by a CA the engine trusts (`--tlscacert`). */
  cert: string | Buffer;
  /** This client's private key. */
  key: string | Buffer;
}

/** Where an engine listens: `unix:///path/docker.sock`, or `tcp://host:port` with `tls`. */
export interface DockerEndpoint {
  host: string;
  /** Required for `tcp://`: a remote engine is reached only over TLS with a client certificate. */
  tls?: DockerTls | undefined;
}

/** The undici origin and connect options of an endpoint; a bad one is a `ConfigError` naming the fix. */
function connectionOf(endpoint: string | DockerEndpoint): {
  origin: string;
  address: string;
  socketPath?: string | undefined;
  tls?: DockerTls | undefined;
} {
  if (typeof endpoint === 'string')
    return { origin: 'http://docker', address: endpoint, socketPath: endpoint };
  const { host, tls } = endpoint;
  if (host.startsWith('unix://')) {
    const socketPath = host.slice('unix://'.length);
    return { origin: 'http://docker', address: socketPath, socketPath };
  }
  const m = /^tcp:\/\/([^/:]+|\[[0-9a-fA-F:]+\]):(\d{1,5})\/?$/.exec(host);
  if (!m) {
    throw new ConfigError(
      `docker host ${JSON.stringify(host)} is neither unix:///path nor tcp://host:port; e.g. tcp://10.0.0.5:2376`,
    );
  }
  if (!tls?.ca || !tls.cert || !tls.key) {
    throw new ConfigError(
      `docker host ${host} needs tls: { ca, cert, key } (PEM contents): a remote engine is reached only over TLS ` +
        'with a client certificate (dockerd --tlsverify), since plain TCP lets anyone who reaches the port run containers as root',
    );
  }
  return { origin: `https://${m[1]}:${m[2]}`, address: host, tls };
}

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined> | undefined;
  json?: unknown;
  body?: Buffer | Readable | undefined;
  contentType?: string | undefined;
  /** Extra request headers (e.g. `X-Registry-Auth`). */
  headers?: Record<string, string> | undefined;
  signal?: AbortSignal | undefined;
  /** Status codes that are not errors (default: 2xx). */
  ok?: readonly number[] | undefined;
  /** Largest response body read (default 64 MiB); a larger one fails with `response_too_large`. */
  maxBytes?: number | undefined;
}

export interface EngineResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** Default cap on a response body: engine answers are small, and a container's files are capped by the caller. */
const MAX_RESPONSE_BYTES = 64 << 20;

/**
 * A client of the Docker Engine API over its unix socket (Podman's too), or over TCP with TLS client
 * certificates (`{ host: 'tcp://10.0.0.5:2376', tls: { ca, cert, key } }`).
 */
export class DockerEngine {
  /** The unix socket, or undefined for a remote (TCP) engine. */
  readonly socketPath: string | undefined;
  /** The socket path or `tcp://host:port`, for messages. */
  readonly address: string;
  /** The TLS of a remote engine (the process-exit cleanup connects with it too). */
  readonly tls: DockerTls | undefined;
  /** `https://host:port` of a remote engine. */
  readonly origin: string;
  private readonly client: Pool;
  private versionPromise: Promise<string> | undefined;

  constructor(endpoint: string | DockerEndpoint = defaultDockerSocket()) {
    const conn = connectionOf(endpoint);
    this.socketPath = conn.socketPath;
    this.address = conn.address;
    this.tls = conn.tls;
    this.origin = conn.origin;
    // One connection per in-flight request: an attached exec holds its connection until the process exits.
    // Exec streams and long waits must not be cut by idle timeouts; callers bound them with signals.
    this.client = new Pool(conn.origin, {
      ...(conn.socketPath ? { socketPath: conn.socketPath } : {}),
      // Verified against this CA only (Node's default CAs are replaced), presenting the client certificate.
      ...(conn.tls ? { connect: { ca: conn.tls.ca, cert: conn.tls.cert, key: conn.tls.key } } : {}),
      connections: 256,
      bodyTimeout: 0,
      headersTimeout: 0,
    });
  }

  /** Whether the engine answers (`GET /_ping`); an unreachable one is `sandbox_unavailable`. */
  async ping(signal?: AbortSignal): Promise<void> {
    await this.raw('GET', '/_ping', { signal });
  }

  /** The API version both sides speak: min(server, DOCKER_API_MAX), checked against the server's minimum. */
  apiVersion(signal?: AbortSignal): Promise<string> {
    this.versionPromise ??= (async () => {
      const res = await this.raw('GET', '/version', { signal });
      const info = JSON.parse(res.body.toString()) as {
        ApiVersion?: string | undefined;
        MinAPIVersion?: string | undefined;
      };
      const server = info.ApiVersion ?? DOCKER_API_MIN;
      const chosen = compareVersions(server, DOCKER_API_MAX) < 0 ? server : DOCKER_API_MAX;
      if (compareVersions(chosen, DOCKER_API_MIN) < 0) {
        throw new SandboxError(
          `the engine at ${this.address} speaks API ${server}, older than the ${DOCKER_API_MIN} this client needs; upgrade Docker/Podman`,
        );
      }
      if (info.MinAPIVersion && compareVersions(chosen, info.MinAPIVersion) < 0) {
        throw new SandboxError(
          `the engine at ${this.address} requires API >= ${info.MinAPIVersion}, newer than this client's ${DOCKER_API_MAX}`,
        );
      }
      return chosen;
    })();
    this.versionPromise.catch(() => {
      this.versionPromise = undefined;
    });
    return this.versionPromise;
  }

  /** Sends a call; an unreachable engine is `sandbox_unavailable` with the fix. */
  private async send(
    method: string,
    path: string,
    options: RequestOptions,
  ): Promise<Dispatcher.ResponseData> {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(options.query ?? {})) if (v !== undefined) query.set(k, String(v));
    const qs = query.size > 0 ? `?${query}` : '';
    try {
      return await this.client.request({
        method: method as 'GET',
        path: `${path}${qs}`,
        headers: {
          ...(options.json !== undefined ? { 'content-type': 'application/json' } : {}),
          ...(options.contentType ? { 'content-type': options.contentType } : {}),
          ...options.headers,
        },
        body: options.json !== undefined ? JSON.stringify(options.json) : (options.body ?? null),
        signal: options.signal ?? null,
      });
    } catch (error) {
      if (options.signal?.aborted) throw options.signal.reason;
      throw new SandboxError(
        `cannot reach the Docker engine at ${this.address} (${method} ${path}): ${(error as Error).message}. ` +
          'Start dockerd (or `podman system service`) and point DOCKER_HOST or dockerProvider({ socketPath } or { host, tls }) at it.',
        { cause: error, code: 'sandbox_unavailable' },
      );
    }
  }

  /** The error of a non-2xx answer, with the engine's own message; a 429 carries its `Retry-After`. */
  private failure(
    method: string,
    path: string,
    status: number,
    body: Buffer,
    headers: Record<string, string | string[] | undefined>,
  ): SandboxError {
    let message = body.toString();
    try {
      message = (JSON.parse(message) as { message?: string | undefined }).message ?? message;
    } catch {
      // plain-text error
    }
    if (status === 429) {
      return new SandboxRateLimited(
        `Docker ${method} ${path} at ${this.address} was refused for now (429): ${message.trim()}`,
        { data: { status, method, path }, retryAfterMs: retryAfterMs(headers['retry-after']) },
      );
    }
    return new SandboxError(`Docker ${method} ${path} failed (${status}): ${message.trim()}`, {
      data: { status, method, path },
      code: status === 404 ? 'not_found' : 'sandbox_error',
    });
  }

  private async raw(method: string, path: string, options: RequestOptions = {}): Promise<EngineResponse> {
    const res = await this.send(method, path, options);
    const cap = options.maxBytes ?? MAX_RESPONSE_BYTES;
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length;
      if (size > cap) {
        res.body.destroy();
        throw new SandboxError(`Docker ${method} ${path}: the response is larger than ${cap} bytes`, {
          code: 'response_too_large',
          data: { method, path, maxBytes: cap },
        });
      }
      chunks.push(chunk as Buffer);
    }
    const body = Buffer.concat(chunks);
    const ok = options.ok ?? [];
    if ((res.statusCode < 200 || res.statusCode >= 300) && !ok.includes(res.statusCode)) {
      throw this.failure(method, path, res.statusCode, body, res.headers);
    }
    return { status: res.statusCode, headers: res.headers, body };
  }

  /** A versioned API call. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<EngineResponse> {
    const version = await this.apiVersion(options.signal);
    return this.raw(method, `/v${version}${path}`, options);
  }

  /**
   * A versioned call whose body is handed over as a stream (an image export, a pull's progress): a
   * non-2xx answer is read and thrown as for `request`.
   */
  async stream(method: string, path: string, options: RequestOptions = {}): Promise<Readable> {
    const version = await this.apiVersion(options.signal);
    const res = await this.send(method, `/v${version}${path}`, options);
    if (res.statusCode >= 200 && res.statusCode < 300) return res.body;
    throw this.failure(method, path, res.statusCode, Buffer.from(await res.body.arrayBuffer()), res.headers);
  }

  /** Send a request and parse the answer as JSON. */
  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const res = await this.request(method, path, options);
    return (res.body.length === 0 ? undefined : JSON.parse(res.body.toString())) as T;
  }

  /**
   * Start an exec attached and hand each demultiplexed frame (1 = stdout, 2 = stderr) to `onFrame`.
   * Resolves when the engine closes the stream, i.e. when the process has exited.
   */
  async attachExec(
    execId: string,
    onFrame: (stream: number, payload: Buffer) => void,
    signal?: AbortSignal,
  ): Promise<void> {
    const version = await this.apiVersion(signal);
    let res: Dispatcher.ResponseData;
    try {
      res = await this.client.request({
        method: 'POST',
        path: `/v${version}/exec/${execId}/start`,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ Detach: false, Tty: false }),
        signal: signal ?? null,
      });
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      throw new SandboxError(`exec start failed at ${this.address}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    if (res.statusCode !== 200) {
      const text = Buffer.from(await res.body.arrayBuffer()).toString();
      throw new SandboxError(`exec start failed (${res.statusCode}): ${text.trim()}`);
    }
    let pending: Buffer = Buffer.alloc(0);
    try {
      for await (const chunk of res.body) {
        pending = pending.length === 0 ? (chunk as Buffer) : Buffer.concat([pending, chunk as Buffer]);
        // Frame: [stream, 0, 0, 0, size (uint32 BE)] + payload.
        while (pending.length >= 8) {
          const size = pending.readUInt32BE(4);
          if (pending.length < 8 + size) break;
          onFrame(pending[0]!, pending.subarray(8, 8 + size));
          pending = pending.subarray(8 + size);
        }
      }
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      throw new SandboxError(`exec stream from ${this.address} broke: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }

  /** Close the connections to the engine. */
  close(): Promise<void> {
    return this.client.close();
  }
}
