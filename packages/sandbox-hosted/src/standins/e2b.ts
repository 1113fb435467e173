/**
 * STAND-IN for E2B's servers, for tests: a real HTTP server on loopback that answers the routes the `e2b`
 * SDK (2.51.0) calls, with the JSON of E2B's published OpenAPI spec (e2b-dev/E2B spec/openapi.yml at
 * ad659233626c236eb069107f275ebe97e744ed84: `POST /v2/sandboxes` → `Sandbox`, `GET /v2/sandboxes?metadata=`
 * → `ListedSandbox[]`, `DELETE /sandboxes/{sandboxID}`, `POST /sandboxes/{sandboxID}/timeout`), and envd's:
 * `GET /health`, `GET|POST /files` (spec/envd/envd.yaml) and the Connect-RPC service `process.Process`
 * (spec/envd/process/process.proto: `Start` server-streaming, `SendInput`, `CloseStdin`, `SendSignal`),
 * spoken in the Connect protocol's JSON codec the SDK uses (`useBinaryFormat: false`). The SDK reaches
 * envd here through its `sandboxUrl` option and routes by its `E2b-Sandbox-Id` header. Commands run as
 * real local processes in a temp folder per sandbox (`LocalBox`). Rate limit: E2B's documented 5 requests
 * per second, answered 429 with `Retry-After`.
 */
import { once } from 'node:events';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname } from 'node:path';
import { LocalBox, RateLimit, standinId } from './local-box.js';

/** Options of the E2B stand-in. */
export interface E2bStandinOptions {
  apiKey?: string | undefined;
  /** API requests per second before 429 (E2B documents 5). */
  ratePerSecond?: number | undefined;
  /** `Retry-After` seconds of a 429. */
  retryAfterSeconds?: number | undefined;
  /** How long a create answers after the sandbox exists (a slow control plane). */
  createDelayMs?: number | undefined;
}

/** A running E2B stand-in. */
export interface E2bStandin {
  url: string;
  apiKey: string;
  boxes: Map<string, LocalBox & { metadata: Record<string, string>; templateID: string; endAt: number }>;
  /** API calls answered 429. */
  rateLimited: number;
  /** Stops the server and kills every stand-in sandbox it started. */
  close(): Promise<void>;
}

