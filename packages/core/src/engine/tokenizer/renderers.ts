/**
 * Native chat renderers: hand-written equivalents of well-known chat templates, selected by the
 * template's SHA-256, so the hot path skips the Jinja interpreter (≈2 ms per long chat). Each one is
 * property-tested to produce exactly what the Jinja template renders.
 */
import { createHash } from 'node:crypto';
import type { RenderOptions, TemplateMessage, ToolDefinition } from './template.js';

/** A chat template as a function: messages and options to the prompt text. */
export type ChatRenderer = (messages: readonly TemplateMessage[], options: RenderOptions) => string;

/** JSON as `@huggingface/jinja`'s `tojson` writes it: `, ` and `: ` separators, undefined as null. */
export function templateJson(value: unknown): string {
  if (value === undefined || value === null) return 'null';
  if (typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(templateJson).join(', ')}]`;
  const parts: string[] = [];
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    parts.push(`${JSON.stringify(k)}: ${templateJson(v)}`);
  }
  return `{${parts.join(', ')}}`;
}

const stripNewlines = (s: string, start: boolean, end: boolean): string => {
  let a = 0;
  let b = s.length;
  if (start) while (a < b && s.charCodeAt(a) === 10) a++;
  if (end) while (b > a && s.charCodeAt(b - 1) === 10) b--;
  return s.slice(a, b);
};

const QWEN3_TOOLS_HEADER =
  '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>';
const QWEN3_TOOLS_FOOTER =
  '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n';

/** The Qwen3 chat template (hybrid thinking, Hermes tool calls), rendered natively. */
export const qwen3Renderer: ChatRenderer = (messages, options) => {
  const tools: readonly ToolDefinition[] | undefined = options.tools?.length ? options.tools : undefined;
  const first = messages[0];
  let out = '';
  if (tools) {
    out += '<|im_start|>system\n';
    if (first?.role === 'system') out += `${first.content}\n\n`;
    out += QWEN3_TOOLS_HEADER;
    for (const tool of tools) out += `\n${templateJson(tool)}`;
    out += QWEN3_TOOLS_FOOTER;
  } else if (first?.role === 'system') {
    out += `<|im_start|>system\n${first.content}<|im_end|>\n`;
  }
  // The last real user query: reasoning is only rendered for assistant turns after it.
  let lastQuery = messages.length - 1;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (
      m.role === 'user' &&
      !(m.content.startsWith('<tool_response>') && m.content.endsWith('</tool_response>'))
    ) {
      lastQuery = i;
      break;
    }
  }
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!;
    if (m.role === 'user' || (m.role === 'system' && i > 0)) {
      out += `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`;
    } else if (m.role === 'assistant') {
      let content = m.content;
      let reasoning = '';
      if (m.reasoning_content !== undefined && m.reasoning_content !== null) reasoning = m.reasoning_content;
      else if (content.includes('</think>')) {
        const parts = m.content.split('</think>');
        content = stripNewlines(parts[parts.length - 1]!, true, false);
        const before = stripNewlines(parts[0]!, false, true).split('<think>');
        reasoning = stripNewlines(before[before.length - 1]!, true, false);
      }
      if (i > lastQuery && (i === messages.length - 1 || reasoning)) {
        out += `<|im_start|>assistant\n<think>\n${stripNewlines(reasoning, true, true)}\n</think>\n\n${stripNewlines(content, true, false)}`;
      } else {
        out += `<|im_start|>assistant\n${content}`;
      }
      const calls = m.tool_calls ?? [];
      calls.forEach((call, j) => {
        if ((j === 0 && content) || j > 0) out += '\n';
        const fn = (call.function ?? call) as { name: string; arguments: unknown };
        const args = typeof fn.arguments === 'string' ? fn.arguments : templateJson(fn.arguments);
        out += `<tool_call>\n{"name": "${fn.name}", "arguments": ${args}}\n</tool_call>`;
      });
      out += '<|im_end|>\n';
    } else if (m.role === 'tool') {
      if (i === 0 || messages[i - 1]!.role !== 'tool') out += '<|im_start|>user';
      out += `\n<tool_response>\n${m.content}\n</tool_response>`;
      if (i === messages.length - 1 || messages[i + 1]!.role !== 'tool') out += '<|im_end|>\n';
    }
  }
  if (options.addGenerationPrompt ?? true) {
    out += '<|im_start|>assistant\n';
    if (options.templateKwargs?.enable_thinking === false) out += '<think>\n\n</think>\n\n';
  }
  return out;
};

/** Native renderers by the SHA-256 of the Jinja template they reproduce. */
const KNOWN: Record<string, ChatRenderer> = {
  // Qwen3 (0.6B … 235B-A22B hybrid-thinking releases)
  '87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5': qwen3Renderer,
};

/** The native renderer for a chat template, when one is known. */
export function nativeRenderer(template: string): ChatRenderer | undefined {
  return KNOWN[createHash('sha256').update(template).digest('hex')];
}
