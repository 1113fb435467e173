/** The proxy's answers on the wire: a JSON (or finished SSE) body, or an SSE stream written as it comes. */
import type { IncomingMessage, ServerResponse } from 'node:http';

export interface Reply {
  status: number;
  contentType: string;
  body: string;
  /** A streamed answer: written chunk by chunk, `body` unused. */
  stream?: AsyncIterable<string> | undefined;
}

export const JSON_TYPE = 'application/json';
export const SSE_TYPE = 'text/event-stream';

export function json(status: number, body: unknown): Reply {
  return { status, contentType: JSON_TYPE, body: JSON.stringify(body) };
}

export function write(req: IncomingMessage, res: ServerResponse, reply: Reply): void {
  if (res.destroyed || res.headersSent) return;
  if (reply.stream) return void pipe(res, reply.status, reply.stream);
  // A body left unread (refused, or never needed) is not drained: the connection closes after the reply.
  const unread = !req.complete;
  res.writeHead(reply.status, {
    'content-type': reply.contentType,
    'content-length': Buffer.byteLength(reply.body),
    ...(reply.contentType === SSE_TYPE ? { 'cache-control': 'no-cache' } : {}),
    ...(unread ? { connection: 'close' } : {}),
  });
  res.end(reply.body, () => {
    if (unread) req.socket.destroy();
  });
}

async function pipe(res: ServerResponse, status: number, stream: AsyncIterable<string>): Promise<void> {
  res.writeHead(status, { 'content-type': SSE_TYPE, 'cache-control': 'no-cache' });
  // each event leaves at once (no Nagle delay between small writes)
  res.socket?.setNoDelay(true);
  for await (const chunk of stream) {
    if (res.destroyed) return;
    res.write(chunk);
  }
  res.end();
}

/** A reply as a fetch `Response` body; cancelling a streamed one calls `cancel` (the client went away). */
export function responseBody(
  reply: Reply,
  cancel: (reason: unknown) => void,
): string | ReadableStream<Uint8Array> {
  if (!reply.stream) return reply.body;
  const iterator = reply.stream[Symbol.asyncIterator]();
  const encoder = new TextEncoder();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await iterator.next();
      if (next.done) controller.close();
      else controller.enqueue(encoder.encode(next.value));
    },
    cancel(reason) {
      cancel(reason ?? new Error('client disconnected'));
    },
  });
}
