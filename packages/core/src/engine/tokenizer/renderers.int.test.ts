import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { qwen3 } from '../../__fixtures__/tokenizer.js';
import { nativeRenderer, qwen3Renderer } from './renderers.js';
import type { TemplateMessage, ToolDefinition } from './template.js';

/** Text that exercises the template's string handling: newlines and spaces at the edges, think tags, markup. */
function textOf(pieces: string[]) {
  return fc.array(fc.constantFrom(...pieces), { maxLength: 10 }).map((xs) => xs.join(''));
}
const MARKUP = [
  'a',
  'b c',
  '\n',
  '<think>',
  '</think>',
  '<tool_response>',
  '</tool_response>',
  'é',
  '"',
  '{',
  '数',
];
const text = fc.oneof(textOf([...MARKUP, ' ', '\t']), fc.string({ maxLength: 12 }));
// @huggingface/jinja's strip/lstrip/rstrip ignore their argument and trim all whitespace, where Python
// (transformers, SGLang, vLLM) strips only the given characters; comparisons with it avoid such text.
const jinjaSafeText = textOf(MARKUP);
const json = fc.oneof(
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.string({ maxLength: 6 }),
  fc.array(fc.oneof(fc.integer(), fc.string({ maxLength: 4 })), { maxLength: 3 }),
);
function conversation(text: fc.Arbitrary<string>) {
  const toolCall = fc.record({
    type: fc.constant('function' as const),
    function: fc.record({
      name: fc.string({ maxLength: 8 }),
      arguments: fc.oneof(text, fc.dictionary(fc.string({ maxLength: 5 }), json, { maxKeys: 3 })),
    }),
  });
  const message: fc.Arbitrary<TemplateMessage> = fc.oneof(
    fc.record({ role: fc.constantFrom('system', 'user', 'tool', 'developer'), content: text }),
    fc.record(
      {
        role: fc.constant('assistant'),
        content: text,
        reasoning_content: text,
        tool_calls: fc.array(toolCall, { maxLength: 2 }),
      },
      { requiredKeys: ['role', 'content'] },
    ),
  );
  const tool: fc.Arbitrary<ToolDefinition> = fc.record({
    type: fc.constant('function' as const),
    function: fc.record(
      {
        name: fc.string({ maxLength: 8 }),
        description: text,
        parameters: fc.dictionary(fc.string({ maxLength: 5 }), json, { maxKeys: 3 }),
      },
      { requiredKeys: ['name'] },
    ),
  });
  return { message, tool };
}

describe('native chat renderers', () => {
  it('are picked by template hash for Qwen3 and not for other templates', async () => {
    const tok = await qwen3();
    expect(tok.nativeRendering).toBe(true);
    expect(nativeRenderer(tok.chatTemplate)).toBe(qwen3Renderer);
    expect(nativeRenderer(`${tok.chatTemplate} `)).toBeUndefined();
  });

  it('property: the Qwen3 renderer writes exactly what @huggingface/jinja renders from the template', async () => {
    const tok = await qwen3();
    const { message, tool } = conversation(jinjaSafeText);
    fc.assert(
      fc.property(
        fc.array(message, { minLength: 1, maxLength: 7 }),
        fc.array(tool, { maxLength: 2 }),
        fc.boolean(),
        fc.constantFrom(undefined, true, false),
        (messages, tools, addGenerationPrompt, thinking) => {
          const options = {
            tools,
            addGenerationPrompt,
            ...(thinking === undefined ? {} : { templateKwargs: { enable_thinking: thinking } }),
          };
          expect(qwen3Renderer(messages, options)).toBe(tok.renderJinja(messages, options));
        },
      ),
      { numRuns: 1500 },
    );
  });

  it('writes exactly what Python jinja2 renders the way transformers does (the engines’ reference)', async () => {
    const tok = await qwen3();
    const { message, tool } = conversation(text);
    const cases = fc.sample(
      fc.record({
        messages: fc.array(message, { minLength: 1, maxLength: 7 }),
        tools: fc.array(tool, { maxLength: 2 }),
        add_generation_prompt: fc.boolean(),
        enable_thinking: fc.constantFrom(undefined, true, false),
      }),
      { numRuns: 400, seed: 20261130 },
    );
    let output: string;
    try {
      output = execFileSync('python3', ['-c', PYTHON_RENDER], {
        input: JSON.stringify({ template: tok.chatTemplate, cases }),
        encoding: 'utf8',
        maxBuffer: 64 << 20,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
    } catch (cause) {
      throw new Error(
        `this test needs python3 with jinja2 (Debian: python3-jinja2): ${(cause as { stderr?: string }).stderr ?? cause}`,
      );
    }
    const rendered = JSON.parse(output) as string[];
    expect(rendered).toHaveLength(cases.length);
    cases.forEach((c, i) => {
      const options = {
        tools: c.tools,
        addGenerationPrompt: c.add_generation_prompt,
        ...(c.enable_thinking === undefined
          ? {}
          : { templateKwargs: { enable_thinking: c.enable_thinking } }),
      };
      expect(qwen3Renderer(c.messages, options), `case ${i}: ${JSON.stringify(c)}`).toBe(rendered[i]);
    });
  });
});

/** transformers' chat-template environment (trim/lstrip blocks, loop controls, tojson with ensure_ascii=False). */
const PYTHON_RENDER = `
import json, sys
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
req = json.load(sys.stdin)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters['tojson'] = tojson
template = env.from_string(req['template'])
out = []
for c in req['cases']:
    kwargs = {} if c.get('enable_thinking') is None else {'enable_thinking': c['enable_thinking']}
    tools = c['tools'] or None
    out.append(template.render(messages=c['messages'], tools=tools, add_generation_prompt=c['add_generation_prompt'], **kwargs))
json.dump(out, sys.stdout)
`;
