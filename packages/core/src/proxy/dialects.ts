/**
 * The two chat dialects the capture proxy speaks: OpenAI Chat Completions and Anthropic Messages
 * (the Responses API is in `responses.ts`). Requests become template messages; a generated turn
 * becomes a JSON answer (its SSE stream is written by the encoders of `sse.ts`).
 */
import { z } from 'zod';
import type { ParsedResponse } from '../engine/tokenizer/parsers.js';
import type { TemplateMessage, ToolDefinition } from '../engine/tokenizer/template.js';

/**
 * The wire a client speaks: OpenAI Chat Completions, Anthropic Messages, the OpenAI Responses API or the
 * Gemini API's `generateContent` (`gemini.ts`).
 */
export type Dialect = 'openai' | 'anthropic' | 'responses' | 'gemini';

/** Sampling knobs a harness sent, by their wire names. */
export type HarnessSampling = Record<string, unknown>;

/** A client's chat request in the dialect-neutral form the proxy renders. */
export interface ChatRequest {
  messages: TemplateMessage[];
  tools: ToolDefinition[];
  stream: boolean;
  includeUsage: boolean;
  model: string | undefined;
  /** Most new tokens the harness asked for. */
  maxTokens: number | undefined;
  sampling: HarnessSampling;
  templateKwargs: Record<string, unknown> | undefined;
}

export class RequestError extends Error {
  /**
   * `retryAfterS`: a refusal that passes with time (a session's rate or requests in flight), answered
   * with `Retry-After` and, at 429, as a rate limit clients retry rather than a usage limit.
   */
  constructor(
    readonly status: number,
    message: string,
    readonly retryAfterS?: number | undefined,
  ) {
    super(message);
  }
}

const TextPart = z.looseObject({ type: z.string(), text: z.string().optional() });

const OpenAIToolCall = z.looseObject({
  id: z.string().optional(),
  type: z.literal('function').optional(),
  function: z.looseObject({
    name: z.string(),
    arguments: z.union([z.string(), z.record(z.string(), z.unknown())]),
  }),
});

const OpenAIMessage = z.looseObject({
  role: z.string(),
  content: z.union([z.string(), z.array(TextPart)]).nullish(),
  reasoning_content: z.string().nullish(),
  reasoning: z.string().nullish(),
  tool_calls: z.array(OpenAIToolCall).nullish(),
  tool_call_id: z.string().nullish(),
  name: z.string().nullish(),
});

const OpenAITool = z.looseObject({
  type: z.literal('function'),
  function: z.looseObject({
    name: z.string(),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  }),
});

