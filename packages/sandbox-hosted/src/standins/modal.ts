/**
 * STAND-IN for Modal's servers, for tests: a real HTTP/2 gRPC server on loopback (`@grpc/grpc-js`) that
 * serves the calls the `modal` SDK (0.11.1) makes for a V2 sandbox, its default, with the messages of
 * Modal's published protos (see `../modal/wire.ts` for the file and commit):
 *
 * - `modal.client.ModalClient`: `AuthTokenGet`, `EnvironmentGetOrCreate`, `AppGetOrCreate`,
 *   `ImageGetOrCreate` (answered as built, so `ImageJoinStreaming` is not called), `SandboxCreateV2`
 *   (tags, env as a `SecretSource`, `timeout_secs` as the sandbox's lifetime, the command router's address
 *   and JWT in the answer), `SandboxWaitV2`, `SandboxTerminateV2`, `SandboxListV2` (by app and tags,
 *   paged by `before_timestamp`), `SandboxTagsGetV2`, `SandboxGetCommandRouterAccess`;
 * - `modal.task_command_router.TaskCommandRouter` (the same port): `TaskExecStart`, the
 *   `TaskExecStdioRead` stream (by offset), `TaskExecStdinWrite` (by offset, `eof`), `TaskExecWait`.
 *
 * Credentials are checked as Modal does (`x-modal-token-id`/`-secret`, then `x-modal-auth-token`; the
 * router's `authorization: Bearer`). Sandbox creation is rate limited (a token bucket) and refused with
 * `RESOURCE_EXHAUSTED` carrying a `modal.client.RPCRetryPolicy` in `grpc-status-details-bin`. The SDK dials
 * loopback in plaintext (its server URL is `http://127.0.0.1:…`; the router's `https://127.0.0.1:…` is
 * dialled insecure because the server is local). Commands run as real local processes under bubblewrap
 * in a temp root per sandbox (`LocalBox`). Not Modal: no images are pulled, the host's `/usr` is the
 * sandbox's.
 */
import { constants } from 'node:os';
import * as grpc from '@grpc/grpc-js';
import { decodeModal, encodeModal, RESOURCE_EXHAUSTED, RETRY_POLICY_TYPE_URL } from '../modal/wire.js';
import { LocalBox, RateLimit, standinId } from './local-box.js';

/** Options of the Modal stand-in. */
export interface ModalStandinOptions {
  tokenId?: string | undefined;
  tokenSecret?: string | undefined;
  /** Sandbox creations per second before `RESOURCE_EXHAUSTED` (default 30, as documented for Modal). */
  createsPerSecond?: number | undefined;
  /** The `retry_after_secs` of a refusal (default 1). */
  retryAfterSeconds?: number | undefined;
}

/** One stand-in Modal sandbox. */
export type ModalBox = LocalBox & {
  appId: string;
  taskId: string;
  /** The registry tag its image was made from. */
  imageTag: string;
  tags: Record<string, string>;
  timeoutSecs: number;
  /** Seconds since the epoch, as Modal lists it. */
  createdAtSecs: number;
};

/** A running Modal stand-in. */
export interface ModalStandin {
  /** The server URL to give the SDK (`MODAL_SERVER_URL`, or `modalProvider({ serverUrl })`). */
  url: string;
  tokenId: string;
  tokenSecret: string;
  boxes: Map<string, ModalBox>;
  /** Sandbox creations refused with `RESOURCE_EXHAUSTED`. */
  rateLimited: number;
  /** Calls answered, by method name. */
  calls: Record<string, number>;
  /** Every `SandboxCreateV2` received: when (ms, `performance.now()`), and whether it was refused. */
  createLog: Array<{ at: number; refused: boolean }>;
  /** Stops the server and kills every stand-in sandbox it started. */
  close(): Promise<void>;
}

interface Exec {
  child: ReturnType<LocalBox['spawn']>;
  out: [Buffer, Buffer];
  closed: boolean;
  code: number | null;
  signal: number | null;
  stdinWritten: number;
  changed: Set<() => void>;
}

