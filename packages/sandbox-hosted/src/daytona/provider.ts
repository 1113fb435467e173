/**
 * `daytonaProvider`: sandboxes at Daytona through its official SDK (`@daytonaio/sdk`). A sandbox is created
 * from a snapshot with the run's labels as Daytona labels, `ttlMinutes` (wall-clock since creation, whatever
 * its state) as the server-side lifetime and auto-stop off (an agent thinking for a while is not idle
 * work to stop); each command runs in a Daytona session of its own, which reports stdout and stderr apart;
 * files move through the toolbox's bulk upload and download.
 */

import { Daytona, type DaytonaConfig, type Sandbox as DaytonaSandbox } from '@daytonaio/sdk';
import { ConfigError, SandboxError, VimeError } from '@vime/core';
import { retryAfterMs, shellJoin, shellQuote } from '@vime/core/utils';
import { RUN_LABEL } from '@vime/sandbox';
import { HostedRateLimitError } from '../errors.js';
import {
  type HostedProvider,
  type HostedProviderOptions,
  hostedProvider,
  type VendorAdapter,
} from '../provider.js';
import type { HostedSession, SessionRunOptions } from '../sandbox.js';
import { raceAbort, vendorCall } from '../vendor-call.js';

/** Daytona documents sandbox creation at 600 per 60 s: the wait a 429 without `Retry-After` implies. */
export const DAYTONA_RATE_WINDOW_MS = 60_000;

/**
 * Every command runs in a Daytona session of its own: a session is one shell whose commands run one after
 * another, so a shared one would queue a timeout's kill sweep (and any concurrent exec) behind the command.
 */
let sessionSeq = 0;
/** Largest stdin passed inline (base64 in the command line, which a session command has no other way to get). */
const MAX_INLINE_STDIN = 1 << 20;

/** Options of `daytonaProvider`. */
export interface DaytonaProviderOptions extends HostedProviderOptions {
  /** API key (default the `DAYTONA_API_KEY` environment variable). */
  apiKey?: string | undefined;
  /** API address (default Daytona's, or `DAYTONA_API_URL`). */
  apiUrl?: string | undefined;
  /** Region (default `DAYTONA_TARGET`, else the organization's default). */
  target?: string | undefined;
  /** Snapshot when a spec names no `image` (default: Daytona's default snapshot). */
  snapshot?: string | undefined;
  /** Timeout of one API request (default the SDK's). */
  requestTimeoutMs?: number | undefined;
  /** Further `DaytonaConfig` fields passed to the SDK as they are (e.g. `useDeprecatedPolling`). */
  sdk?: Partial<DaytonaConfig> | undefined;
}

function header(headers: unknown, name: string): string | undefined {
  if (headers === null || typeof headers !== 'object') return undefined;
  const h = headers as { get?: (n: string) => unknown } & Record<string, unknown>;
  const value = typeof h.get === 'function' ? h.get(name) : (h[name] ?? h[name.toLowerCase()]);
  return typeof value === 'string' || typeof value === 'number' ? String(value) : undefined;
}

/** Maps what the SDK threw to a typed error: a 429 becomes a `HostedRateLimitError` with its `Retry-After`. */
function rethrow(operation: string, error: unknown): never {
  const e = error as { name?: string; statusCode?: number; headers?: unknown; message?: string };
  if (e?.statusCode === 429 || e?.name === 'DaytonaRateLimitError') {
    const after = retryAfterMs(header(e.headers, 'retry-after'));
    throw new HostedRateLimitError(
      'daytona',
      operation,
      after ?? DAYTONA_RATE_WINDOW_MS,
      after === undefined ? 'documented-window' : 'vendor',
      error,
    );
  }
  if (VimeError.isInstance(error) || e?.name === 'AbortError') throw error;
  throw new SandboxError(`daytona ${operation}: ${e?.message ?? String(error)}`, {
    code: e?.statusCode === 404 || e?.name === 'DaytonaNotFoundError' ? 'not_found' : 'sandbox_error',
    cause: error,
  });
}

const call = vendorCall(rethrow);

class DaytonaSession implements HostedSession {
  constructor(readonly sandbox: DaytonaSandbox) {}

  get vendorId(): string {
    return this.sandbox.id;
  }