export const OpenAIChatRequestSchema = z.looseObject({
  model: z.string().optional(),
  messages: z.array(OpenAIMessage).min(1),
  tools: z.array(OpenAITool).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  max_tokens: z.number().int().positive().nullish(),
  max_completion_tokens: z.number().int().positive().nullish(),
  n: z.number().int().nullish(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
});

const OPENAI_KNOBS = [
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'presence_penalty',
  'frequency_penalty',
  'repetition_penalty',
  'seed',
  'stop',
] as const;

function partsText(
  content: string | Array<{ type: string; text?: string | undefined }> | null | undefined,
): string {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  return content
    .map((p) => {
      if (p.type !== 'text' || p.text === undefined) {
        throw new RequestError(
          400,
          `content part type ${JSON.stringify(p.type)} is not supported; send text parts`,
        );
      }
      return p.text;
    })
    .join('');
}

function pick(body: Record<string, unknown>, keys: readonly string[]): HarnessSampling {
  const out: HarnessSampling = {};
  for (const k of keys) if (body[k] !== undefined && body[k] !== null) out[k] = body[k];
  return out;
}

function parse<S extends z.ZodType>(schema: S, json: unknown, what: string): z.output<S> {
  const r = schema.safeParse(json);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  throw new RequestError(400, `invalid ${what}: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
}

/** Parse an OpenAI Chat Completions request. */
export function parseOpenAIRequest(json: unknown, rawArgs: Map<string, string>): ChatRequest {
  const body = parse(OpenAIChatRequestSchema, json, 'chat completion request');
  if (body.n != null && body.n !== 1) throw new RequestError(400, `n=${body.n} is not supported; send n=1`);
  const messages = body.messages.map((m): TemplateMessage => {
    const msg: TemplateMessage = { role: m.role, content: partsText(m.content) };
    const reasoning = m.reasoning_content ?? m.reasoning;
    if (reasoning != null) msg.reasoning_content = reasoning;
    if (m.tool_calls && m.tool_calls.length > 0) {
      msg.tool_calls = m.tool_calls.map((c) => ({
        ...(c.id ? { id: c.id } : {}),
        type: 'function',
        function: {
          name: c.function.name,
          arguments: (c.id ? rawArgs.get(c.id) : undefined) ?? c.function.arguments,
        },
      }));
    }
    if (m.tool_call_id != null) msg.tool_call_id = m.tool_call_id;
    if (m.name != null) msg.name = m.name;
    return msg;
  });
  const tools = (body.tools ?? []).map(
    (t): ToolDefinition => ({ type: 'function', function: stripUndefined(t.function) }),
  );
  return {
    messages,
    tools,
    stream: body.stream ?? false,
    includeUsage: body.stream_options?.include_usage ?? false,
    model: body.model,
    maxTokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
    sampling: pick(body, OPENAI_KNOBS),
    templateKwargs: body.chat_template_kwargs ?? undefined,
  };
}

const AnthropicBlock = z.looseObject({
  type: z.string(),
  text: z.string().optional(),
  thinking: z.string().optional(),
  id: z.string().optional(),
  name: z.string().optional(),
  input: z.unknown().optional(),
  tool_use_id: z.string().optional(),
  content: z.union([z.string(), z.array(TextPart)]).optional(),
});

export const AnthropicRequestSchema = z.looseObject({
  model: z.string().optional(),
  max_tokens: z.number().int().positive(),
  system: z.union([z.string(), z.array(TextPart)]).optional(),
  messages: z
    .array(
      z.looseObject({
        // Claude Code sends `system` messages between turns (environment notes, reminders).
        role: z.enum(['user', 'assistant', 'system']),
        content: z.union([z.string(), z.array(AnthropicBlock)]),
      }),
    )
    .min(1),
  tools: z
    .array(
      z.looseObject({
        name: z.string(),
        description: z.string().optional(),
        input_schema: z.record(z.string(), z.unknown()).optional(),
      }),
    )
    .optional(),
  stream: z.boolean().optional(),
});

const ANTHROPIC_KNOBS = ['temperature', 'top_p', 'top_k', 'stop_sequences'] as const;

/** Parse an Anthropic Messages request. */
export function parseAnthropicRequest(
  json: unknown,
  rawArgs: Map<string, string>,
  options: { countOnly?: boolean | undefined } = {},
): ChatRequest {
  // `count_tokens` requests carry no max_tokens
  const schema = options.countOnly
    ? AnthropicRequestSchema.extend({ max_tokens: z.number().int().optional() })
    : AnthropicRequestSchema;
  const body = parse(schema, json, 'messages request');
  const messages: TemplateMessage[] = [];
  if (body.system !== undefined) messages.push({ role: 'system', content: partsText(body.system) });
  for (const m of body.messages) {
    if (typeof m.content === 'string') {
      messages.push({ role: m.role, content: m.content });
      continue;
    }
    if (m.role === 'system') {
      messages.push({ role: 'system', content: partsText(m.content) });
      continue;
    }
    if (m.role === 'assistant') {
      const msg: TemplateMessage = { role: 'assistant', content: '' };
      const text: string[] = [];
      for (const b of m.content) {
        if (b.type === 'text') text.push(b.text ?? '');
        else if (b.type === 'thinking') msg.reasoning_content = b.thinking ?? '';
        else if (b.type === 'tool_use') {
          const id = b.id ?? '';
          msg.tool_calls ??= [];
          msg.tool_calls.push({
            id,
            type: 'function',
            function: {
              name: b.name ?? '',
              arguments: rawArgs.get(id) ?? ((b.input ?? {}) as Record<string, unknown>),
            },
          });
        }
      }
      msg.content = text.join('');
      messages.push(msg);
      continue;
    }
    // A user turn: tool results become tool messages, runs of text become user messages, in order.
    let text: string[] = [];
    const flush = () => {
      if (text.length > 0) messages.push({ role: 'user', content: text.join('\n') });
      text = [];
    };
    for (const b of m.content) {
      if (b.type === 'text') text.push(b.text ?? '');
      else if (b.type === 'tool_result') {
        flush();
        messages.push({ role: 'tool', content: partsText(b.content), tool_call_id: b.tool_use_id ?? '' });
      } else
        throw new RequestError(
          400,
          `content block type ${JSON.stringify(b.type)} is not supported in a user turn`,
        );
    }
    flush();
  }
  const tools = (body.tools ?? []).map(
    (t): ToolDefinition => ({
      type: 'function',
      function: stripUndefined({ name: t.name, description: t.description, parameters: t.input_schema }),
    }),
  );
  return {
    messages,
    tools,
    stream: body.stream ?? false,
    includeUsage: true,
    model: body.model,
    maxTokens: body.max_tokens,
    sampling: pick(body, ANTHROPIC_KNOBS),
    templateKwargs: undefined,
  };
}

/** A tool's function definition without undefined fields. */
function stripUndefined(o: Record<string, unknown>): ToolDefinition['function'] {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out as ToolDefinition['function'];
}

/** A generated turn, ready to be written in either dialect. */
export interface TurnReply {
  id: string;
  model: string;
  parsed: ParsedResponse;
  /** Ids given to the tool calls (same order as `parsed.toolCalls`). */
  toolCallIds: string[];
  finishReason: 'stop' | 'length' | 'abort';
  promptTokens: number;
  outputTokens: number;
}

export function openaiFinish(r: TurnReply): string {
  if (r.finishReason === 'length') return 'length';
  return r.parsed.toolCalls.length > 0 ? 'tool_calls' : 'stop';
}

function openaiToolCalls(r: TurnReply) {
  return r.parsed.toolCalls.map((c, i) => ({
    id: r.toolCallIds[i]!,
    type: 'function' as const,
    function: { name: c.name, arguments: c.arguments },
  }));
}

export function openaiJson(r: TurnReply): unknown {
  const message: Record<string, unknown> = { role: 'assistant', content: r.parsed.content };
  if (r.parsed.reasoning !== undefined) message.reasoning_content = r.parsed.reasoning;
  if (r.parsed.toolCalls.length > 0) message.tool_calls = openaiToolCalls(r);
  return {
    id: r.id,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: r.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: openaiFinish(r) }],
    usage: {
      prompt_tokens: r.promptTokens,
      completion_tokens: r.outputTokens,
      total_tokens: r.promptTokens + r.outputTokens,
    },
  };
}

export function anthropicStop(r: TurnReply): string {
  if (r.finishReason === 'length') return 'max_tokens';
  return r.parsed.toolCalls.length > 0 ? 'tool_use' : 'end_turn';
}

function anthropicBlocks(r: TurnReply): Array<Record<string, unknown>> {
  const blocks: Array<Record<string, unknown>> = [];
  if (r.parsed.reasoning !== undefined)
    blocks.push({ type: 'thinking', thinking: r.parsed.reasoning, signature: '' });
  if (r.parsed.content) blocks.push({ type: 'text', text: r.parsed.content });
  r.parsed.toolCalls.forEach((c, i) => {
    let input: unknown;
    try {
      input = JSON.parse(c.arguments);
    } catch {
      input = {};
    }
    blocks.push({ type: 'tool_use', id: r.toolCallIds[i]!, name: c.name, input });
  });
  return blocks;
}

export function anthropicJson(r: TurnReply): unknown {
  return {
    id: r.id,
    type: 'message',
    role: 'assistant',
    model: r.model,
    content: anthropicBlocks(r),
    stop_reason: anthropicStop(r),
    stop_sequence: null,
    usage: { input_tokens: r.promptTokens, output_tokens: r.outputTokens },
  };
}

/**
 * The error body of a dialect. A 429 is a usage limit for OpenAI clients (Codex stops on it, as the turn
 * cap wants) unless `retryable` (a rate limit: Codex retries after the `Retry-After`).
 */
export function errorBody(dialect: Dialect, status: number, message: string, retryable = false): unknown {
  if (dialect === 'gemini') return { error: { code: status, message, status: googleStatus(status) } };
  if (dialect === 'anthropic') {
    const type =
      status === 400
        ? 'invalid_request_error'
        : status === 413
          ? 'request_too_large'
          : status === 401 || status === 404
            ? 'authentication_error'
            : status === 429
              ? 'rate_limit_error'
              : 'api_error';
    return { type: 'error', error: { type, message } };
  }
  // Codex stops (does not retry) on a 429 of type `usage_limit_reached`.
  const type =
    status >= 500
      ? 'server_error'
      : status === 429
        ? retryable
          ? 'rate_limit_exceeded'
          : 'usage_limit_reached'
        : 'invalid_request_error';
  return { error: { message, type, code: status } };
}

/** The status name Google's APIs give an HTTP status (the Gemini API's `error.status`). */
function googleStatus(status: number): string {
  if (status === 400 || status === 413) return 'INVALID_ARGUMENT';
  if (status === 401) return 'UNAUTHENTICATED';
  if (status === 404) return 'NOT_FOUND';
  if (status === 409) return 'ABORTED';
  if (status === 429) return 'RESOURCE_EXHAUSTED';
  if (status === 503) return 'UNAVAILABLE';
  return 'INTERNAL';
}
