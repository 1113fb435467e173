import { readFileSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { QWEN3_DIR, qwen3 } from '../../__fixtures__/tokenizer.js';
import { ConfigError } from '../../errors.js';
import { hermesToolParser, parseResponse, pythonJson } from './parsers.js';
import type { TemplateMessage } from './template.js';
import { loadTokenizer } from './tokenizer.js';

const tools = [
  {
    type: 'function' as const,
    function: {
      name: 'bash',
      description: 'Run a shell command',
      parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] },
    },
  },
];

describe('loadTokenizer (Qwen3 files from disk)', () => {
  it('maps special tokens to their ids and round-trips text', async () => {
    const tok = await qwen3();
    expect(tok.eosToken).toBe('<|im_end|>');
    expect(tok.eosTokenId).toBe(151645);
    expect(tok.tokenId('<think>')).toBe(151667);
    expect(tok.tokenId('<tool_call>')).toBe(151657);
    const text = '<|im_start|>user\nFix `foo()` — naïve 数据 ✓<|im_end|>\n';
    const ids = tok.encode(text);
    expect(ids[0]).toBe(151644);
    expect(tok.decode(ids)).toBe(text);
    expect(tok.decode([])).toBe('');
  });

  it('segment-cached encoding equals the reference tokenizer on arbitrary text with special tokens', async () => {
    const tok = await qwen3();
    const reference = new Tokenizer(
      JSON.parse(readFileSync(join(QWEN3_DIR, 'tokenizer.json'), 'utf8')),
      JSON.parse(readFileSync(join(QWEN3_DIR, 'tokenizer_config.json'), 'utf8')),
    );
    const piece = fc.oneof(
      fc.string({ maxLength: 12 }),
      fc.constantFrom(
        '<|im_start|>',
        '<|im_end|>',
        '<think>',
        '</think>',
        '<tool_call>',
        '\n',
        ' ',
        '  x',
        '数据',
      ),
    );
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 12 }), (pieces) => {
        const text = pieces.join('');
        // twice: the second call is served from the segment cache
        const expected = reference.encode(text, { add_special_tokens: false }).ids;
        expect(Array.from(tok.encode(text))).toEqual(expected);
        expect(Array.from(tok.encode(text))).toEqual(expected);
      }),
      { numRuns: 300 },
    );
  });

  it('fast byte-level decoding equals the reference decoder, with and without special tokens', async () => {
    const tok = await qwen3();
    const reference = new Tokenizer(
      JSON.parse(readFileSync(join(QWEN3_DIR, 'tokenizer.json'), 'utf8')),
      JSON.parse(readFileSync(join(QWEN3_DIR, 'tokenizer_config.json'), 'utf8')),
    );
    const id = fc.oneof(fc.integer({ min: 0, max: 151642 }), fc.integer({ min: 151643, max: 151668 }));
    fc.assert(
      fc.property(fc.array(id, { minLength: 1, maxLength: 40 }), fc.boolean(), (ids, skip) => {
        const expected = reference.decode(ids, {
          skip_special_tokens: skip,
          clean_up_tokenization_spaces: false,
        });
        expect(tok.decode(ids, { skipSpecialTokens: skip })).toBe(expected);
      }),
      { numRuns: 500 },
    );
  });

  it('renders tools, tool calls, tool responses and the generation prompt with the model template', async () => {
    const tok = await qwen3();
    const messages: TemplateMessage[] = [
      { role: 'system', content: 'You are a coding agent.' },
      { role: 'user', content: 'Fix foo.py' },
      {
        role: 'assistant',
        content: 'Reading it.',
        reasoning_content: 'look first',
        tool_calls: [{ type: 'function', function: { name: 'bash', arguments: '{"cmd": "cat foo.py"}' } }],
      },
      { role: 'tool', content: 'def foo(): return 1' },
    ];
    const text = tok.render(messages, { tools });
    expect(text).toContain('<tools>\n{"type": "function", "function": {"name": "bash"');
    // after the last user query the reasoning block is kept…
    expect(text).toContain(
      '<|im_start|>assistant\n<think>\nlook first\n</think>\n\nReading it.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "cat foo.py"}}\n</tool_call><|im_end|>\n',
    );
    expect(text).toContain(
      '<|im_start|>user\n<tool_response>\ndef foo(): return 1\n</tool_response><|im_end|>\n',
    );
    expect(text.endsWith('<|im_start|>assistant\n')).toBe(true);
    // …and dropped once a new user query follows (the Qwen3 drift source)
    const later = tok.render([...messages, { role: 'user', content: 'Now run the tests' }]);
    expect(later).not.toContain('look first');
    expect(later).toContain('<|im_start|>assistant\nReading it.\n<tool_call>');
    expect(tok.render(messages.slice(0, 2), { templateKwargs: { enable_thinking: false } })).toMatch(
      /<\|im_start\|>assistant\n<think>\n\n<\/think>\n\n$/,
    );
    expect(Array.from(tok.encodeChat(messages, { tools }))).toEqual(
      Array.from(tok.encode(tok.render(messages, { tools }))),
    );
  });

  it('fails with a ConfigError naming the file when the directory is wrong or has no template', async () => {
    await expect(loadTokenizer('/nonexistent-model-dir')).rejects.toThrow(
      /tokenizer\.json.*pass the model directory/,
    );
    const dir = await mkdtemp(join(tmpdir(), 'vime-tok-'));
    await writeFile(join(dir, 'tokenizer.json'), readFileSync(join(QWEN3_DIR, 'tokenizer.json')));
    await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<|im_end|>' }));
    const error = await loadTokenizer(dir).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toMatch(/no chat_template/);
    await writeFile(join(dir, 'chat_template.jinja'), '{{ messages[0].content }}');
    const tok = await loadTokenizer(dir);
    expect(tok.render([{ role: 'user', content: 'hi' }])).toBe('hi');
  });
});

describe('response parsers', () => {
  it('splits Qwen3 reasoning, content and Hermes tool calls, keeping the raw argument text', () => {
    const out = parseResponse(
      '<think>\nplan\n</think>\n\nLet me look.\n<tool_call>\n{"name": "bash", "arguments": {"cmd":  "ls -la"}}\n</tool_call>\n<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call>',
    );
    expect(out.reasoning).toBe('plan');
    expect(out.content).toBe('Let me look.');
    expect(out.toolCalls).toEqual([
      { name: 'bash', arguments: '{"cmd":  "ls -la"}' },
      { name: 'read', arguments: '{"path": "a.py"}' },
    ]);
  });

  it('leaves malformed tool calls in the content and text without markup untouched', () => {
    const bad = 'x <tool_call>\n{not json}\n</tool_call>';
    expect(hermesToolParser.parse(bad)).toEqual({ content: bad, toolCalls: [] });
    expect(parseResponse('plain answer')).toEqual({
      content: 'plain answer',
      reasoning: undefined,
      toolCalls: [],
    });
  });

  it('writes JSON with Python separators, as tojson does', () => {
    expect(pythonJson({ a: [1, 'x', { b: null }], c: true })).toBe('{"a": [1, "x", {"b": null}], "c": true}');
  });
});
