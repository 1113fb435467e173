/**
 * The OpenAI Responses API dialect of the capture proxy (`POST /v1/responses`), as Codex speaks it:
 * full-history requests (`store: false`), `input` items become template messages, function, custom
 * (freeform) and namespaced tools become template tools, and a generated turn becomes a `response`
 * object or its SSE event stream. Nothing is stored server-side, so `previous_response_id`,
 * `conversation`, `store: true` and `background: true` are refused.
 */
import { z } from 'zod';
import type { TemplateMessage, ToolDefinition } from '../engine/tokenizer/template.js';
import { type ChatRequest, RequestError } from './dialects.js';

/** What a tool name the model calls stands for on the Responses wire. */
export interface ResponsesTool {
  kind: 'function' | 'custom';
  /** The name the client declared (inside its namespace, when it has one). */
  name: string;
  namespace: string | undefined;
}

/** Request fields a `response` object echoes back. */
export interface ResponsesEcho {
  instructions: string | null;
  maxOutputTokens: number | null;
  temperature: number | null;
  topP: number | null;
  toolChoice: unknown;
  parallelToolCalls: boolean;
  reasoningEffort: string | null;
  tools: unknown[];
}

export interface ResponsesRequest {
  chat: ChatRequest;
  /** Template tool name → what it is on the wire (to answer `custom_tool_call` / namespaced calls). */
  tools: Map<string, ResponsesTool>;
  echo: ResponsesEcho;
}

const Part = z.looseObject({ type: z.string(), text: z.string().optional() });

const InputItem = z.looseObject({
  type: z.string().optional(),
  role: z.string().optional(),
  content: z.union([z.string(), z.array(Part)]).nullish(),
  call_id: z.string().optional(),
  name: z.string().optional(),
  namespace: z.string().nullish(),
  arguments: z.string().optional(),
  input: z.string().optional(),
  output: z.union([z.string(), z.array(Part), z.looseObject({ content: z.string() })]).optional(),
});

const FunctionTool = z.looseObject({
  type: z.literal('function'),
  name: z.string().min(1),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
});

const Tool = z.looseObject({
  type: z.string(),
  name: z.string().optional(),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  format: z
    .looseObject({ type: z.string(), syntax: z.string().optional(), definition: z.string().optional() })
    .nullish(),
  tools: z.array(FunctionTool).optional(),
});

export const ResponsesRequestSchema = z.looseObject({
  model: z.string().optional(),
  input: z.union([z.string(), z.array(InputItem)]),
  instructions: z.string().nullish(),
  tools: z.array(Tool).nullish(),
  tool_choice: z.unknown().optional(),
  parallel_tool_calls: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  store: z.boolean().nullish(),
  background: z.boolean().nullish(),
  max_output_tokens: z.number().int().positive().nullish(),
  temperature: z.number().nullish(),
  top_p: z.number().nullish(),
  reasoning: z.looseObject({ effort: z.string().nullish(), summary: z.string().nullish() }).nullish(),
  text: z.looseObject({ format: z.looseObject({ type: z.string() }).nullish() }).nullish(),
});

/** Tools the model cannot call here: hosted tools run on the provider's servers, not in the harness. */
const HOSTED_TOOLS = new Set([
  'web_search',
  'web_search_preview',
  'file_search',
  'code_interpreter',
  'image_generation',
  'computer_use_preview',
  'mcp',
  'local_shell',
  'tool_search',
]);

/** One flat template name for a namespaced tool: `ns_name`, or `ns__name` for a namespace `ns__`. */
export function flatToolName(name: string, namespace: string | null | undefined): string {
  if (!namespace) return name;
  return namespace.endsWith('_') || name.startsWith('_') ? `${namespace}${name}` : `${namespace}_${name}`;
}

/** Refuse what needs server-side state, naming the field and the fix. */
function refuseStateful(body: Record<string, unknown>): void {
  const fix = 'the proxy stores nothing: send the whole history in `input` with `store: false`';
  if (body.previous_response_id != null) {
    throw new RequestError(
      400,
      `previous_response_id (${JSON.stringify(body.previous_response_id)}) is not supported; ${fix}`,
    );
  }
  if (body.conversation != null) {
    throw new RequestError(400, `conversation is not supported; ${fix}`);
  }
  if (body.store === true) throw new RequestError(400, `store: true is not supported; ${fix}`);
  if (body.background === true) {
    throw new RequestError(400, 'background: true is not supported; send background: false (or omit it)');
  }
}

