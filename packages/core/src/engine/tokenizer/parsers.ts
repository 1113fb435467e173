/**
 * Response parsers: split a model's raw output text into reasoning, visible content and tool calls.
 * Parsers are pluggable; the Qwen3/Hermes `<tool_call>` format and `<think>` blocks come built in.
 */

/** A tool call as the chat template sees it: arguments kept as the exact JSON text the model wrote. */
export interface ParsedToolCall {
  name: string;
  /** The arguments' JSON text exactly as sampled (so echoing it back re-renders the same tokens). */
  arguments: string;
}

/** A model response split into its visible text, reasoning and tool calls. */
export interface ParsedResponse {
  /** Visible text, without reasoning and tool-call markup. */
  content: string;
  /** Text of the reasoning block, or undefined when the output had none. */
  reasoning: string | undefined;
  toolCalls: ParsedToolCall[];
}

/** Finds tool calls in (reasoning-free) output text; returns the remaining content and the calls. */
export interface ToolCallParser {
  name: string;
  /** The visible text and the tool calls of a response. */
  parse(text: string): { content: string; toolCalls: ParsedToolCall[] };
}

/** Splits reasoning from content. */
export interface ReasoningParser {
  name: string;
  /** The reasoning and the visible text of a response. */
  parse(text: string): { reasoning: string | undefined; content: string };
}

const TOOL_CALL = /<tool_call>\s*([\s\S]*?)\s*<\/tool_call>/g;

/**
 * Qwen3 / Hermes: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one block per call.
 * A block whose JSON does not parse stays in the content (the harness sees what the model wrote).
 */
export const hermesToolParser: ToolCallParser = {
  name: 'hermes',
  parse(text) {
    if (!text.includes('<tool_call>')) return { content: text, toolCalls: [] };
    const toolCalls: ParsedToolCall[] = [];
    let content = '';
    let last = 0;
    for (const match of text.matchAll(TOOL_CALL)) {
      const call = parseHermesCall(match[1]!);
      if (!call) continue;
      content += text.slice(last, match.index);
      last = match.index + match[0].length;
      toolCalls.push(call);
    }
    content += text.slice(last);
    // The template writes `content + '\n' + <tool_call>`: the separator is markup, not content.
    return { content: toolCalls.length > 0 ? content.replace(/\s+$/, '') : content, toolCalls };
  },
};

export function parseHermesCall(body: string): ParsedToolCall | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const { name, arguments: args } = value as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string') return undefined;
  return { name, arguments: rawArguments(body, args ?? {}) };
}

/** The exact text of the `arguments` value inside the call JSON, when it can be located unambiguously. */
function rawArguments(body: string, parsed: unknown): string {
  const key = body.indexOf('"arguments"');
  if (key >= 0) {
    const colon = body.indexOf(':', key + 11);
    const end = body.lastIndexOf('}');
    if (colon > 0 && end > colon) {
      const raw = body.slice(colon + 1, end).trim();
      try {
        if (JSON.stringify(JSON.parse(raw)) === JSON.stringify(parsed)) return raw;
      } catch {
        // fall through to a canonical rendering
      }
    }
  }
  return typeof parsed === 'string' ? parsed : pythonJson(parsed);
}

/** JSON with Python's `json.dumps` separators (`, ` and `: `), as chat templates' `tojson` writes it. */
export function pythonJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  const parts = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${JSON.stringify(k)}: ${pythonJson(v)}`);
  return `{${parts.join(', ')}}`;
}

/** `<think>…</think>` (Qwen3, DeepSeek-R1 style). Output without a closing tag is all content. */
export const thinkReasoningParser: ReasoningParser = {
  name: 'think',
  parse(text) {
    const close = text.indexOf('</think>');
    if (close < 0) return { reasoning: undefined, content: text };
    const open = text.indexOf('<think>');
    const start = open >= 0 && open < close ? open + 7 : 0;
    return {
      reasoning: text.slice(start, close).replace(/^\n+|\n+$/g, ''),
      content: text.slice(close + 8).replace(/^\n+/, ''),
    };
  },
};

/** Parse a raw output text with the given parsers. */
export function parseResponse(
  text: string,
  parsers: {
    toolCalls?: ToolCallParser | null | undefined;
    reasoning?: ReasoningParser | null | undefined;
  } = {},
): ParsedResponse {
  const { toolCalls = hermesToolParser, reasoning = thinkReasoningParser } = parsers;
  const split = reasoning ? reasoning.parse(text) : { reasoning: undefined, content: text };
  const tools = toolCalls ? toolCalls.parse(split.content) : { content: split.content, toolCalls: [] };
  return { content: tools.content, reasoning: split.reasoning, toolCalls: tools.toolCalls };
}
