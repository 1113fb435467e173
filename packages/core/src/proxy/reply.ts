/**
 * The proxy's answers on the wire: a JSON (or finished SSE) body, or an SSE stream written as it comes.
 * An answer's turn is recorded (`commit`) only once the answer was handed over whole: the response
 * finished, or an in-process client read its body to the end.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** An answer as it is kept for a replay: status, headers and the whole body. */
export interface WireReply {
  status: number;
  contentType: string;
  body: string;
  headers?: Record<string, string> | undefined;
}

export interface Reply extends WireReply {
  /** A streamed answer: written chunk by chunk, `body` unused. */
  stream?: AsyncIterable<string> | undefined;
  /** Records the answer's turn; called once the whole answer was handed over. */
  commit?: (() => void) | undefined;
  /** Says the answer never will be handed over (the client left first). */
  abandon?: (() => void) | undefined;
}

export const JSON_TYPE = 'application/json';
export const SSE_TYPE = 'text/event-stream';

/** Refusals a retry cannot change (turn cap, finished session): SDKs honour `x-should-retry`. */
export const NO_RETRY = { 'x-should-retry': 'false' };

export function json(status: number, body: unknown, headers?: Record<string, string>): Reply {
  return { status, contentType: JSON_TYPE, body: JSON.stringify(body), headers };
}

export function write(req: IncomingMessage, res: ServerResponse, reply: Reply): void {
  if (res.destroyed || res.headersSent) return void reply.abandon?.();
  // The turn is recorded once its answer is out; a client gone before that never got it.
  if (reply.commit) res.once('finish', reply.commit);
  if (reply.abandon) res.once('close', () => res.writableFinished || reply.abandon!());
  if (reply.stream) return void pipe(res, reply, reply.stream);
  // A body left unread (refused, or never needed) is not drained: the connection closes after the reply.
  const unread = !req.complete;
  res.writeHead(reply.status, {
    'content-type': reply.contentType,
    'content-length': Buffer.byteLength(reply.body),
    ...(reply.contentType === SSE_TYPE ? { 'cache-control': 'no-cache' } : {}),
    ...(unread ? { connection: 'close' } : {}),
    ...reply.headers,
  });
  res.end(reply.body, () => {
    if (unread) req.socket.destroy();
  });
}

async function pipe(res: ServerResponse, reply: Reply, stream: AsyncIterable<string>): Promise<void> {
  res.writeHead(reply.status, { 'content-type': SSE_TYPE, 'cache-control': 'no-cache', ...reply.headers });
  // each event leaves at once (no Nagle delay between small writes)
  res.socket?.setNoDelay(true);
  for await (const chunk of stream) {
    if (res.destroyed) return;
    res.write(chunk);
  }
  res.end();
}

/**
 * A reply as a fetch `Response` body. A whole body is the client's once returned (its turn is committed
 * now); a streamed one is committed when it was read to its end, and cancelling it calls `cancel` and
 * `abandon` (the client went away: nothing is recorded).
 */
export function responseBody(
  reply: Reply,
  cancel: (reason: unknown) => void,
): string | ReadableStream<Uint8Array> {
  if (!reply.stream) {
    reply.commit?.();
    return reply.body;
  }
  const iterator = reply.stream[Symbol.asyncIterator]();
  const encoder = new TextEncoder();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await iterator.next();
      if (!next.done) return controller.enqueue(encoder.encode(next.value));
      reply.commit?.();
      controller.close();
    },
    cancel(reason) {
      reply.abandon?.();
      cancel(reason ?? new Error('client disconnected'));
    },
  });
}

/** The stream's chunks; the last one only when `release()` says so, once every other chunk was yielded. */
export async function* holdLastChunk(
  stream: AsyncIterable<string>,
  release: () => boolean,
): AsyncGenerator<string> {
  let held: string | undefined;
  for await (const chunk of stream) {
    if (held !== undefined) yield held;
    held = chunk;
  }
  if (release() && held !== undefined) yield held;
}
