/**
 * A turn's request parsed and its answer encoded in the dialect it came in, and how an answer goes on
 * the wire: its turn is recorded (`commit`) only once the answer was handed to the client.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  anthropicJson,
  anthropicSse,
  type ChatRequest,
  type Dialect,
  openaiJson,
  openaiSse,
  parseAnthropicRequest,
  parseOpenAIRequest,
  type TurnReply,
} from './dialects.js';
import type { WireReply } from './ledger.js';
import { parseResponsesRequest, type ResponsesRequest } from './responses.js';
import { responsesJson, responsesSse } from './responses-output.js';

/**
 * An answer; `commit` records its turn once the answer was handed to the client, `abandon` says it never
 * will be (the client left first).
 */
export type Reply = WireReply & {
  commit?: (() => void) | undefined;
  abandon?: (() => void) | undefined;
};

const JSON_TYPE = 'application/json';
const SSE_TYPE = 'text/event-stream';

/** Refusals a retry cannot change (turn cap, finished session): SDKs honour `x-should-retry`. */
export const NO_RETRY = { 'x-should-retry': 'false' };

export function json(status: number, body: unknown, headers?: Record<string, string>): Reply {
  return { status, contentType: JSON_TYPE, body: JSON.stringify(body), headers };
}

/** A parsed turn request; `responses` is set for the Responses API (its tools and echoed fields). */
export interface TurnRequest {
  req: ChatRequest;
  responses: ResponsesRequest | undefined;
}

export function parseTurnRequest(
  dialect: Dialect,
  body: unknown,
  toolArgs: Map<string, string>,
  countOnly: boolean,
): TurnRequest {
  if (dialect === 'responses') {
    const responses = parseResponsesRequest(body, toolArgs);
    return { req: responses.chat, responses };
  }
  const req =
    dialect === 'anthropic'
      ? parseAnthropicRequest(body, toolArgs, { countOnly })
      : parseOpenAIRequest(body, toolArgs);
  return { req, responses: undefined };
}

/** A generated turn as JSON or as an SSE stream, in the request's dialect. */
export function encodeTurn(dialect: Dialect, { req, responses }: TurnRequest, turn: TurnReply): Reply {
  if (req.stream) {
    const body = responses
      ? responsesSse(turn, responses.tools, responses.echo)
      : dialect === 'anthropic'
        ? anthropicSse(turn)
        : openaiSse(turn, req.includeUsage);
    return { status: 200, contentType: SSE_TYPE, body };
  }
  return json(
    200,
    responses
      ? responsesJson(turn, responses.tools, responses.echo)
      : dialect === 'anthropic'
        ? anthropicJson(turn)
        : openaiJson(turn),
  );
}

export function write(req: IncomingMessage, res: ServerResponse, reply: Reply): void {
  if (res.destroyed || res.headersSent) {
    reply.abandon?.();
    return;
  }
  // A body left unread (refused, or never needed) is not drained: the connection closes after the reply.
  const unread = !req.complete;
  res.writeHead(reply.status, {
    'content-type': reply.contentType,
    'content-length': Buffer.byteLength(reply.body),
    ...(reply.contentType === SSE_TYPE ? { 'cache-control': 'no-cache' } : {}),
    ...(unread ? { connection: 'close' } : {}),
    ...reply.headers,
  });
  // The turn is recorded once its answer is out; a client gone before that never got it.
  if (reply.commit) res.once('finish', reply.commit);
  if (reply.abandon) res.once('close', () => res.writableFinished || reply.abandon!());
  res.end(reply.body, () => {
    if (unread) req.socket.destroy();
  });
}
