/**
 * A turn's request parsed in the dialect it came in, and its answer encoded in that dialect: a finished
 * turn as JSON, or the `StreamEncoder` that writes it as SSE while it is generated.
 */
import {
  anthropicJson,
  type ChatRequest,
  type Dialect,
  openaiJson,
  parseAnthropicRequest,
  parseOpenAIRequest,
  type TurnReply,
} from './dialects.js';
import { geminiEncoder, geminiJson, parseGeminiRequest } from './gemini.js';
import { json, type Reply } from './reply.js';
import { parseResponsesRequest, type ResponsesRequest } from './responses.js';
import { responsesEncoder, responsesEvents, responsesJson } from './responses-output.js';
import { anthropicEncoder, openaiEncoder, type StreamEncoder, type StreamMeta } from './sse.js';

/** A parsed turn request; `responses` is set for the Responses API (its tools and echoed fields). */
export interface TurnRequest {
  req: ChatRequest;
  responses: ResponsesRequest | undefined;
}

/** The model and streaming a Gemini request's path names (`models/<model>:streamGenerateContent`). */
export interface GeminiRoute {
  model: string;
  stream: boolean;
}

export function parseTurnRequest(
  dialect: Dialect,
  body: unknown,
  toolArgs: Map<string, string>,
  countOnly: boolean,
  gemini?: GeminiRoute | undefined,
): TurnRequest {
  if (dialect === 'gemini') {
    return {
      req: parseGeminiRequest(body, toolArgs, gemini ?? { model: '', stream: false }),
      responses: undefined,
    };
  }
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

/** A finished turn as a JSON answer, in the request's dialect. */
export function encodeTurn(dialect: Dialect, { responses }: TurnRequest, turn: TurnReply): Reply {
  return json(
    200,
    responses
      ? responsesJson(turn, responses.tools, responses.echo)
      : dialect === 'anthropic'
        ? anthropicJson(turn)
        : dialect === 'gemini'
          ? geminiJson(turn)
          : openaiJson(turn),
  );
}

/** The SSE encoder of a streamed turn, in the request's dialect. */
export function turnEncoder(
  dialect: Dialect,
  { req, responses }: TurnRequest,
): (meta: StreamMeta) => StreamEncoder {
  if (responses) return (meta) => responsesEncoder(responsesEvents(meta, responses.echo), responses.tools);
  if (dialect === 'anthropic') return anthropicEncoder;
  if (dialect === 'gemini') return geminiEncoder;
  return (meta) => openaiEncoder(meta, { includeUsage: req.includeUsage });
}
