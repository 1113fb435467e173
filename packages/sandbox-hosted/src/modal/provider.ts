/**
 * `modalProvider`: sandboxes at Modal through its official JavaScript SDK (`modal`, 0.x). A sandbox is
 * created in one Modal app from a registry image, with the run's labels as Modal tags and the spec's
 * lifetime as Modal's own sandbox timeout (Modal ends it then, whatever happens to this process); commands
 * go through the sandbox's task command router (`sandbox.exec`), and files through commands too (`cat`),
 * since the SDK's `filesystem` drives a tool inside Modal's containers whose protocol is not published;
 * `reapOrphans` lists the app's sandboxes by their `vime.run` tag.
 */
import { ConfigError, SandboxError, VimeError } from '@vime/core';
import type { Logger } from '@vime/core/utils';
import { RUN_LABEL } from '@vime/sandbox';
import {
  type App,
  type ContainerProcess,
  type Image,
  ModalClient,
  type ModalClientParams,
  type Sandbox as ModalSandbox,
} from 'modal';
import { HostedRateLimitError } from '../errors.js';
import {
  type HostedProvider,
  type HostedProviderOptions,
  hostedProvider,
  type VendorAdapter,
} from '../provider.js';
import type { HostedSession, SessionRunOptions } from '../sandbox.js';
import { raceAbort, vendorCall } from '../vendor-call.js';
import { RESOURCE_EXHAUSTED, retryAfterFromStatusDetails } from './wire.js';

/** gRPC's `NOT_FOUND`. */
const NOT_FOUND = 5;

/** The gRPC status of an error the SDK threw (its gRPC library's `ClientError`, which it does not export), if it is one. */
function grpcCode(error: unknown): number | undefined {
  const e = error as { '@@nice-grpc:ClientError'?: boolean; code?: unknown } | null;
  return e?.['@@nice-grpc:ClientError'] === true && typeof e.code === 'number' ? e.code : undefined;
}

/** Modal's documented sandbox creation rate (30 per second): the wait a refusal without a retry policy implies. */
export const MODAL_RATE_WINDOW_MS = 1000;

/** Options of `modalProvider`. */
export interface ModalProviderOptions extends HostedProviderOptions {
  /** Token id (default `MODAL_TOKEN_ID`, else the active profile of `~/.modal.toml`). */
  tokenId?: string | undefined;
  /** Token secret (default `MODAL_TOKEN_SECRET`, else the active profile). */
  tokenSecret?: string | undefined;
  /** The Modal app the sandboxes are created in (made if missing; default `vime-sandboxes`). */
  app?: string | undefined;
  /** Registry image when a spec names no `image` (default `python:3.12-slim`). */
  image?: string | undefined;
  /** Modal environment (default the profile's). */
  environment?: string | undefined;
  /** API address (default Modal's, or `MODAL_SERVER_URL`); a loopback address is dialled in plaintext. */
  serverUrl?: string | undefined;
  /**
   * How long the SDK itself may wait out Modal's rate limits, in seconds (default 0: a refusal surfaces at
   * once as a `HostedRateLimitError`, so a fleet's limiter decides when to try again).
   */
  sdkThrottleWaitSecs?: number | undefined;
}

type Middleware = NonNullable<ModalClientParams['grpcMiddleware']>[number];

/** The retry-after (ms) Modal sent with a refused call, by the error the SDK threw for it. */
const retryAfterOf = new WeakMap<object, number>();

/** Reads Modal's `RPCRetryPolicy` off a refused call's trailer and remembers it with the error. */
const retryPolicyMiddleware: Middleware = async function* (call, options) {
  let details: Uint8Array | undefined;
  try {
    return yield* call.next(call.request, {
      ...options,
      onTrailer: (trailer) => {
        const raw = trailer.get('grpc-status-details-bin');
        if (raw instanceof Uint8Array) details = raw;
        options.onTrailer?.(trailer);
      },
    });
  } catch (error) {
    const after = retryAfterFromStatusDetails(details);
    if (after !== undefined && error !== null && typeof error === 'object')
      retryAfterOf.set(error as object, after);
    throw error;
  }
};