type Unary = (req: Record<string, unknown>, md: grpc.Metadata) => Promise<Record<string, unknown>>;
type ServerStream = (req: Record<string, unknown>, call: grpc.ServerWritableStream<Buffer, Buffer>) => void;

const GENERIC_STATUS = { success: 1, terminated: 3, timeout: 4 } as const;

/** A JWT-shaped token with an expiry (the SDK reads `exp` to know when to refresh). */
function jwt(subject: string): string {
  const part = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const exp = Math.floor(Date.now() / 1000) + 24 * 3600;
  return `${part({ alg: 'none', typ: 'JWT' })}.${part({ sub: subject, exp })}.standin`;
}

class RpcError extends Error {
  constructor(
    readonly code: grpc.status,
    message: string,
    readonly metadata?: grpc.Metadata,
  ) {
    super(message);
  }
}

function env(sources: Array<{ env?: { contents?: Record<string, string> } | null }>): Record<string, string> {
  return Object.assign({}, ...sources.map((s) => s.env?.contents ?? {}));
}

/** What the stand-in's handlers share: its state, and lookups that fail as Modal's server does. */
class World {
  readonly limit: RateLimit;
  readonly authToken = jwt('standin-client');
  readonly routerJwt = jwt('standin-router');
  readonly apps = new Map<string, string>();
  readonly images = new Map<string, string>();
  readonly finished = new Map<string, { status: number; exitcode: number }>();
  readonly execs = new Map<string, Exec>();
  routerUrl = '';
  lastCreated = 0;

  constructor(
    readonly state: ModalStandin,
    readonly options: ModalStandinOptions,
  ) {
    this.limit = new RateLimit(options.createsPerSecond ?? 30);
  }

  end(id: string, status: number): void {
    const box = this.state.boxes.get(id);
    if (!box) return;
    box.kill();
    this.state.boxes.delete(id);
    this.finished.set(id, { status, exitcode: status === GENERIC_STATUS.timeout ? 124 : 137 });
  }

  box(id: unknown): ModalBox {
    const found = this.state.boxes.get(String(id));
    if (!found) throw new RpcError(grpc.status.NOT_FOUND, `Sandbox ${String(id)} not found`);
    return found;
  }

  taskBox(taskId: unknown): ModalBox {
    for (const b of this.state.boxes.values()) if (b.taskId === taskId) return b;
    throw new RpcError(grpc.status.NOT_FOUND, `task ${String(taskId)} not found`);
  }

  exec(req: Record<string, unknown>): Exec {
    this.taskBox(req.taskId);
    const found = this.execs.get(`${String(req.taskId)}/${String(req.execId)}`);
    if (!found) throw new RpcError(grpc.status.NOT_FOUND, `exec ${String(req.execId)} not found`);
    return found;
  }

  checkClient(md: grpc.Metadata, method: string): void {
    const ok =
      md.get('x-modal-token-id')[0] === this.state.tokenId &&
      md.get('x-modal-token-secret')[0] === this.state.tokenSecret &&
      (method === 'AuthTokenGet' || md.get('x-modal-auth-token')[0] === this.authToken);
    if (!ok) throw new RpcError(grpc.status.UNAUTHENTICATED, 'invalid Modal credentials');
    this.state.calls[method] = (this.state.calls[method] ?? 0) + 1;
  }

  checkRouter(md: grpc.Metadata, method: string): void {
    if (md.get('authorization')[0] !== `Bearer ${this.routerJwt}`)
      throw new RpcError(grpc.status.UNAUTHENTICATED, 'invalid command router JWT');
    this.state.calls[method] = (this.state.calls[method] ?? 0) + 1;
  }
}

