/**
 * The Gemini API's wire (`POST /v1beta/models/<model>:generateContent`, and
 * `:streamGenerateContent?alt=sse`), as Gemini CLI speaks it through `@google/genai`: a request's
 * `contents` (roles `user` and `model`; parts `text`, `functionCall {id, name, args}`,
 * `functionResponse {id, name, response}`, thought parts), `systemInstruction`, `tools[].functionDeclarations`
 * (`parametersJsonSchema` or `parameters`) and `generationConfig`; an answer's `candidates[0].content.parts`
 * with `finishReason` and `usageMetadata`, streamed as SSE `data:` frames, each a whole
 * `GenerateContentResponse` holding that frame's new parts. Field names from googleapis/js-genai
 * `src/types.ts` (1.30.0, the SDK `@google/gemini-cli@0.61.0` bundles) and the requests Gemini CLI 0.61.0
 * sent, recorded; its stream handling from google-gemini/gemini-cli `packages/core/src/core/geminiChat.ts`
 * (0.61.0: text parts are joined back into one, a function call's id is rewritten to `<name>__<id>`).
 */
import { z } from 'zod';
import type { TemplateMessage, ToolDefinition } from '../engine/tokenizer/template.js';
import {
  type ChatRequest,
  errorBody,
  type HarnessSampling,
  RequestError,
  type TurnReply,
} from './dialects.js';
import type { StreamEncoder, StreamMeta } from './sse.js';

const FunctionCall = z.looseObject({
  id: z.string().optional(),
  name: z.string(),
  args: z.record(z.string(), z.unknown()).optional(),
});

const FunctionResponse = z.looseObject({
  id: z.string().optional(),
  name: z.string(),
  response: z.record(z.string(), z.unknown()).optional(),
});

const Part = z.looseObject({
  text: z.string().optional(),
  thought: z.boolean().optional(),
  functionCall: FunctionCall.optional(),
  functionResponse: FunctionResponse.optional(),
});

const Content = z.looseObject({ role: z.string().optional(), parts: z.array(Part) });

export const GeminiRequestSchema = z.looseObject({
  contents: z.array(Content).min(1),
  systemInstruction: z.union([z.string(), Content]).optional(),
  tools: z
    .array(
      z.looseObject({
        functionDeclarations: z
          .array(
            z.looseObject({
              name: z.string(),
              description: z.string().optional(),
              parameters: z.record(z.string(), z.unknown()).optional(),
              parametersJsonSchema: z.record(z.string(), z.unknown()).optional(),
            }),
          )
          .optional(),
      }),
    )
    .optional(),
  generationConfig: z
    .looseObject({
      candidateCount: z.number().int().optional(),
      maxOutputTokens: z.number().int().positive().optional(),
    })
    .optional(),
});

/** `generationConfig` knobs → the sampling wire names the proxy reports overrides by. */
const GEMINI_KNOBS: Record<string, string> = {
  temperature: 'temperature',
  topP: 'top_p',
  topK: 'top_k',
  presencePenalty: 'presence_penalty',
  frequencyPenalty: 'frequency_penalty',
  seed: 'seed',
  stopSequences: 'stop',
};

type GeminiPart = z.output<typeof Part>;

/** The one kind a part holds, or a 400 for one the proxy cannot render (media, code execution). */
function kindOf(part: GeminiPart): 'text' | 'thought' | 'call' | 'response' {
  if (part.functionCall) return 'call';
  if (part.functionResponse) return 'response';
  if (part.text !== undefined) return part.thought ? 'thought' : 'text';
  const keys = Object.keys(part).filter((k) => k !== 'thoughtSignature');
  throw new RequestError(
    400,
    `content part ${JSON.stringify(keys.join(', ') || '{}')} is not supported; send text, functionCall or functionResponse parts`,
  );
}

/** A tool result's text: its `output` when that is all it holds (as Gemini CLI sends it), else its JSON. */
function responseText(response: Record<string, unknown> | undefined): string {
  const r = response ?? {};
  const keys = Object.keys(r);
  if (keys.length === 1 && typeof r.output === 'string') return r.output;
  return JSON.stringify(r);
}

