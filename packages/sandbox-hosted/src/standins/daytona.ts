/**
 * STAND-IN for Daytona's servers, for tests: a real HTTP server on loopback answering the routes the
 * `@daytonaio/sdk` (0.218.0) calls through its generated clients `@daytona/api-client` and
 * `@daytona/toolbox-api-client` 0.218.0 (their `localVarPath`s, from Daytona's OpenAPI specs): the API's
 * `POST /sandbox` (a `SandboxDto`), `GET /sandbox?labels=<json>` (`{ items, nextCursor }`),
 * `GET|DELETE /sandbox/{id}`, and the toolbox at `<toolboxProxyUrl>/{id}`: `POST /process/session`,
 * `POST /process/session/{sessionId}/exec` (`{ cmdId, exitCode, stdout, stderr, output }`; a session's
 * commands run one after another, as in Daytona's one shell per session), `DELETE /process/session/{id}`,
 * `GET /files/info`, `POST /files/bulk-upload` (multipart `files[i].path` / `files[i].file`) and
 * `POST /files/bulk-download` (a multipart answer, one `file` part per path, named by its path). Auth is
 * `Authorization: Bearer <key>`. Lifetime: the create's `ttlMinutes` (wall-clock since creation; scaled by
 * `msPerMinute` so a test need not wait minutes). Rate limit: sandbox creation at Daytona's documented 600
 * per 60 s (daytona.io/docs/en/rate-limits), answered 429 with `Retry-After`. Commands run as real local
 * processes (`LocalBox`).
 */
import { once } from 'node:events';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname } from 'node:path';
import { LocalBox, RateLimit, standinId } from './local-box.js';

/** Options of the Daytona stand-in. */
export interface DaytonaStandinOptions {
  apiKey?: string | undefined;
  /** Sandbox creations per second before 429 (Daytona documents 600 per minute, 10 per second). */
  createsPerSecond?: number | undefined;
  retryAfterSeconds?: number | undefined;
  /** How long a "minute" of `ttlMinutes` lasts here (default 60 000 ms). */
  msPerMinute?: number | undefined;
}

/** A stand-in Daytona sandbox: a local box with the fields Daytona reports. */
export type DaytonaBox = LocalBox & {
  labels: Record<string, string>;
  ttlMinutes: number;
  autoStopInterval: number;
  /** Each session's last command: the next one waits for it. */
  sessions: Map<string, Promise<void>>;
};

/** A running Daytona stand-in. */
export interface DaytonaStandin {
  url: string;
  apiKey: string;
  boxes: Map<string, DaytonaBox>;
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
  res.end(JSON.stringify(value));
}

/** The parts of a multipart/form-data body: name, filename and content. */
function multipart(
  raw: Buffer,
  contentType: string,
): Array<{ name: string; filename?: string; data: Buffer }> {
  const boundary = /boundary=(?:"([^"]+)"|([^;]+))/.exec(contentType);
  if (!boundary) throw new Error(`no multipart boundary in ${contentType}`);
  const delimiter = Buffer.from(`--${boundary[1] ?? boundary[2]}`);
  const parts = [];
  let at = raw.indexOf(delimiter);
  while (at >= 0) {
    const start = at + delimiter.length;
    if (raw.subarray(start, start + 2).toString() === '--') break;
    const next = raw.indexOf(delimiter, start);
    const part = raw.subarray(start + 2, next - 2); // past CRLF, before CRLF
    const headEnd = part.indexOf('\r\n\r\n');
    const head = part.subarray(0, headEnd).toString();
    const name = /name="([^"]*)"/.exec(head)?.[1] ?? '';
    const filename = /filename="([^"]*)"/.exec(head)?.[1];
    parts.push({ name, ...(filename === undefined ? {} : { filename }), data: part.subarray(headEnd + 4) });
    at = next;
  }
  return parts;
}