function parse<S extends z.ZodType>(schema: S, json: unknown): z.output<S> {
  const r = schema.safeParse(json);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  throw new RequestError(
    400,
    `invalid responses request: ${issue.path.join('.') || '(root)'}: ${issue.message}`,
  );
}

function partsText(content: string | Array<z.infer<typeof Part>> | null | undefined, where: string): string {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  return content
    .map((p, i) => {
      if (p.text === undefined || !['input_text', 'output_text', 'text', 'reasoning_text'].includes(p.type)) {
        throw new RequestError(
          400,
          `${where}.content[${i}]: part type ${JSON.stringify(p.type)} is not supported; send input_text/output_text parts`,
        );
      }
      return p.text;
    })
    .join('');
}

function outputText(output: z.infer<typeof InputItem>['output'], where: string): string {
  if (output === undefined) return '';
  if (typeof output === 'string') return output;
  if (Array.isArray(output)) return partsText(output, where);
  return output.content;
}

/** The template tools of a request, and what each template name is on the wire. */
function templateTools(tools: z.infer<typeof Tool>[]): {
  defs: ToolDefinition[];
  index: Map<string, ResponsesTool>;
} {
  const defs: ToolDefinition[] = [];
  const index = new Map<string, ResponsesTool>();
  const add = (def: ToolDefinition, wire: ResponsesTool, where: string) => {
    if (index.has(def.function.name)) {
      throw new RequestError(
        400,
        `${where}: tool name ${JSON.stringify(def.function.name)} is declared twice`,
      );
    }
    index.set(def.function.name, wire);
    defs.push(def);
  };
  tools.forEach((t, i) => {
    const where = `tools[${i}]`;
    if (HOSTED_TOOLS.has(t.type)) return;
    if (t.type === 'namespace') {
      if (!t.name) throw new RequestError(400, `${where}.name: a namespace needs a name`);
      for (const inner of t.tools ?? []) {
        const name = flatToolName(inner.name, t.name);
        add(
          { type: 'function', function: functionOf(name, inner.description, inner.parameters) },
          { kind: 'function', name: inner.name, namespace: t.name },
          where,
        );
      }
      return;
    }
    if (!t.name) throw new RequestError(400, `${where}.name: a ${t.type} tool needs a name`);
    if (t.type === 'function') {
      add(
        { type: 'function', function: functionOf(t.name, t.description, t.parameters) },
        { kind: 'function', name: t.name, namespace: undefined },
        where,
      );
    } else if (t.type === 'custom') {
      // A freeform tool takes raw text: the model sees one string argument `input`, its grammar described.
      const format = t.format;
      const input =
        format?.type === 'grammar' && format.definition
          ? `The raw input, in this ${format.syntax ?? ''} grammar:\n${format.definition}`
          : 'The raw input text.';
      const parameters = {
        type: 'object',
        properties: { input: { type: 'string', description: input } },
        required: ['input'],
      };
      add(
        { type: 'function', function: functionOf(t.name, t.description, parameters) },
        { kind: 'custom', name: t.name, namespace: undefined },
        where,
      );
    } else {
      throw new RequestError(
        400,
        `${where}.type: tool type ${JSON.stringify(t.type)} is not supported; send function, custom or namespace tools`,
      );
    }
  });
  return { defs, index };
}

function functionOf(
  name: string,
  description: string | null | undefined,
  parameters: Record<string, unknown> | null | undefined,
): ToolDefinition['function'] {
  return {
    name,
    ...(description != null ? { description } : {}),
    ...(parameters != null ? { parameters } : {}),
  };
}

/**
 * `input` items → template messages. Consecutive model-side items (reasoning, an assistant message,
 * calls) are one assistant turn; a reasoning item after content or calls starts the next turn.
 */