/**
 * The arguments the model wrote for a call the client echoes: Gemini CLI renames an id to
 * `<name>__<id>`, so both spellings are looked up; a call the proxy never sent keeps its `args`.
 */
function rawArgsOf(
  call: z.output<typeof FunctionCall>,
  rawArgs: Map<string, string>,
): string | Record<string, unknown> {
  const id = call.id ?? '';
  const prefix = `${call.name}__`;
  const own = id.startsWith(prefix) ? id.slice(prefix.length) : undefined;
  return rawArgs.get(id) ?? (own === undefined ? undefined : rawArgs.get(own)) ?? call.args ?? {};
}

function modelMessage(parts: GeminiPart[], rawArgs: Map<string, string>): TemplateMessage {
  const msg: TemplateMessage = { role: 'assistant', content: '' };
  const text: string[] = [];
  const thoughts: string[] = [];
  for (const part of parts) {
    const kind = kindOf(part);
    if (kind === 'text') text.push(part.text!);
    else if (kind === 'thought') thoughts.push(part.text!);
    else if (kind === 'call') {
      const call = part.functionCall!;
      msg.tool_calls ??= [];
      msg.tool_calls.push({
        id: call.id ?? '',
        type: 'function',
        function: { name: call.name, arguments: rawArgsOf(call, rawArgs) },
      });
    } else throw new RequestError(400, 'a functionResponse part belongs in a user turn, not a model turn');
  }
  // Gemini CLI joins a turn's streamed text parts into one; joined the same way, either spelling renders alike.
  msg.content = text.join('');
  if (thoughts.length > 0) msg.reasoning_content = thoughts.join('');
  return msg;
}

/** A user turn: function responses become tool messages, runs of text parts user messages, in order. */
function userMessages(parts: GeminiPart[]): TemplateMessage[] {
  const out: TemplateMessage[] = [];
  let text: string[] = [];
  const flush = () => {
    if (text.length > 0) out.push({ role: 'user', content: text.join('\n') });
    text = [];
  };
  for (const part of parts) {
    const kind = kindOf(part);
    if (kind === 'text' || kind === 'thought') text.push(part.text!);
    else if (kind === 'response') {
      flush();
      const r = part.functionResponse!;
      out.push({ role: 'tool', content: responseText(r.response), tool_call_id: r.id ?? '' });
    } else throw new RequestError(400, 'a functionCall part belongs in a model turn, not a user turn');
  }
  flush();
  return out;
}

/**
 * Parse a Gemini `generateContent` request; `stream` comes from the method the path names
 * (`streamGenerateContent`), `model` from the path.
 */
export function parseGeminiRequest(
  json: unknown,
  rawArgs: Map<string, string>,
  route: { model: string; stream: boolean },
): ChatRequest {
  const r = GeminiRequestSchema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw new RequestError(
      400,
      `invalid generateContent request: ${issue.path.join('.') || '(root)'}: ${issue.message}`,
    );
  }
  const body = r.data;
  const config = (body.generationConfig ?? {}) as Record<string, unknown>;
  if (config.candidateCount !== undefined && config.candidateCount !== 1) {
    throw new RequestError(400, `candidateCount=${config.candidateCount} is not supported; send 1`);
  }
  const messages: TemplateMessage[] = [];
  const system = body.systemInstruction;
  if (system !== undefined) {
    const content = typeof system === 'string' ? system : system.parts.map((p) => p.text ?? '').join('\n');
    messages.push({ role: 'system', content });
  }
  for (const c of body.contents) {
    if (c.role === 'model') messages.push(modelMessage(c.parts, rawArgs));
    else if (c.role === undefined || c.role === 'user') messages.push(...userMessages(c.parts));
    else
      throw new RequestError(
        400,
        `content role ${JSON.stringify(c.role)} is not supported; send user or model`,
      );
  }
  const tools: ToolDefinition[] = [];
  for (const t of body.tools ?? []) {
    for (const f of t.functionDeclarations ?? []) {
      const fn: ToolDefinition['function'] = { name: f.name };
      if (f.description !== undefined) fn.description = f.description;
      const parameters = f.parametersJsonSchema ?? f.parameters;
      if (parameters !== undefined) fn.parameters = parameters;
      tools.push({ type: 'function', function: fn });
    }
  }
  const sampling: HarnessSampling = {};
  for (const [knob, wire] of Object.entries(GEMINI_KNOBS)) {
    if (config[knob] !== undefined && config[knob] !== null) sampling[wire] = config[knob];
  }
  return {
    messages,
    tools,
    stream: route.stream,
    includeUsage: true,
    model: route.model,
    maxTokens: body.generationConfig?.maxOutputTokens,
    sampling,
    templateKwargs: undefined,
  };
}

