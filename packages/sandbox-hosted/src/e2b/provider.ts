/**
 * `e2bProvider`: sandboxes at E2B through its official SDK (`e2b`). A sandbox is created from a template
 * with the run's labels as its metadata and the spec's lifetime as E2B's own timeout (the sandbox is
 * killed by E2B when it ends, whatever happens to this process); commands go through envd's process
 * service, files through envd's `/files`; `reapOrphans` lists sandboxes by their `vime.run` metadata.
 */
import { ConfigError, SandboxError, VimeError } from '@vime/core';
import { shellJoin } from '@vime/core/utils';
import { RUN_LABEL } from '@vime/sandbox';
import { CommandExitError, E2B, type E2BClientOpts, type Sandbox as E2bSandbox } from 'e2b';
import { HostedRateLimitError } from '../errors.js';
import {
  type HostedProvider,
  type HostedProviderOptions,
  hostedProvider,
  type VendorAdapter,
} from '../provider.js';
import type { HostedSession, SessionRunOptions } from '../sandbox.js';
import { vendorCall } from '../vendor-call.js';

/** E2B documents 5 API requests per second: the wait a 429 implies when the SDK does not pass Retry-After on. */
export const E2B_RATE_WINDOW_MS = 1000;

/** Options of `e2bProvider`. */
export interface E2bProviderOptions extends HostedProviderOptions {
  /** API key (default the `E2B_API_KEY` environment variable). */
  apiKey?: string | undefined;
  /** Template when a spec names no `image` (default `base`). */
  template?: string | undefined;
  /** API address (default E2B's, or `E2B_API_URL`). */
  apiUrl?: string | undefined;
  /** envd address for every sandbox (self-hosted E2B, or a stand-in); default per sandbox from E2B's domain. */
  sandboxUrl?: string | undefined;
  /** E2B domain (default `e2b.app`, or `E2B_DOMAIN`). */
  domain?: string | undefined;
  /** Timeout of one API request (default 60 s). */
  requestTimeoutMs?: number | undefined;
  /**
   * How often the SDK itself retries a 429 that carries `Retry-After` (default 0: the 429 surfaces at once
   * as a `HostedRateLimitError`, so a fleet's limiter decides when to try again).
   */
  sdkRetries?: number | undefined;
}

/** Maps what the SDK threw to a typed error: a rate limit becomes a `HostedRateLimitError`. */
function rethrow(operation: string, error: unknown): never {
  if (error instanceof Error && error.name === 'RateLimitError') {
    // The SDK's RateLimitError carries neither the response nor its Retry-After: use the documented window.
    throw new HostedRateLimitError('e2b', operation, E2B_RATE_WINDOW_MS, 'documented-window', error);
  }
  if (VimeError.isInstance(error) || (error instanceof Error && error.name === 'AbortError')) throw error;
  const name = error instanceof Error ? error.name : 'Error';
  throw new SandboxError(`e2b ${operation}: ${error instanceof Error ? error.message : String(error)}`, {
    code: name === 'NotFoundError' || name === 'FileNotFoundError' ? 'not_found' : 'sandbox_error',
    cause: error,
  });
}

/** The object without its undefined fields (the SDK's option types are exact). */
function definedOnly<T extends object>(value: T): { [K in keyof T]: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as {
    [K in keyof T]: Exclude<T[K], undefined>;
  };
}

const call = vendorCall(rethrow);

class E2bSession implements HostedSession {
  constructor(readonly sandbox: E2bSandbox) {}

  get vendorId(): string {
    return this.sandbox.sandboxId;
  }