async function body(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

function json(
  res: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(value === undefined ? undefined : JSON.stringify(value));
}

/** One Connect envelope: flags byte, big-endian length, payload. */
function envelope(flags: number, payload: unknown): Buffer {
  const data = Buffer.from(JSON.stringify(payload));
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(data.length, 1);
  return Buffer.concat([head, data]);
}

/** Start an E2B stand-in on a loopback port. */
export async function startE2bStandin(options: E2bStandinOptions = {}): Promise<E2bStandin> {
  const apiKey = options.apiKey ?? 'e2b_standin_key';
  const limit = new RateLimit(options.ratePerSecond ?? 5);
  const retryAfter = String(options.retryAfterSeconds ?? 1);
  const state: E2bStandin = {
    url: '',
    apiKey,
    boxes: new Map(),
    rateLimited: 0,
    close: async () => {},
  };
  const kill = (id: string) => {
    state.boxes.get(id)?.kill();
    state.boxes.delete(id);
  };

  const api = async (req: IncomingMessage, res: ServerResponse, url: URL) => {
    if (req.headers['x-api-key'] !== apiKey) return json(res, 401, { code: 401, message: 'Invalid API key' });
    if (!limit.take()) {
      state.rateLimited++;
      return json(res, 429, { code: 429, message: 'Rate limit exceeded' }, { 'retry-after': retryAfter });
    }
    const m = /^\/sandboxes\/([^/]+)(\/timeout)?$/.exec(url.pathname);
    if (req.method === 'POST' && url.pathname === '/v2/sandboxes') {
      const b = JSON.parse((await body(req)).toString()) as {
        templateID: string;
        metadata?: Record<string, string>;
        envVars?: Record<string, string>;
        timeout?: number;
      };
      const sandboxID = standinId('i');
      const timeoutS = b.timeout ?? 15;
      const box = Object.assign(new LocalBox(sandboxID, b.envVars ?? {}), {
        metadata: b.metadata ?? {},
        templateID: b.templateID,
        endAt: Date.now() + timeoutS * 1000,
      });
      box.setLifetime(timeoutS * 1000, () => kill(sandboxID));
      state.boxes.set(sandboxID, box);
      await new Promise((r) => setTimeout(r, options.createDelayMs ?? 0));
      return json(res, 201, {
        sandboxID,
        templateID: b.templateID,
        clientID: 'standin',
        envdVersion: '0.6.0',
        envdAccessToken: `tok-${sandboxID}`,
      });
    }
    if (req.method === 'GET' && url.pathname === '/v2/sandboxes') {
      // `metadata` is a URL-encoded query string of key=value pairs, each part encoded once more.
      const want = new URLSearchParams(url.searchParams.get('metadata') ?? '');
      const listed = [...state.boxes.values()].filter((b) =>
        [...want].every(([k, v]) => b.metadata[decodeURIComponent(k)] === decodeURIComponent(v)),
      );
      return json(
        res,
        200,
        listed.map((b) => ({
          sandboxID: b.id,
          templateID: b.templateID,
          clientID: 'standin',
          startedAt: new Date(b.createdAt).toISOString(),
          endAt: new Date(b.endAt).toISOString(),
          cpuCount: 2,
          memoryMB: 512,
          diskSizeMB: 1024,
          envdVersion: '0.6.0',
          metadata: b.metadata,
          state: 'running',
        })),
      );
    }
    if (m && req.method === 'DELETE' && !m[2]) {
      if (!state.boxes.has(m[1]!)) return json(res, 404, { code: 404, message: `sandbox ${m[1]} not found` });
      kill(m[1]!);
      res.writeHead(204).end();
      return;
    }
    if (m && req.method === 'POST' && m[2]) {
      const box = state.boxes.get(m[1]!);
      if (!box) return json(res, 404, { code: 404, message: `sandbox ${m[1]} not found` });
      const { timeout } = JSON.parse((await body(req)).toString()) as { timeout: number };
      box.endAt = Date.now() + timeout * 1000;
      box.setLifetime(timeout * 1000, () => kill(box.id));
      res.writeHead(204).end();
      return;
    }
    json(res, 404, { code: 404, message: `no route ${req.method} ${url.pathname}` });
  };

  const envd = async (req: IncomingMessage, res: ServerResponse, url: URL, box: LocalBox) => {
    if (req.headers['x-access-token'] !== `tok-${box.id}`)
      return json(res, 401, { code: 401, message: 'bad access token' });
    if (url.pathname === '/health') return void res.writeHead(204).end();
    if (url.pathname === '/files') {
      const path = box.path(url.searchParams.get('path') ?? '');
      if (req.method === 'POST') {
        mkdirSync(dirname(path), { recursive: true });
        writeFileSync(path, await body(req));
        return json(res, 200, [
          { name: path.slice(path.lastIndexOf('/') + 1), type: 'file', path: url.searchParams.get('path') },
        ]);
      }
      let st: ReturnType<typeof statSync> | undefined;
      try {
        st = statSync(path);
      } catch {
        return json(res, 404, { code: 404, message: `path ${url.searchParams.get('path')} does not exist` });
      }
      if (st.isDirectory()) return json(res, 400, { code: 400, message: 'path is a directory' });
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': st.size });
      return void res.end(readFileSync(path));
    }
    if (url.pathname.startsWith('/process.Process/'))
      return processRpc(req, res, url.pathname.slice(17), box);
    json(res, 404, { code: 404, message: `no route ${url.pathname}` });
  };

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://standin');
    const sandboxId = req.headers['e2b-sandbox-id'];
    const handle = async () => {
      if (typeof sandboxId === 'string') {
        const box = state.boxes.get(sandboxId);
        // envd of a sandbox that is gone: E2B's edge answers 502 (the SDK reads it as "not running").
        if (!box) return json(res, 502, { code: 502, message: `sandbox ${sandboxId} not found` });
        return envd(req, res, url, box);
      }
      return api(req, res, url);
    };
    handle().catch((error) => {
      if (!res.headersSent) json(res, 500, { code: 500, message: String(error) });
      else res.destroy();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  state.close = async () => {
    for (const id of [...state.boxes.keys()]) kill(id);
    server.closeAllConnections();
    server.close();
  };
  return state;
}

/** Connect-RPC `process.Process` methods: `Start` streams `StartResponse` envelopes, the rest are unary JSON. */
async function processRpc(
  req: IncomingMessage,
  res: ServerResponse,
  method: string,
  box: LocalBox,
): Promise<void> {
  const raw = await body(req);
  if (method === 'Start') {
    // A streaming request is one enveloped message.
    const start = JSON.parse(raw.subarray(5, 5 + raw.readUInt32BE(1)).toString()) as {
      process: { cmd: string; args?: string[]; envs?: Record<string, string>; cwd?: string };
      stdin?: boolean;
    };
    const p = start.process;
    const child = box.spawn(p.cmd, p.args ?? [], { cwd: p.cwd, env: p.envs });
    res.writeHead(200, { 'content-type': 'application/connect+json' });
    const spawned = await Promise.race([
      once(child, 'spawn').then(() => undefined),
      once(child, 'error').then(([e]) => e as Error),
    ]);
    if (spawned) {
      // envd fails a process it cannot start with an error in the end-of-stream message.
      res.end(
        envelope(2, {
          error: { code: 'invalid_argument', message: `cannot start ${p.cmd}: ${spawned.message}` },
        }),
      );
      return;
    }
    if (!start.stdin) child.stdin?.end();
    res.write(envelope(0, { event: { start: { pid: child.pid } } }));
    child.stdout?.on('data', (d: Buffer) =>
      res.write(envelope(0, { event: { data: { stdout: d.toString('base64') } } })),
    );
    child.stderr?.on('data', (d: Buffer) =>
      res.write(envelope(0, { event: { data: { stderr: d.toString('base64') } } })),
    );
    const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
    const exitCode = code ?? -1;
    res.write(
      envelope(0, {
        event: {
          end: {
            exitCode,
            exited: code !== null,
            status: signal ? `signal: ${signal}` : `exit status ${exitCode}`,
          },
        },
      }),
    );
    res.end(envelope(2, {}));
    return;
  }
  const msg = JSON.parse(raw.toString() || '{}') as {
    process?: { pid?: number };
    input?: { stdin?: string };
  };
  const child = box.processes.get(msg.process?.pid ?? -1);
  if (!child) return json(res, 404, { code: 'not_found', message: `process ${msg.process?.pid} not found` });
  if (method === 'SendInput') child.stdin?.write(Buffer.from(msg.input?.stdin ?? '', 'base64'));
  else if (method === 'CloseStdin') child.stdin?.end();
  else if (method === 'SendSignal') child.kill('SIGKILL');
  else return json(res, 404, { code: 'unimplemented', message: `process.Process/${method}` });
  json(res, 200, {});
}