/** `modal.client.ModalClient`: the calls the SDK makes for a V2 sandbox. */
function controlPlane(w: World): Record<string, Unary> {
  return {
    AuthTokenGet: async () => ({ token: w.authToken }),
    EnvironmentGetOrCreate: async (req) => ({
      environmentId: 'en-standin',
      metadata: { name: req.deploymentName || 'main', settings: { imageBuilderVersion: '2025.06' } },
    }),
    AppGetOrCreate: async (req) => {
      const name = String(req.appName);
      if (!w.apps.has(name)) w.apps.set(name, standinId('ap-'));
      return { appId: w.apps.get(name) };
    },
    ImageGetOrCreate: async (req) => {
      const from = ((req.image as { dockerfileCommands: string[] }).dockerfileCommands[0] ?? '').replace(
        /^FROM /,
        '',
      );
      if (!w.images.has(from)) w.images.set(from, standinId('im-'));
      return { imageId: w.images.get(from), result: { status: GENERIC_STATUS.success } };
    },
    SandboxCreateV2: async (req) => {
      const refused = !w.limit.take();
      w.state.createLog.push({ at: performance.now(), refused });
      if (refused) {
        w.state.rateLimited++;
        throw rateLimited(w.options.retryAfterSeconds ?? 1);
      }
      const def = req.definition as { imageId: string; timeoutSecs: number };
      const id = standinId('sb-');
      const tags = Object.fromEntries(
        (req.tags as Array<{ tagName: string; tagValue: string }>).map((t) => [t.tagName, t.tagValue]),
      );
      w.lastCreated = Math.max(Date.now() / 1000, w.lastCreated + 1e-3);
      const timeoutSecs = def.timeoutSecs || 300;
      const made = Object.assign(new LocalBox(id, env(req.secretSources as [])), {
        appId: String(req.appId),
        taskId: standinId('ta-'),
        imageTag: [...w.images].find(([, v]) => v === def.imageId)?.[0] ?? def.imageId,
        tags,
        timeoutSecs,
        createdAtSecs: w.lastCreated,
      });
      made.setLifetime(timeoutSecs * 1000, () => w.end(id, GENERIC_STATUS.timeout));
      w.state.boxes.set(id, made);
      return {
        sandboxId: id,
        taskId: made.taskId,
        commandRouterAccess: { url: w.routerUrl, jwt: w.routerJwt },
      };
    },
    SandboxGetCommandRouterAccess: async (req) => {
      if (req.sandboxId) w.box(req.sandboxId);
      else w.taskBox(req.taskId);
      return { url: w.routerUrl, jwt: w.routerJwt };
    },
    SandboxWaitV2: async (req) => {
      const id = String(req.sandboxId);
      const deadline = Date.now() + Number(req.timeout) * 1000;
      while (!w.finished.has(id) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      if (w.finished.has(id)) return { result: w.finished.get(id) };
      w.box(id);
      return {};
    },
    SandboxTerminateV2: async (req) => {
      const id = String(req.sandboxId);
      if (w.finished.has(id)) return { existingResult: w.finished.get(id) };
      w.box(id);
      w.end(id, GENERIC_STATUS.terminated);
      return {};
    },
    SandboxListV2: async (req) => {
      const want = req.tags as Array<{ tagName: string; tagValue: string }>;
      const before = Number(req.beforeTimestamp) || Number.POSITIVE_INFINITY;
      const listed = [...w.state.boxes.values()]
        .filter((b) => !req.appId || b.appId === req.appId)
        .filter((b) => want.every((t) => b.tags[t.tagName] === t.tagValue))
        .filter((b) => b.createdAtSecs < before)
        .sort((a, b) => b.createdAtSecs - a.createdAtSecs)
        .slice(0, 100);
      return {
        sandboxes: listed.map((b) => ({
          id: b.id,
          createdAt: b.createdAtSecs,
          appId: b.appId,
          tags: Object.entries(b.tags).map(([tagName, tagValue]) => ({ tagName, tagValue })),
        })),
      };
    },
    SandboxTagsGetV2: async (req) => ({
      tags: Object.entries(w.box(req.sandboxId).tags).map(([tagName, tagValue]) => ({ tagName, tagValue })),
    }),
  };
}

/** `modal.task_command_router.TaskCommandRouter`: commands, their stdin and their exit. */
function commandRouter(w: World): Record<string, Unary> {
  return {
    TaskExecStart: async (req) => {
      const b = w.taskBox(req.taskId);
      const argv = req.commandArgs as string[];
      const child = b.spawn(argv[0] ?? 'true', argv.slice(1), {
        cwd: (req.workdir as string) || '/',
        env: { ...(req.env as Record<string, string>), ...env(req.secretSources as []) },
      });
      const e: Exec = {
        child,
        out: [Buffer.alloc(0), Buffer.alloc(0)],
        closed: false,
        code: null,
        signal: null,
        stdinWritten: 0,
        changed: new Set(),
      };
      const notify = () => {
        for (const f of e.changed) f();
      };
      const collect = (fd: 0 | 1, on: boolean) => (d: Buffer) => {
        if (on) e.out[fd] = Buffer.concat([e.out[fd], d]);
        notify();
      };
      child.stdout?.on('data', collect(0, req.stdoutConfig === 1));
      child.stderr?.on('data', collect(1, req.stderrConfig === 1));
      child.stdin?.on('error', () => {});
      child.on('error', () => {});
      child.once('close', (code, signal) => {
        e.closed = true;
        e.code = code;
        e.signal = signal ? (constants.signals[signal] ?? 9) : null;
        notify();
      });
      w.execs.set(`${String(req.taskId)}/${String(req.execId)}`, e);
      return {};
    },
    TaskExecStdinWrite: async (req) => {
      const e = w.exec(req);
      const data = req.data as Uint8Array;
      const offset = Number(req.offset);
      // A retried write (same offset) is written once.
      const fresh = data.subarray(Math.max(0, e.stdinWritten - offset));
      if (offset + data.length > e.stdinWritten) {
        e.child.stdin?.write(fresh);
        e.stdinWritten = offset + data.length;
      }
      if (req.eof) e.child.stdin?.end();
      return {};
    },
    TaskExecWait: async (req) => {
      const e = w.exec(req);
      if (!e.closed) {
        await new Promise<void>((resolve) => {
          const f = () => {
            if (!e.closed) return;
            e.changed.delete(f);
            resolve();
          };
          e.changed.add(f);
        });
      }
      return e.signal !== null ? { signal: e.signal } : { code: e.code ?? -1 };
    },
  };
}

/** `TaskExecStdioRead`: a command's stdout or stderr from an offset, streamed until it exits. */
function stdioRead(w: World): ServerStream {
  return (req, call) => {
    let e: Exec;
    try {
      e = w.exec(req);
    } catch (error) {
      call.emit('error', toServiceError(error));
      return;
    }
    const fd = req.fileDescriptor === 1 ? 1 : 0;
    let pos = Number(req.offset);
    const pump = () => {
      const buf = e.out[fd];
      while (pos < buf.length) {
        const chunk = buf.subarray(pos, pos + (1 << 20));
        pos += chunk.length;
        call.write(encodeModal('TaskExecStdioReadResponse', { data: chunk }));
      }
      if (e.closed) {
        e.changed.delete(pump);
        call.end();
      }
    };
    e.changed.add(pump);
    call.on('cancelled', () => e.changed.delete(pump));
    pump();
  };
}

/** Start a Modal stand-in on a loopback port. */
export async function startModalStandin(options: ModalStandinOptions = {}): Promise<ModalStandin> {
  const state: ModalStandin = {
    url: '',
    tokenId: options.tokenId ?? 'ak-standin',
    tokenSecret: options.tokenSecret ?? 'as-standin',
    boxes: new Map(),
    rateLimited: 0,
    calls: {},
    createLog: [],
    close: async () => {},
  };
  const w = new World(state, options);
  const server = new grpc.Server();
  const control = service('modal.client.ModalClient', controlPlane(w), (method, md) =>
    w.checkClient(md, method),
  );
  server.addService(control.definition, control.implementation);
  const streamStdio = stdioRead(w);
  const commands = service(
    'modal.task_command_router.TaskCommandRouter',
    commandRouter(w),
    (method, md) => w.checkRouter(md, method),
    {
      TaskExecStdioRead: (req, call) => {
        try {
          w.checkRouter(call.metadata, 'TaskExecStdioRead');
        } catch (error) {
          call.emit('error', toServiceError(error));
          return;
        }
        streamStdio(req, call);
      },
    },
  );
  server.addService(commands.definition, commands.implementation);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  state.url = `http://127.0.0.1:${port}`;
  w.routerUrl = `https://127.0.0.1:${port}`;
  state.close = async () => {
    for (const id of [...state.boxes.keys()]) w.end(id, GENERIC_STATUS.terminated);
    server.forceShutdown();
  };
  return state;
}

/** Modal's rate limit: `RESOURCE_EXHAUSTED` with an `RPCRetryPolicy` in the status details. */
function rateLimited(retryAfterSecs: number): RpcError {
  const message = 'Too many sandbox creations; rate limit exceeded';
  const details = encodeModal('RPCStatus', {
    code: RESOURCE_EXHAUSTED,
    message,
    details: [{ typeUrl: RETRY_POLICY_TYPE_URL, value: encodeModal('RPCRetryPolicy', { retryAfterSecs }) }],
  });
  const md = new grpc.Metadata();
  md.set('grpc-status-details-bin', details);
  return new RpcError(grpc.status.RESOURCE_EXHAUSTED, message, md);
}

function toServiceError(error: unknown): Partial<grpc.ServiceError> {
  if (error instanceof RpcError) {
    return { code: error.code, details: error.message, metadata: error.metadata ?? new grpc.Metadata() };
  }
  return { code: grpc.status.INTERNAL, details: String(error) };
}

/** A grpc-js service of unary methods (and server streams), its messages coded with the wire schema. */
function service(
  name: string,
  unary: Record<string, Unary>,
  check: (method: string, md: grpc.Metadata) => void,
  streams: Record<string, ServerStream> = {},
): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const definition: Record<string, grpc.MethodDefinition<object, object>> = {};
  const implementation: grpc.UntypedServiceImplementation = {};
  const requestType = (method: string) =>
    method.endsWith('V2') ? `${method.slice(0, -2)}Request` : `${method}Request`;
  const responseType = (method: string) =>
    method.endsWith('V2') ? `${method.slice(0, -2)}Response` : `${method}Response`;
  const codecs: Record<string, [string, string]> = {
    AuthTokenGet: ['Empty', 'AuthTokenGetResponse'],
    SandboxCreateV2: ['SandboxCreateV2Request', 'SandboxCreateV2Response'],
    TaskExecStart: ['TaskExecStartRequest', 'Empty'],
    TaskExecStdinWrite: ['TaskExecStdinWriteRequest', 'Empty'],
  };
  for (const method of [...Object.keys(unary), ...Object.keys(streams)]) {
    const [req, res] = codecs[method] ?? [requestType(method), responseType(method)];
    const streaming = method in streams;
    definition[method] = {
      path: `/${name}/${method}`,
      requestStream: false,
      responseStream: streaming,
      requestSerialize: (v: Record<string, unknown>) => encodeModal(req, v),
      requestDeserialize: (b: Buffer) => decodeModal(req, b),
      // Streams write messages they encoded themselves.
      responseSerialize: (v: Buffer | Record<string, unknown>) =>
        Buffer.isBuffer(v) ? v : encodeModal(res, v),
      responseDeserialize: (b: Buffer) => decodeModal(res, b),
    } as grpc.MethodDefinition<object, object>;
    implementation[method] = streaming
      ? (call: grpc.ServerWritableStream<Record<string, unknown>, Buffer>) =>
          streams[method]!(call.request, call as unknown as grpc.ServerWritableStream<Buffer, Buffer>)
      : (
          call: grpc.ServerUnaryCall<Record<string, unknown>, unknown>,
          callback: grpc.sendUnaryData<unknown>,
        ) => {
          Promise.resolve()
            .then(() => check(method, call.metadata))
            .then(() => unary[method]!(call.request, call.metadata))
            .then(
              (value) => callback(null, value),
              (error) => callback(toServiceError(error)),
            );
        };
  }
  return { definition, implementation };
}
