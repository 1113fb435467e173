/**
 * Incremental SSE encoders: a turn's answer written as it is generated. A dialect implements
 * `StreamEncoder` (`start`, then reasoning / text deltas and tool calls in any order, then `finish` or
 * `error`); each call returns the wire text to send. OpenAI Chat Completions and Anthropic Messages
 * are here, the Responses API's is in `responses-output.ts`; `playTurn` writes a finished turn.
 */
import { anthropicStop, errorBody, openaiFinish, type TurnReply } from './dialects.js';

export interface StreamMeta {
  id: string;
  model: string;
  promptTokens: number;
}

export interface StreamToolCall {
  id: string;
  name: string;
  /** The arguments' JSON text as the model wrote it. */
  arguments: string;
}

export interface StreamEncoder {
  start(): string;
  reasoningDelta(text: string): string;
  textDelta(text: string): string;
  toolCall(call: StreamToolCall, index: number): string;
  /** The end of the answer: finish reason, usage, the closing event. */
  finish(reply: TurnReply): string;
  /** A failure after the stream started (the status tells the kind: 5xx engine trouble, 4xx the request). */
  error(status: number, message: string): string;
}

export function openaiEncoder(meta: StreamMeta, options: { includeUsage: boolean }): StreamEncoder {
  const created = Math.floor(Date.now() / 1000);
  const frame = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({ id: meta.id, object: 'chat.completion.chunk', created, model: meta.model, choices, ...extra })}\n\n`;
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    frame([{ index: 0, delta, logprobs: null, finish_reason: finish }]);
  // `reasoning_content` is not an OpenAI field: openai-node's stream helper keeps only its last delta,
  // so the reasoning goes out whole, once it closes; the content streams token by token.
  let reasoning: string | undefined;
  const flush = () => {
    if (reasoning === undefined) return '';
    const out = chunk({ reasoning_content: reasoning });
    reasoning = undefined;
    return out;
  };
  return {
    start: () => chunk({ role: 'assistant', content: '' }),
    reasoningDelta(text) {
      reasoning = (reasoning ?? '') + text;
      return '';
    },
    textDelta: (text) => flush() + chunk({ content: text }),
    toolCall: (call, index) =>
      flush() +
      chunk({
        tool_calls: [
          { index, id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } },
        ],
      }),
    finish(r) {
      let out = flush() + chunk({}, openaiFinish(r));
      if (options.includeUsage) {
        const usage = {
          prompt_tokens: r.promptTokens,
          completion_tokens: r.outputTokens,
          total_tokens: r.promptTokens + r.outputTokens,
        };
        out += frame([], { usage });
      }
      return `${out}data: [DONE]\n\n`;
    },
    // openai-node raises an APIError for a chunk with an `error` field
    error: (status, message) => `data: ${JSON.stringify(errorBody('openai', status, message))}\n\n`,
  };
}

export function anthropicEncoder(meta: StreamMeta): StreamEncoder {
  const event = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  let index = -1;
  let open: 'thinking' | 'text' | undefined;
  const close = () => {
    if (open === undefined) return '';
    open = undefined;
    return event('content_block_stop', { index });
  };
  const into = (kind: 'thinking' | 'text') => {
    if (open === kind) return '';
    const out = close();
    open = kind;
    index++;
    const block =
      kind === 'thinking' ? { type: 'thinking', thinking: '', signature: '' } : { type: 'text', text: '' };
    return out + event('content_block_start', { index, content_block: block });
  };
  return {
    start: () =>
      event('message_start', {
        message: {
          id: meta.id,
          type: 'message',
          role: 'assistant',
          model: meta.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: meta.promptTokens, output_tokens: 0 },
        },
      }),
    reasoningDelta: (text) =>
      into('thinking') +
      event('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: text } }),
    textDelta: (text) =>
      into('text') + event('content_block_delta', { index, delta: { type: 'text_delta', text } }),
    toolCall(call) {
      let input: unknown;
      try {
        input = JSON.parse(call.arguments);
      } catch {
        input = {};
      }
      let out = close();
      index++;
      out += event('content_block_start', {
        index,
        content_block: { type: 'tool_use', id: call.id, name: call.name, input: {} },
      });
      out += event('content_block_delta', {
        index,
        delta: { type: 'input_json_delta', partial_json: JSON.stringify(input) },
      });
      return out + event('content_block_stop', { index });
    },
    finish: (r) =>
      close() +
      event('message_delta', {
        delta: { stop_reason: anthropicStop(r), stop_sequence: null },
        usage: { output_tokens: r.outputTokens },
      }) +
      event('message_stop', {}),
    error: (status, message) =>
      event('error', errorBody('anthropic', status, message) as Record<string, unknown>),
  };
}

/** A finished turn through an encoder, as if it had streamed in one piece. */
export function playTurn(encoder: StreamEncoder, r: TurnReply): string {
  let out = encoder.start();
  if (r.parsed.reasoning !== undefined) out += encoder.reasoningDelta(r.parsed.reasoning);
  if (r.parsed.content !== '') out += encoder.textDelta(r.parsed.content);
  r.parsed.toolCalls.forEach((call, i) => {
    out += encoder.toolCall({ id: r.toolCallIds[i]!, name: call.name, arguments: call.arguments }, i);
  });
  return out + encoder.finish(r);
}
