/**
 * The proxy's HTTP server, hardened for hostile clients (agents reach it): a body cap read as a stream
 * (a larger body is refused before it is buffered), a header cap, header / request / keep-alive
 * timeouts, a cap on open sockets (503 with `Retry-After` past it), and JSON depth and value caps. Refusals that
 * happen before a route is known carry one JSON body both dialects read (`error.message`, `error.type`).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { StringDecoder } from 'node:string_decoder';
import { ConfigError } from '../errors.js';
import { ClientConnections, type ConnectionTally, sharedTally } from './connections.js';
import { RequestError } from './dialects.js';

/** Limits the capture proxy enforces against hostile or broken clients. */
export interface ProxyLimits {
  /** Largest request body in bytes (default 32 MiB). A larger one is answered 413 and never buffered whole. */
  maxBodyBytes?: number | undefined;
  /** Largest request head (request line + headers) in bytes (default 64 KiB); past it: 431. */
  maxHeaderBytes?: number | undefined;
  /** Time a client has to send its request head (default 10 s); past it the socket is closed with a 408. */
  headersTimeoutMs?: number | undefined;
  /** Time a client has to send its whole request, body included (default 60 s); past it: 408. */
  requestTimeoutMs?: number | undefined;
  /**
   * How long an idle keep-alive connection stays open (default 65 s: longer than clients keep idle
   * sockets, so a client never reuses one the proxy is closing; idle floods meet `maxConnections`).
   */
  keepAliveTimeoutMs?: number | undefined;
  /**
   * Most open client sockets (default 4096), lowered to what the process's open-file limit allows
   * (see `connectionCeiling`). A socket past the cap closes the oldest one carrying no request; when
   * every one carries a request it gets a 503 with `Retry-After: 1`.
   */
  maxConnections?: number | undefined;
  /** Requests one session may have in flight at once (default 16); past it: 429, `Retry-After: 1`. */
  maxSessionRequests?: number | undefined;
  /**
   * Bytes of request bodies one session may hold at once, being received, parsed or tokenized (default:
   * `maxBodyBytes`, so one largest body at a time); past it: 429, `Retry-After: 1`.
   */
  maxSessionBodyBytes?: number | undefined;
  /**
   * Characters of text one request may have tokenized (default 4 Mi, about a million tokens of code):
   * a whole rendered chat for `count_tokens` and a thread's first or re-rendered turn, the new part of
   * one that extends its history. Past it: 413, before any of it is tokenized.
   */
  maxTokenizeChars?: number | undefined;
  /**
   * Characters one session may have tokenized per minute (default 16 Mi; a bucket that refills
   * continuously and holds a minute's worth). Past it: 429 with `Retry-After` the seconds until the
   * request would fit.
   */
  maxTokenizeCharsPerMinute?: number | undefined;
  /** Deepest JSON nesting accepted in a request body (default 64); deeper is a 400. */
  maxJsonDepth?: number | undefined;
  /**
   * Most JSON values in a request body (default 100,000: objects + arrays + commas between items); more
   * is a 413. Bounds the time a body of many tiny messages, parts or tools holds the event loop.
   */
  maxJsonValues?: number | undefined;
}

export type ResolvedLimits = { [K in keyof ProxyLimits]-?: number };

/** The limits a proxy gets when its options set none. */
export const DEFAULT_PROXY_LIMITS: ResolvedLimits = {
  maxBodyBytes: 32 * 1024 * 1024,
  maxHeaderBytes: 64 * 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  keepAliveTimeoutMs: 65_000,
  maxConnections: 4096,
  maxJsonDepth: 64,
  maxJsonValues: 100_000,
  maxSessionRequests: 16,
  maxSessionBodyBytes: 32 * 1024 * 1024,
  maxTokenizeChars: 4 * 1024 * 1024,
  maxTokenizeCharsPerMinute: 16 * 1024 * 1024,
};

/**
 * The limits with defaults filled in; a bad value is a `ConfigError` naming the field. A session's caps
 * default to one largest request at least: `maxSessionBodyBytes` to `maxBodyBytes`,
 * `maxTokenizeCharsPerMinute` to 16 Mi or `maxTokenizeChars` if that is more.
 */