  async run(argv: readonly string[], options: SessionRunOptions): Promise<number> {
    // Each command runs in a child `sh` of its own, with its cwd and env.
    const env = Object.entries(options.env).map(([k, v]) => `${k}=${v}`);
    let command = shellJoin([
      'sh',
      '-c',
      'cd -- "$1" || exit 126; shift; exec "$@"',
      'sh',
      options.cwd,
      'env',
      ...env,
      ...argv,
    ]);
    if (options.stdin === undefined) command += ' < /dev/null';
    else {
      if (options.stdin.length > MAX_INLINE_STDIN) {
        throw new SandboxError(
          `daytona exec: stdin of ${options.stdin.length} bytes is over the ${MAX_INLINE_STDIN}-byte inline limit; write it with sandbox.writeFile and redirect the command from that file`,
          { code: 'invalid_argument' },
        );
      }
      command = `printf %s ${shellQuote(Buffer.from(options.stdin).toString('base64'))} | base64 -d | ${command}`;
    }
    const session = `vime-${process.pid}-${++sessionSeq}`;
    await call('exec', () => raceAbort(this.sandbox.process.createSession(session), options.signal));
    let result: Awaited<ReturnType<DaytonaSandbox['process']['executeSessionCommand']>>;
    try {
      result = await call('exec', () =>
        raceAbort(
          this.sandbox.process.executeSessionCommand(session, { command, runAsync: false }),
          options.signal,
        ),
      );
    } finally {
      void this.sandbox.process.deleteSession(session).catch(() => {});
    }
    if (result.stdout) options.onStdout(Buffer.from(result.stdout));
    if (result.stderr) options.onStderr(Buffer.from(result.stderr));
    return result.exitCode ?? -1;
  }

  async writeFile(path: string, content: Uint8Array, signal: AbortSignal): Promise<void> {
    await call('writeFile', () => raceAbort(this.sandbox.fs.uploadFile(Buffer.from(content), path), signal));
  }

  async readFile(path: string, maxBytes: number, signal: AbortSignal): Promise<Uint8Array | undefined> {
    const info = await call('readFile', () => raceAbort(this.sandbox.fs.getFileDetails(path), signal));
    if (info.size > maxBytes) return undefined;
    const bytes = await call('readFile', () => raceAbort(this.sandbox.fs.downloadFile(path), signal));
    return bytes.length > maxBytes ? undefined : bytes;
  }

  async isAlive(signal: AbortSignal): Promise<boolean> {
    try {
      await raceAbort(this.sandbox.refreshData(), signal);
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode === 404) return false;
      rethrow('isAlive', error);
    }
    return this.sandbox.state === 'started';
  }

  async kill(): Promise<void> {
    try {
      await this.sandbox.delete();
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode === 404) return;
      rethrow('kill', error);
    }
  }
}

/** Sandboxes at Daytona (its `@daytonaio/sdk`): create from a snapshot, commands in a session, `ttlMinutes` as the lifetime. */
export function daytonaProvider(options: DaytonaProviderOptions = {}): HostedProvider {
  const apiKey = options.apiKey ?? process.env.DAYTONA_API_KEY;
  if (!apiKey) {
    throw new ConfigError(
      'daytonaProvider apiKey: none given and DAYTONA_API_KEY is not set; pass { apiKey } or export DAYTONA_API_KEY (https://app.daytona.io/dashboard/keys)',
    );
  }
  const config: DaytonaConfig = { ...options.sdk, apiKey };
  if (options.apiUrl !== undefined) config.apiUrl = options.apiUrl;
  if (options.target !== undefined) config.target = options.target;
  if (options.requestTimeoutMs !== undefined) config.requestTimeoutMs = options.requestTimeoutMs;
  let client: Daytona | undefined;
  // Built on first use: the SDK connects its event stream when constructed.
  const daytona = () => {
    client ??= new Daytona(config);
    return client;
  };
  const adapter: VendorAdapter = {
    vendor: 'daytona',
    async create(request) {
      const snapshot = request.image ?? options.snapshot;
      const sandbox = await call('create', () =>
        daytona().create({
          ...(snapshot === undefined ? {} : { snapshot }),
          envVars: request.env,
          labels: request.labels,
          // Wall-clock lifetime at Daytona, in whole minutes (rounded up); no idle auto-stop.
          ttlMinutes: Math.max(1, Math.ceil(request.lifetimeMs / 60_000)),
          autoStopInterval: 0,
          ephemeral: true,
        }),
      );
      return new DaytonaSession(sandbox);
    },
    async list(run) {
      const found = [];
      try {
        for await (const s of daytona().list(run === undefined ? {} : { labels: { [RUN_LABEL]: run } })) {
          found.push({
            vendorId: s.id,
            labels: s.labels ?? {},
            createdAt: Date.parse(s.createdAt ?? '') || 0,
          });
        }
      } catch (error) {
        rethrow('list', error);
      }
      return found;
    },
    async remove(vendorId) {
      try {
        const sandbox = await daytona().get(vendorId);
        await sandbox.delete();
      } catch (error) {
        if ((error as { statusCode?: number }).statusCode === 404) return;
        rethrow('kill', error);
      }
    },
  };
  return hostedProvider(adapter, options);
}