/** Maps what the SDK threw to a typed error: `RESOURCE_EXHAUSTED` becomes a `HostedRateLimitError`. */
function rethrow(operation: string, error: unknown): never {
  if (grpcCode(error) === RESOURCE_EXHAUSTED) {
    const after = retryAfterOf.get(error as object);
    throw new HostedRateLimitError(
      'modal',
      operation,
      after ?? MODAL_RATE_WINDOW_MS,
      after === undefined ? 'documented-window' : 'vendor',
      error,
    );
  }
  if (VimeError.isInstance(error) || (error instanceof Error && error.name === 'AbortError')) throw error;
  const notFound =
    grpcCode(error) === NOT_FOUND || (error instanceof Error && error.name === 'NotFoundError');
  throw new SandboxError(`modal ${operation}: ${error instanceof Error ? error.message : String(error)}`, {
    code: notFound ? 'not_found' : 'sandbox_error',
    cause: error,
  });
}

const call = vendorCall(rethrow);

/** Reads a process stream to its end, passing each chunk on. */
async function drain(
  stream: ReadableStream<Uint8Array>,
  onChunk: (chunk: Uint8Array) => void,
): Promise<void> {
  for await (const chunk of stream) onChunk(chunk);
}

/** Runs `argv` to its end; rejects with `signal`'s reason when it aborts first. */
async function runIn(
  sandbox: ModalSandbox,
  argv: readonly string[],
  options: SessionRunOptions,
): Promise<number> {
  const proc: ContainerProcess<Uint8Array> = await call('exec', () =>
    raceAbort(
      sandbox.exec([...argv], { mode: 'binary', workdir: options.cwd, env: options.env }),
      options.signal,
    ),
  );
  const done = Promise.all([drain(proc.stdout, options.onStdout), drain(proc.stderr, options.onStderr)]);
  const work = (async () => {
    // A command reads end-of-file at once unless it was given stdin.
    const writer = proc.stdin.getWriter();
    if (options.stdin !== undefined && options.stdin.length > 0) await writer.write(options.stdin);
    await writer.close();
    const code = await proc.wait();
    await done;
    return code;
  })();
  try {
    return await call('exec', () => raceAbort(work, options.signal));
  } finally {
    if (options.signal.aborted) {
      void proc.stdout.cancel().catch(() => {});
      void proc.stderr.cancel().catch(() => {});
      void work.catch(() => {});
    }
  }
}

class ModalSession implements HostedSession {
  constructor(readonly sandbox: ModalSandbox) {}

  get vendorId(): string {
    return this.sandbox.sandboxId;
  }

  run(argv: readonly string[], options: SessionRunOptions): Promise<number> {
    return runIn(this.sandbox, argv, options);
  }