export function resolveLimits(limits: ProxyLimits = {}): ResolvedLimits {
  const out = { ...DEFAULT_PROXY_LIMITS };
  for (const key of Object.keys(limits) as Array<keyof ProxyLimits>) {
    const value = limits[key];
    if (value === undefined) continue;
    if (!(key in DEFAULT_PROXY_LIMITS)) {
      throw new ConfigError(
        `limits.${key}: unknown limit; known: ${Object.keys(DEFAULT_PROXY_LIMITS).join(', ')}`,
      );
    }
    if (!Number.isInteger(value) || value <= 0) {
      throw new ConfigError(
        `limits.${key}: expected a positive integer, found ${JSON.stringify(value)}; omit it for the default ${DEFAULT_PROXY_LIMITS[key]}`,
      );
    }
    out[key] = value;
  }
  if (limits.maxSessionBodyBytes === undefined) out.maxSessionBodyBytes = out.maxBodyBytes;
  if (limits.maxTokenizeCharsPerMinute === undefined) {
    out.maxTokenizeCharsPerMinute = Math.max(out.maxTokenizeCharsPerMinute, out.maxTokenizeChars);
  }
  for (const [small, large] of [
    ['headersTimeoutMs', 'requestTimeoutMs'],
    ['maxBodyBytes', 'maxSessionBodyBytes'],
    ['maxTokenizeChars', 'maxTokenizeCharsPerMinute'],
  ] as const) {
    if (out[small] > out[large]) {
      throw new ConfigError(
        `limits.${small} (${out[small]}) must not exceed limits.${large} (${out[large]})`,
      );
    }
  }
  return out;
}

/** An error body OpenAI and Anthropic clients both read, for refusals made before the route is known. */
export function wireError(status: number, message: string): string {
  const type =
    status === 503 ? 'overloaded_error' : status === 413 ? 'request_too_large' : 'invalid_request_error';
  return JSON.stringify({ type: 'error', error: { type, message, code: status } });
}

function rawResponse(status: number, reason: string, message: string, extra = ''): string {
  const body = wireError(status, message);
  return (
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
    `${extra}Connection: close\r\n\r\n${body}`
  );
}

/**
 * Send a final answer and close. What the client still sends is read and dropped until it closes (or
 * 1 s passes): closing with unread input would reset the connection and could lose the answer.
 */
function refuse(socket: Socket, answer: string): void {
  socket.on('error', () => {});
  socket.end(answer);
  socket.resume();
  setTimeout(() => socket.destroy(), 1_000).unref();
}

export interface ProxyServer {
  server: Server;
  url: string;
  /** Open client sockets now. */
  readonly connections: number;
  close(): Promise<void>;
}

/**
 * Start the hardened server; `handle` gets each request of a counted connection. `tally` adds this
 * server's open sockets to a count several servers share (default: its own).
 */
export async function startProxyServer(
  limits: ResolvedLimits,
  listen: { host: string; port: number },
  handle: (req: IncomingMessage, res: ServerResponse) => void,
  tally: ConnectionTally = sharedTally(new Int32Array(1)),
): Promise<ProxyServer> {
  const connections = new ClientConnections(limits.maxConnections, tally, (reason) =>
    rawResponse(
      503,
      'Service Unavailable',
      reason === 'full'
        ? `the proxy has ${limits.maxConnections} open connections, each carrying a request (limits.maxConnections); retry shortly`
        : `the proxy is at its ${limits.maxConnections} connections (limits.maxConnections) and this one had sent no request: it made room for another; retry`,
      'Retry-After: 1\r\n',
    ),
  );
  const server = createServer(
    {
      maxHeaderSize: limits.maxHeaderBytes,
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      // How often expired heads/requests are looked for (Node's default, 30 s, would let them linger).
      connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(limits.headersTimeoutMs / 4))),
    },
    (req, res) => {
      // a refused or evicted socket already has its 503; it closes on its own
      if (!connections.has(req.socket)) return;
      connections.started(req.socket);
      res.once('close', () => connections.ended(req.socket));
      handle(req, res);
    },
  );
  server.on('connection', (socket: Socket) => void connections.accept(socket));
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Socket) => {
    if (error.code === 'ECONNRESET' || !socket.writable || !connections.has(socket)) {
      socket.destroy();
      return;
    }
    const [status, reason, message] =
      error.code === 'HPE_HEADER_OVERFLOW'
        ? [
            431,
            'Request Header Fields Too Large',
            `request head over ${limits.maxHeaderBytes} bytes (limits.maxHeaderBytes)`,
          ]
        : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? [
              408,
              'Request Timeout',
              'request not received in time (limits.headersTimeoutMs / requestTimeoutMs)',
            ]
          : [400, 'Bad Request', `malformed HTTP request (${error.code ?? error.message})`];
    refuse(socket, rawResponse(status, reason, message));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(listen.port, listen.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.address.includes(':') ? `[${address.address}]` : address.address;
  return {
    server,
    url: `http://${host}:${address.port}`,
    get connections() {
      return connections.size;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
        connections.closeAll();
      }),
  };
}

const INCREMENTAL_DECODE_BYTES = 1 << 20;

/**
 * Where a body's bytes are counted as they are known (a session's bodies in flight): a refusal stops
 * the read at once.
 */
export interface BodyAccount {
  reserve(bytes: number): RequestError | undefined;
}

/**
 * The request body as text, refused with a 413 `RequestError` as soon as it is known to pass `maxBytes`
 * (a `Content-Length` over it, or the bytes read so far): nothing past the cap is buffered. `account`
 * is charged the declared length up front, or each chunk as it arrives when none was declared.
 */