function templateMessages(
  input: string | Array<z.infer<typeof InputItem>>,
  instructions: string | null | undefined,
  rawArgs: Map<string, string>,
): TemplateMessage[] {
  const messages: TemplateMessage[] = [];
  if (instructions != null) messages.push({ role: 'system', content: instructions });
  if (typeof input === 'string') {
    messages.push({ role: 'user', content: input });
    return messages;
  }
  let turn: TemplateMessage | undefined;
  const close = () => {
    if (turn) messages.push(turn);
    turn = undefined;
  };
  const open = () => {
    turn ??= { role: 'assistant', content: '' };
    return turn;
  };
  input.forEach((item, i) => {
    const where = `input[${i}]`;
    const type = item.type ?? 'message';
    if (type === 'message') {
      const role = item.role;
      if (role === 'assistant') {
        if (turn?.tool_calls) close();
        open().content += partsText(item.content, where);
        return;
      }
      if (role !== 'user' && role !== 'system' && role !== 'developer') {
        throw new RequestError(
          400,
          `${where}.role: ${JSON.stringify(role)} is not a message role; send user, assistant, system or developer`,
        );
      }
      close();
      messages.push({
        role: role === 'developer' ? 'system' : role,
        content: partsText(item.content, where),
      });
    } else if (type === 'reasoning') {
      if (turn && (turn.content !== '' || turn.tool_calls)) close();
      const text = Array.isArray(item.content) ? partsText(item.content, where) : '';
      const t = open();
      t.reasoning_content = (t.reasoning_content ?? '') + text;
    } else if (type === 'function_call' || type === 'custom_tool_call') {
      if (!item.call_id || !item.name) {
        throw new RequestError(400, `${where}: a ${type} item needs call_id and name`);
      }
      const t = open();
      t.tool_calls ??= [];
      const sent =
        type === 'function_call' ? (item.arguments ?? '{}') : JSON.stringify({ input: item.input ?? '' });
      t.tool_calls.push({
        id: item.call_id,
        type: 'function',
        function: {
          name: type === 'function_call' ? flatToolName(item.name, item.namespace) : item.name,
          // the exact text the model wrote, when this proxy produced the call
          arguments: rawArgs.get(item.call_id) ?? sent,
        },
      });
    } else if (type === 'function_call_output' || type === 'custom_tool_call_output') {
      if (!item.call_id) throw new RequestError(400, `${where}: a ${type} item needs call_id`);
      close();
      messages.push({ role: 'tool', content: outputText(item.output, where), tool_call_id: item.call_id });
    } else if (type === 'item_reference') {
      throw new RequestError(
        400,
        `${where}: item_reference needs stored items; the proxy stores nothing: send the items themselves (store: false)`,
      );
    } else {
      throw new RequestError(
        400,
        `${where}.type: input item type ${JSON.stringify(type)} is not supported; send message, reasoning, function_call(_output) or custom_tool_call(_output) items`,
      );
    }
  });
  close();
  return inCallOrder(messages);
}

/** Tool results after an assistant turn, put in the order of its calls (parallel calls come back in any order). */
function inCallOrder(messages: TemplateMessage[]): TemplateMessage[] {
  for (let i = 0; i < messages.length; i++) {
    const calls = messages[i]!.tool_calls;
    if (!calls || calls.length < 2) continue;
    let end = i + 1;
    while (end < messages.length && messages[end]!.role === 'tool') end++;
    const order = new Map(calls.map((c, k) => [c.id, k]));
    const results = messages.slice(i + 1, end);
    const rank = (m: TemplateMessage) => order.get(m.tool_call_id) ?? calls.length;
    results.sort((a, b) => rank(a) - rank(b));
    messages.splice(i + 1, results.length, ...results);
  }
  return messages;
}

/** Parse a Responses API request (after refusing what needs stored state). */
export function parseResponsesRequest(json: unknown, rawArgs: Map<string, string>): ResponsesRequest {
  if (json !== null && typeof json === 'object' && !Array.isArray(json)) {
    refuseStateful(json as Record<string, unknown>);
  }
  const body = parse(ResponsesRequestSchema, json);
  const format = body.text?.format?.type;
  if (format !== undefined && format !== 'text') {
    throw new RequestError(
      400,
      `text.format.type ${JSON.stringify(format)} is not supported; structured output is not enforced here: send text`,
    );
  }
  const { defs, index } = templateTools(body.tools ?? []);
  const effort = body.reasoning?.effort ?? null;
  const sampling: Record<string, unknown> = {};
  if (body.temperature != null) sampling.temperature = body.temperature;
  if (body.top_p != null) sampling.top_p = body.top_p;
  return {
    chat: {
      messages: templateMessages(body.input, body.instructions, rawArgs),
      tools: defs,
      stream: body.stream ?? false,
      includeUsage: true,
      model: body.model,
      maxTokens: body.max_output_tokens ?? undefined,
      sampling,
      // Templates that read an effort (gpt-oss) get it; others ignore the variable.
      templateKwargs: effort !== null ? { reasoning_effort: effort } : undefined,
    },
    tools: index,
    echo: {
      instructions: body.instructions ?? null,
      maxOutputTokens: body.max_output_tokens ?? null,
      temperature: body.temperature ?? null,
      topP: body.top_p ?? null,
      toolChoice: body.tool_choice ?? 'auto',
      parallelToolCalls: body.parallel_tool_calls ?? true,
      reasoningEffort: effort,
      tools: body.tools ?? [],
    },
  };
}