function dto(box: DaytonaBox, url: string, state = 'started'): Record<string, unknown> {
  return {
    id: box.id,
    name: box.id,
    organizationId: 'standin-org',
    user: 'daytona',
    env: box.env,
    labels: box.labels,
    public: false,
    networkBlockAll: false,
    target: 'us',
    cpu: 1,
    gpu: 0,
    memory: 1,
    disk: 3,
    state,
    autoStopInterval: box.autoStopInterval,
    ttlMinutes: box.ttlMinutes,
    createdAt: new Date(box.createdAt).toISOString(),
    updatedAt: new Date().toISOString(),
    toolboxProxyUrl: `${url}/toolbox`,
  };
}

function notFound(res: ServerResponse, what: string): void {
  json(res, 404, { statusCode: 404, message: `${what} not found`, error: 'Not Found' });
}

/** The toolbox routes of one sandbox (`<toolboxProxyUrl>/{id}/…`). */
async function toolbox(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  url: URL,
  box: DaytonaBox,
): Promise<void> {
  if (req.method === 'POST' && path === '/process/session') {
    const { sessionId } = JSON.parse((await body(req)).toString()) as { sessionId: string };
    if (box.sessions.has(sessionId))
      return json(res, 409, { statusCode: 409, message: `session ${sessionId} exists`, error: 'Conflict' });
    box.sessions.set(sessionId, Promise.resolve());
    return json(res, 201, {});
  }
  const session = /^\/process\/session\/([^/]+)$/.exec(path);
  if (req.method === 'DELETE' && session) {
    if (!box.sessions.delete(session[1]!)) return notFound(res, `session ${session[1]}`);
    res.writeHead(204).end();
    return;
  }
  const exec = /^\/process\/session\/([^/]+)\/exec$/.exec(path);
  if (req.method === 'POST' && exec) {
    const { command } = JSON.parse((await body(req)).toString()) as { command: string };
    const previous = box.sessions.get(exec[1]!);
    if (!previous) return notFound(res, `session ${exec[1]}`);
    // A Daytona session is one shell: its commands run one after another, never side by side.
    let done = () => {};
    box.sessions.set(
      exec[1]!,
      previous.then(
        () =>
          new Promise<void>((r) => {
            done = r;
          }),
      ),
    );
    await previous;
    const child = box.spawn('bash', ['-c', command], { cwd: '/' });
    child.once('close', () => done());
    child.stdin?.end();
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const all: Buffer[] = [];
    child.stdout?.on('data', (d: Buffer) => out.push(d) && all.push(d));
    child.stderr?.on('data', (d: Buffer) => err.push(d) && all.push(d));
    const [code] = (await once(child, 'close')) as [number | null];
    return json(res, 200, {
      cmdId: standinId('cmd-'),
      exitCode: code ?? -1,
      stdout: Buffer.concat(out).toString(),
      stderr: Buffer.concat(err).toString(),
      output: Buffer.concat(all).toString(),
    });
  }
  if (req.method === 'GET' && path === '/files/info') {
    try {
      const st = statSync(box.path(url.searchParams.get('path') ?? ''));
      return json(res, 200, {
        name: url.searchParams.get('path'),
        size: st.size,
        isDir: st.isDirectory(),
        mode: st.mode.toString(8),
        modTime: st.mtime.toISOString(),
        owner: 'daytona',
        group: 'daytona',
        permissions: '',
      });
    } catch {
      return notFound(res, `file ${url.searchParams.get('path')}`);
    }
  }
  if (req.method === 'POST' && path === '/files/bulk-upload') {
    const parts = multipart(await body(req), req.headers['content-type'] ?? '');
    for (let i = 0; parts.some((p) => p.name === `files[${i}].path`); i++) {
      const target = box.path(parts.find((p) => p.name === `files[${i}].path`)!.data.toString());
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(target, parts.find((p) => p.name === `files[${i}].file`)?.data ?? Buffer.alloc(0));
    }
    return json(res, 200, {});
  }
  if (req.method === 'POST' && path === '/files/bulk-download') {
    const { paths } = JSON.parse((await body(req)).toString()) as { paths: string[] };
    const boundary = `standin${standinId('')}`;
    const chunks: Buffer[] = [];
    for (const p of paths) {
      let data: Buffer | undefined;
      try {
        data = readFileSync(box.path(p));
      } catch {
        data = undefined;
      }
      const name = data ? 'file' : 'error';
      const type = data ? 'application/octet-stream' : 'application/json';
      chunks.push(
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="${p}"\r\nContent-Type: ${type}\r\n\r\n`,
        ),
        data ??
          Buffer.from(
            JSON.stringify({ message: `file ${p} not found`, statusCode: 404, code: 'FILE_NOT_FOUND' }),
          ),
        Buffer.from('\r\n'),
      );
    }
    chunks.push(Buffer.from(`--${boundary}--\r\n`));
    res.writeHead(200, { 'content-type': `multipart/form-data; boundary=${boundary}` });
    return void res.end(Buffer.concat(chunks));
  }
  notFound(res, `toolbox route ${req.method} ${path}`);
}

/** Start a Daytona stand-in on a loopback port. */
export async function startDaytonaStandin(options: DaytonaStandinOptions = {}): Promise<DaytonaStandin> {
  const apiKey = options.apiKey ?? 'dtn_standin_key';
  const limit = new RateLimit(options.createsPerSecond ?? 10);
  const msPerMinute = options.msPerMinute ?? 60_000;
  const state: DaytonaStandin = { url: '', apiKey, boxes: new Map(), rateLimited: 0, close: async () => {} };
  const kill = (id: string) => {
    state.boxes.get(id)?.kill();
    state.boxes.delete(id);
  };

  const api = async (req: IncomingMessage, res: ServerResponse, url: URL) => {
    const m = /^\/sandbox(?:\/([^/]+))?$/.exec(url.pathname);
    if (!m) return notFound(res, `route ${req.method} ${url.pathname}`);
    if (req.method === 'POST' && !m[1]) {
      if (!limit.take()) {
        state.rateLimited++;
        return json(
          res,
          429,
          { statusCode: 429, message: 'ThrottlerException: Too Many Requests', error: 'Too Many Requests' },
          {
            'retry-after': String(options.retryAfterSeconds ?? 2),
          },
        );
      }
      const b = JSON.parse((await body(req)).toString()) as {
        env?: Record<string, string>;
        labels?: Record<string, string>;
        ttlMinutes?: number;
        autoStopInterval?: number;
      };
      const id = standinId('');
      const box = Object.assign(new LocalBox(id, b.env ?? {}), {
        labels: b.labels ?? {},
        ttlMinutes: b.ttlMinutes ?? 0,
        autoStopInterval: b.autoStopInterval ?? 15,
        sessions: new Map<string, Promise<void>>(),
      });
      if (box.ttlMinutes > 0) box.setLifetime(box.ttlMinutes * msPerMinute, () => kill(id));
      state.boxes.set(id, box);
      return json(res, 200, dto(box, state.url));
    }
    if (req.method === 'GET' && !m[1]) {
      const want = JSON.parse(url.searchParams.get('labels') ?? '{}') as Record<string, string>;
      const items = [...state.boxes.values()]
        .filter((b) => Object.entries(want).every(([k, v]) => b.labels[k] === v))
        .map((b) => dto(b, state.url));
      return json(res, 200, { items, total: items.length, page: 1, totalPages: 1, nextCursor: null });
    }
    const box = state.boxes.get(m[1] ?? '');
    if (!box) return notFound(res, `sandbox ${m[1]}`);
    if (req.method === 'GET') return json(res, 200, dto(box, state.url));
    if (req.method === 'DELETE') {
      kill(box.id);
      return json(res, 200, dto(box, state.url, 'destroying'));
    }
    notFound(res, `route ${req.method} ${url.pathname}`);
  };

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://standin');
    const handle = async () => {
      if (req.headers.authorization !== `Bearer ${apiKey}`) {
        return json(res, 401, { statusCode: 401, message: 'Unauthorized', error: 'Unauthorized' });
      }
      const tb = /^\/toolbox\/([^/]+)(\/.*)$/.exec(url.pathname);
      if (tb) {
        const box = state.boxes.get(tb[1]!);
        if (!box) return notFound(res, `sandbox ${tb[1]}`);
        return toolbox(req, res, tb[2]!, url, box);
      }
      return api(req, res, url);
    };
    handle().catch((error) => {
      if (!res.headersSent)
        json(res, 500, { statusCode: 500, message: String(error), error: 'Internal Server Error' });
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
