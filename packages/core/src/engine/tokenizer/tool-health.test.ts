import { describe, expect, it } from 'vitest';
import { hermesToolParser } from './parsers.js';
import { addToolCallHealth, NO_TOOL_CALLS, toolCallHealth } from './tool-health.js';

const block = (body: string) => `<tool_call>\n${body}\n</tool_call>`;
const TOOLS = ['bash', 'read'];

describe('toolCallHealth: the same blocks the parser reads, and why the others fail', () => {
  it('no markup, no calls', () => {
    expect(toolCallHealth('All done.', TOOLS)).toEqual(NO_TOOL_CALLS);
  });

  it('well-formed calls parse, named tools are known', () => {
    const text = `Two steps.\n${block('{"name": "bash", "arguments": {"cmd": "ls"}}')}\n${block('{"name": "read", "arguments": {}}')}`;
    expect(toolCallHealth(text, TOOLS)).toEqual({ ...NO_TOOL_CALLS, emitted: 2, parsed: 2 });
    // The counts agree with the parser that makes the harness's tool calls.
    expect(hermesToolParser.parse(text).toolCalls).toHaveLength(2);
  });

  it('malformed blocks in several spellings: bad JSON, no name, a name that is not a string, never closed', () => {
    const spellings = [
      block('{"name": "bash", "arguments": {"cmd": "ls"}'), // missing brace
      block("{'name': 'bash', 'arguments': {}}"), // Python dict, not JSON
      block('{"arguments": {"cmd": "ls"}}'), // no name
      block('{"name": 7, "arguments": {}}'), // name not a string
      block('["bash", {"cmd": "ls"}]'), // not an object
      block(''), // empty
      '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}', // never closed (cut at max tokens)
    ];
    for (const text of spellings) {
      expect(toolCallHealth(text, TOOLS), text).toEqual({ ...NO_TOOL_CALLS, emitted: 1, malformed: 1 });
      expect(hermesToolParser.parse(text).toolCalls, text).toEqual([]);
    }
  });

  it('an unclosed block before a good one counts both, one malformed', () => {
    const text = `<tool_call>{"name": "bash"\n${block('{"name": "bash", "arguments": {"cmd": "ls"}}')}`;
    expect(toolCallHealth(text, TOOLS)).toEqual({ ...NO_TOOL_CALLS, emitted: 2, parsed: 1, malformed: 1 });
  });

  it('unknown tools (in any case spelling) and arguments that are not an object', () => {
    const text = [
      block('{"name": "Bash", "arguments": {"cmd": "ls"}}'),
      block('{"name": "web_search", "arguments": {"q": "x"}}'),
      block('{"name": "bash", "arguments": "{\\"cmd\\": \\"ls\\"}"}'), // arguments as a JSON string
      block('{"name": "bash", "arguments": ["ls"]}'),
      block('{"name": "bash", "arguments": 3}'),
    ].join('\n');
    expect(toolCallHealth(text, TOOLS)).toEqual({
      emitted: 5,
      parsed: 5,
      malformed: 0,
      unknownTool: 2,
      badArguments: 3,
    });
    // Without the declared tools, no call is unknown.
    expect(toolCallHealth(text).unknownTool).toBe(0);
  });

  it('sums', () => {
    const total = addToolCallHealth(
      { ...NO_TOOL_CALLS },
      { ...NO_TOOL_CALLS, emitted: 2, parsed: 1, malformed: 1 },
    );
    addToolCallHealth(total, { emitted: 1, parsed: 1, malformed: 0, unknownTool: 1, badArguments: 0 });
    expect(total).toEqual({ emitted: 3, parsed: 2, malformed: 1, unknownTool: 1, badArguments: 0 });
  });
});