/** The model's turn as Gemini parts: its thoughts (as thought parts), text and function calls. */
function turnParts(r: TurnReply): Array<Record<string, unknown>> {
  const parts: Array<Record<string, unknown>> = [];
  if (r.parsed.reasoning !== undefined) parts.push({ text: r.parsed.reasoning, thought: true });
  if (r.parsed.content !== '') parts.push({ text: r.parsed.content });
  r.parsed.toolCalls.forEach((c, i) => {
    parts.push({ functionCall: { id: r.toolCallIds[i]!, name: c.name, args: argsObject(c.arguments) } });
  });
  return parts;
}

function argsObject(text: string): Record<string, unknown> {
  try {
    const args = JSON.parse(text) as unknown;
    return args !== null && typeof args === 'object' && !Array.isArray(args)
      ? (args as Record<string, unknown>)
      : {};
  } catch {
    return {};
  }
}

/** `STOP` (a function call ends a turn with `STOP` too), `MAX_TOKENS`, or `OTHER` for an aborted turn. */
export function geminiFinish(r: TurnReply): string {
  return r.finishReason === 'length' ? 'MAX_TOKENS' : r.finishReason === 'abort' ? 'OTHER' : 'STOP';
}

function usage(promptTokens: number, outputTokens: number) {
  return {
    promptTokenCount: promptTokens,
    candidatesTokenCount: outputTokens,
    totalTokenCount: promptTokens + outputTokens,
  };
}

/** A finished turn as a `GenerateContentResponse`. */
export function geminiJson(r: TurnReply): unknown {
  return {
    candidates: [
      { content: { role: 'model', parts: turnParts(r) }, finishReason: geminiFinish(r), index: 0 },
    ],
    usageMetadata: usage(r.promptTokens, r.outputTokens),
    modelVersion: r.model,
    responseId: r.id,
  };
}

/**
 * The SSE of `streamGenerateContent?alt=sse`: one `data:` frame per delta, each a
 * `GenerateContentResponse` with that delta's part; the last one carries `finishReason` and usage.
 */
export function geminiEncoder(meta: StreamMeta): StreamEncoder {
  const frame = (parts: Array<Record<string, unknown>>, extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({
      candidates: [{ content: { role: 'model', parts }, index: 0, ...extra }],
      modelVersion: meta.model,
      responseId: meta.id,
    })}\n\n`;
  return {
    start: () => '',
    reasoningDelta: (text) => frame([{ text, thought: true }]),
    textDelta: (text) => frame([{ text }]),
    toolCall: (call) =>
      frame([{ functionCall: { id: call.id, name: call.name, args: argsObject(call.arguments) } }]),
    finish: (r) =>
      `data: ${JSON.stringify({
        candidates: [
          { content: { role: 'model', parts: [{ text: '' }] }, finishReason: geminiFinish(r), index: 0 },
        ],
        usageMetadata: usage(r.promptTokens, r.outputTokens),
        modelVersion: meta.model,
        responseId: meta.id,
      })}\n\n`,
    error: (status, message) => `data: ${JSON.stringify(errorBody('gemini', status, message))}\n\n`,
  };
}