export function readBody(req: IncomingMessage, maxBytes: number, account?: BodyAccount): Promise<string> {
  const tooLarge = (n: string) =>
    new RequestError(
      413,
      `request body of ${n} bytes is over the proxy's limit of ${maxBytes} bytes (limits.maxBodyBytes)`,
    );
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > maxBytes) return Promise.reject(tooLarge(declared));
  const refused = declared !== undefined ? account?.reserve(Number(declared)) : undefined;
  if (refused) return Promise.reject(refused);
  const perChunk = declared === undefined ? account : undefined;
  return new Promise((resolve, reject) => {
    // Small bodies are decoded once at the end; past 1 MiB a body is decoded as it arrives, so a 30 MB
    // one costs no single long decode when it is complete.
    let buffers: Buffer[] = [];
    const strings: string[] = [];
    let decoder: StringDecoder | undefined;
    let size = 0;
    const fail = (error: Error) => {
      req.off('data', onData);
      reject(error);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      const refusal = size > maxBytes ? tooLarge(`more than ${maxBytes}`) : perChunk?.reserve(chunk.length);
      if (refusal) {
        buffers = [];
        strings.length = 0;
        // Stop reading: the reply is sent with `Connection: close` and the socket closed after it.
        req.pause();
        fail(refusal);
        return;
      }
      if (decoder) strings.push(decoder.write(chunk));
      else {
        buffers.push(chunk);
        if (size > INCREMENTAL_DECODE_BYTES) {
          decoder = new StringDecoder('utf8');
          strings.push(decoder.write(Buffer.concat(buffers)));
          buffers = [];
        }
      }
    };
    req.on('data', onData);
    req.once('end', () => {
      if (!decoder)
        resolve(
          buffers.length === 1 ? buffers[0]!.toString('utf8') : Buffer.concat(buffers).toString('utf8'),
        );
      else {
        strings.push(decoder.end());
        resolve(strings.join(''));
      }
    });
    req.once('error', fail);
    req.once('close', () => {
      if (!req.complete) fail(new RequestError(400, 'the client closed the connection mid-body'));
    });
  });
}

/** Let other work run (between the long steps of handling a large request). */
export const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Characters of a large body scanned between yields to other work. */
const SCAN_SLICE_CHARS = 1 << 20;

/**
 * Refuse a body that nests deeper than `maxJsonDepth` (400) or holds more than `maxJsonValues` values
 * (413), read from its text before it is parsed: parsing, validating and rendering cost grows with the
 * number of values, and 30 MB of tiny messages would hold the event loop for seconds. Values are
 * counted as objects + arrays + commas (each item after a container's first); strings are skipped whole.
 * Text that is not JSON is left to the parser to refuse.
 */
export async function checkJsonShape(
  text: string,
  limits: Pick<ResolvedLimits, 'maxJsonDepth' | 'maxJsonValues'>,
): Promise<void> {
  const { maxJsonDepth, maxJsonValues } = limits;
  let depth = 0;
  let values = 0;
  let nextYield = SCAN_SLICE_CHARS;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      // to the closing quote: the next one not escaped by an odd run of backslashes
      let end = text.indexOf('"', i + 1);
      while (end > 0 && escapedAt(text, end)) end = text.indexOf('"', end + 1);
      if (end < 0) return;
      i = end;
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      values++;
      if (++depth > maxJsonDepth) {
        throw new RequestError(
          400,
          `request JSON nests deeper than ${maxJsonDepth} levels (limits.maxJsonDepth)`,
        );
      }
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) depth--;
    else if (c === COMMA) values++;
    if (values > maxJsonValues) {
      throw new RequestError(
        413,
        `request JSON holds more than ${maxJsonValues} values (objects, arrays and their items; limits.maxJsonValues)`,
      );
    }
    if (i >= nextYield) {
      nextYield = i + SCAN_SLICE_CHARS;
      await yieldToLoop();
    }
  }
}

const [QUOTE, COMMA, OPEN_BRACE, CLOSE_BRACE, OPEN_BRACKET, CLOSE_BRACKET] = [...'",{}[]'].map((c) =>
  c.charCodeAt(0),
);
const BACKSLASH = 0x5c;

/** Whether the character at `at` is escaped (preceded by an odd number of backslashes). */
function escapedAt(text: string, at: number): boolean {
  let k = at - 1;
  while (k >= 0 && text.charCodeAt(k) === BACKSLASH) k--;
  return (at - 1 - k) % 2 === 1;
}

/** A path segment's text, or the segment as it is when it is not valid percent-encoding (never a 500). */
export function decodePathSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** The API key a request carries: `Authorization: Bearer <key>`, `x-api-key` or (Gemini) `x-goog-api-key`. */
export function credentialOf(req: IncomingMessage): string | undefined {
  const auth = req.headers.authorization;
  if (auth?.startsWith('Bearer ')) return auth.slice(7).trim();
  const key = req.headers['x-api-key'] ?? req.headers['x-goog-api-key'];
  return typeof key === 'string' ? key : undefined;
}