  async run(argv: readonly string[], options: SessionRunOptions): Promise<number> {
    const handle = await call('exec', () =>
      this.sandbox.commands.run(shellJoin(argv), {
        background: true,
        cwd: options.cwd,
        envs: options.env,
        stdin: options.stdin !== undefined,
        // The command's own timeout is enforced inside the sandbox; the SDK's would only cut the stream.
        timeoutMs: 0,
        signal: options.signal,
        onStdout: (text: string) => options.onStdout(Buffer.from(text)),
        onStderr: (text: string) => options.onStderr(Buffer.from(text)),
      }),
    );
    const abort = () => void handle.kill().catch(() => {});
    options.signal.addEventListener('abort', abort, { once: true });
    try {
      if (options.stdin !== undefined) {
        if (options.stdin.length > 0) await call('exec', () => handle.sendStdin(options.stdin as Uint8Array));
        await call('exec', () => handle.closeStdin());
      }
      const result = await handle.wait();
      return result.exitCode;
    } catch (error) {
      if (error instanceof CommandExitError) return error.exitCode;
      if (options.signal.aborted) throw options.signal.reason;
      rethrow('exec', error);
    } finally {
      options.signal.removeEventListener('abort', abort);
    }
  }

  async writeFile(path: string, content: Uint8Array, signal: AbortSignal): Promise<void> {
    await call('writeFile', () =>
      this.sandbox.files.write(path, new Blob([content as Uint8Array<ArrayBuffer>]), {
        useOctetStream: true,
        signal,
      }),
    );
  }

  async readFile(path: string, maxBytes: number, signal: AbortSignal): Promise<Uint8Array | undefined> {
    const stream = await call('readFile', () => this.sandbox.files.read(path, { format: 'stream', signal }));
    const chunks: Uint8Array[] = [];
    let size = 0;
    const reader = stream.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        size += value.length;
        if (size > maxBytes) return undefined;
        chunks.push(value);
      }
    } finally {
      await reader.cancel().catch(() => {});
    }
    return Buffer.concat(chunks);
  }

  isAlive(signal: AbortSignal): Promise<boolean> {
    return call('isAlive', () => this.sandbox.isRunning({ signal }));
  }

  async kill(): Promise<void> {
    await call('kill', () => this.sandbox.kill());
  }
}

/** Sandboxes at E2B (its `e2b` SDK): create from a template, envd for commands and files, E2B's timeout as the lifetime. */
export function e2bProvider(options: E2bProviderOptions = {}): HostedProvider {
  const apiKey = options.apiKey ?? process.env.E2B_API_KEY;
  if (!apiKey) {
    throw new ConfigError(
      'e2bProvider apiKey: none given and E2B_API_KEY is not set; pass { apiKey } or export E2B_API_KEY (https://e2b.dev/dashboard?tab=keys)',
    );
  }
  const connection: E2BClientOpts = definedOnly({
    apiKey,
    apiUrl: options.apiUrl,
    sandboxUrl: options.sandboxUrl,
    domain: options.domain,
    requestTimeoutMs: options.requestTimeoutMs,
    retries: options.sdkRetries ?? 0,
  });
  // A client with its connection bound: every call, static ones included, goes where it says.
  const client = new E2B(connection);
  const adapter: VendorAdapter = {
    vendor: 'e2b',
    async create(request) {
      const sandbox = await call('create', () =>
        client.Sandbox.create(
          request.image ?? options.template ?? 'base',
          // No abort signal: a create cut short after E2B made the sandbox would leave it unknown here. The
          // request timeout bounds it, and the provider kills the sandbox if the caller aborted meanwhile.
          { metadata: request.labels, envs: request.env, timeoutMs: request.lifetimeMs },
        ),
      );
      return new E2bSession(sandbox);
    },
    async list(run, signal) {
      const paginator = client.Sandbox.list({
        query: run === undefined ? {} : { metadata: { [RUN_LABEL]: run } },
      });
      const found = [];
      while (paginator.hasNext) {
        for (const s of await call('list', () => paginator.nextItems(definedOnly({ signal })))) {
          found.push({ vendorId: s.sandboxId, labels: s.metadata ?? {}, createdAt: s.startedAt.getTime() });
        }
      }
      return found;
    },
    async remove(vendorId, signal) {
      await call('kill', () => client.Sandbox.kill(vendorId, definedOnly({ signal })));
    },
  };
  return hostedProvider(adapter, options);
}