  async writeFile(path: string, content: Uint8Array, signal: AbortSignal): Promise<void> {
    let err = '';
    const code = await runIn(
      this.sandbox,
      ['sh', '-c', 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', 'sh', path],
      {
        cwd: '/',
        env: {},
        stdin: content,
        signal,
        onStdout: () => {},
        onStderr: (c) => {
          err += Buffer.from(c).toString();
        },
      },
    );
    if (code !== 0) throw new SandboxError(`modal writeFile ${path}: ${err.trim()}`);
  }

  async readFile(path: string, maxBytes: number, signal: AbortSignal): Promise<Uint8Array | undefined> {
    const chunks: Uint8Array[] = [];
    let size = 0;
    let err = '';
    // One byte past the cap tells "larger than the cap" from "exactly the cap".
    const code = await runIn(
      this.sandbox,
      ['sh', '-c', 'head -c "$2" -- "$1"', 'sh', path, String(maxBytes + 1)],
      {
        cwd: '/',
        env: {},
        signal,
        onStdout: (c) => {
          size += c.length;
          chunks.push(c);
        },
        onStderr: (c) => {
          err += Buffer.from(c).toString();
        },
      },
    );
    if (code !== 0) {
      throw new SandboxError(`modal readFile ${path}: ${err.trim()}`, {
        code: /No such file/.test(err) ? 'not_found' : 'sandbox_error',
      });
    }
    return size > maxBytes ? undefined : Buffer.concat(chunks);
  }

  async isAlive(signal: AbortSignal): Promise<boolean> {
    try {
      return (await raceAbort(this.sandbox.poll(), signal)) === null;
    } catch (error) {
      if (grpcCode(error) === NOT_FOUND) return false;
      rethrow('isAlive', error);
    }
  }

  async kill(): Promise<void> {
    try {
      await this.sandbox.terminate();
    } catch (error) {
      if (!(grpcCode(error) === NOT_FOUND)) rethrow('kill', error);
    } finally {
      this.sandbox.detach();
    }
  }
}

/** Modal's logger interface, onto the provider's (the SDK's own would print to the console). */
function modalLogger(logger: Logger | undefined): NonNullable<ModalClientParams['logger']> {
  const at =
    (level: keyof Logger) =>
    (message: string, ...args: unknown[]) =>
      logger?.[level]?.(`modal: ${message}`, args.length > 0 ? { args } : undefined);
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/** The SDK reads its server address from the environment when the client is made: set it for that moment. */
function newClient(params: ModalClientParams, serverUrl: string | undefined): ModalClient {
  if (serverUrl === undefined) return new ModalClient(params);
  const before = process.env.MODAL_SERVER_URL;
  process.env.MODAL_SERVER_URL = serverUrl;
  try {
    return new ModalClient(params);
  } finally {
    if (before === undefined) delete process.env.MODAL_SERVER_URL;
    else process.env.MODAL_SERVER_URL = before;
  }
}

/** Sandboxes at Modal (its `modal` SDK): a registry image in one app, the task command router for commands, Modal's timeout as the lifetime. */
export function modalProvider(options: ModalProviderOptions = {}): HostedProvider {
  const tokenId = options.tokenId ?? process.env.MODAL_TOKEN_ID;
  const tokenSecret = options.tokenSecret ?? process.env.MODAL_TOKEN_SECRET;
  if ((tokenId === undefined) !== (tokenSecret === undefined)) {
    throw new ConfigError(
      `modalProvider ${tokenId === undefined ? 'tokenId' : 'tokenSecret'}: only one of the pair was given; pass { tokenId, tokenSecret } or export MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (https://modal.com/settings/tokens)`,
    );
  }
  const appName = options.app ?? 'vime-sandboxes';
  const params: ModalClientParams = {
    ...(tokenId === undefined ? {} : { tokenId, tokenSecret: tokenSecret as string }),
    ...(options.environment === undefined ? {} : { environment: options.environment }),
    maxThrottleWaitSecs: options.sdkThrottleWaitSecs ?? 0,
    logger: modalLogger(options.logger),
    grpcMiddleware: [retryPolicyMiddleware],
  };
  let client: ModalClient | undefined;
  const modal = () => {
    // Made on first use: without credentials the SDK refuses at construction, which a provider that is
    // never used should not.
    client ??= newClient(params, options.serverUrl);
    return client;
  };
  let app: Promise<App> | undefined;
  const images = new Map<string, Promise<Image>>();
  const appOf = async () => {
    app ??= call('app', () => modal().apps.fromName(appName, { createIfMissing: true }));
    return app.catch((error) => {
      app = undefined;
      throw error;
    });
  };
  const imageOf = (tag: string, inApp: App) => {
    let image = images.get(tag);
    if (!image) {
      image = call('image', () => modal().images.fromRegistry(tag).build(inApp));
      images.set(tag, image);
      image.catch(() => images.delete(tag));
    }
    return image;
  };

  const adapter: VendorAdapter = {
    vendor: 'modal',
    async create(request) {
      const inApp = await appOf();
      const image = await imageOf(request.image ?? options.image ?? 'python:3.12-slim', inApp);
      const sandbox = await call('create', () =>
        modal().sandboxes.create(inApp, image, {
          env: request.env,
          tags: request.labels,
          // Modal's own timeout, in whole seconds (rounded up): Modal ends the sandbox then.
          timeoutMs: Math.max(1, Math.ceil(request.lifetimeMs / 1000)) * 1000,
        }),
      );
      return new ModalSession(sandbox);
    },
    async list(run) {
      const inApp = await appOf();
      const found = [];
      const listing = modal().sandboxes.experimentalList({
        appId: inApp.appId,
        ...(run === undefined ? {} : { tags: { [RUN_LABEL]: run } }),
      });
      try {
        for await (const s of listing) {
          // A sandbox that ended between the listing and this read is no longer there to reap.
          const labels = await s.getTags().catch((error: unknown) => {
            if (grpcCode(error) === NOT_FOUND) return undefined;
            throw error;
          });
          s.detach();
          // Modal's listing carries its creation time, but the SDK does not pass it on: the reaper reads
          // `vime.created` from the tags instead (0 for a sandbox without it: as old as can be).
          if (labels !== undefined) found.push({ vendorId: s.sandboxId, labels, createdAt: 0 });
        }
      } catch (error) {
        rethrow('list', error);
      }
      return found;
    },
    async remove(vendorId) {
      const sandbox = await call('kill', () => modal().sandboxes.fromId(vendorId));
      await new ModalSession(sandbox).kill();
    },
  };
  return hostedProvider(adapter, options);
}
