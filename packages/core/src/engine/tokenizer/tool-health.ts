/**
 * Tool-call health of one model output, by the same parser that makes the calls the harness receives
 * (Qwen3 / Hermes `<tool_call>` blocks): how many calls the model emitted, how many parsed, and why the
 * others did not. A call the parser drops reaches the harness as plain text and usually ends the
 * rollout as an ordinary reward 0: these counts make that failure visible.
 */
import { parseHermesCall } from './parsers.js';

/** The tool calls of one model output, or the sum over several. */
export interface ToolCallHealth {
  /** `<tool_call>` blocks the model opened. */
  emitted: number;
  /** Calls the parser turned into tool calls (whatever their name). */
  parsed: number;
  /** Blocks the parser dropped: JSON that does not parse, no string `name`, or a block never closed. */
  malformed: number;
  /** Parsed calls naming a tool the request did not declare. */
  unknownTool: number;
  /** Parsed calls whose `arguments` are not a JSON object. */
  badArguments: number;
}

/** No calls at all. */
export const NO_TOOL_CALLS: Readonly<ToolCallHealth> = Object.freeze({
  emitted: 0,
  parsed: 0,
  malformed: 0,
  unknownTool: 0,
  badArguments: 0,
});

// A block ends at its closing tag, at the next opening tag (never closed), or at the end of the text.
const BLOCK = /<tool_call>([\s\S]*?)(<\/tool_call>|(?=<tool_call>)|$)/g;

/**
 * The tool-call health of `content` (the output without its reasoning block). `declared` is the names
 * of the tools the request offered; absent, no call counts as an unknown tool.
 */
export function toolCallHealth(content: string, declared?: readonly string[] | undefined): ToolCallHealth {
  if (!content.includes('<tool_call>')) return { ...NO_TOOL_CALLS };
  const known = declared ? new Set(declared) : undefined;
  const health = { ...NO_TOOL_CALLS };
  for (const match of content.matchAll(BLOCK)) {
    health.emitted++;
    const call = match[2] ? parseHermesCall(match[1]!.trim()) : undefined;
    if (!call) {
      health.malformed++;
      continue;
    }
    health.parsed++;
    if (known && !known.has(call.name)) health.unknownTool++;
    if (!isJsonObject(call.arguments)) health.badArguments++;
  }
  return health;
}

function isJsonObject(text: string): boolean {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value);
  } catch {
    return false;
  }
}

/** The sum of several outputs' health (a rollout's turns, a step's rollouts). */
export function addToolCallHealth(total: ToolCallHealth, more: Readonly<ToolCallHealth>): ToolCallHealth {
  total.emitted += more.emitted;
  total.parsed += more.parsed;
  total.malformed += more.malformed;
  total.unknownTool += more.unknownTool;
  total.badArguments += more.badArguments;
  return total;
}
