import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import {
  closeAll,
  expectExactRow,
  OBSERVATIONS,
  post,
  script,
  setup,
  sse,
  TOOL_LOOP,
  tools,
} from '../__fixtures__/proxy-harness.js';
import type { TemplateMessage } from '../engine/tokenizer/template.js';
import { captureFetch } from './proxy.js';
import { flatToolName } from './responses.js';

afterEach(closeAll);

type Item = Record<string, unknown> & { type: string };

const responsesTools = [{ type: 'function', ...tools[0]!.function }];

/** The `response` object of a JSON answer, or the one `response.completed` carries, with the stream checked. */
function responseOf(text: string, stream: boolean): { output: Item[]; status: string; usage: unknown } {
  if (!stream) {
    const json = JSON.parse(text);
    expect(json.object).toBe('response');
    return json;
  }
  const events = sse(text).map(({ event, data }) => {
    const e = JSON.parse(data);
    expect(e.type).toBe(event);
    return e;
  });
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  expect(events.slice(0, 2).map((e) => e.type)).toEqual(['response.created', 'response.in_progress']);
  const last = events.at(-1)!;
  expect(['response.completed', 'response.incomplete']).toContain(last.type);
  // what a client assembles from the item events is what the final response carries
  const done = events.filter((e) => e.type === 'response.output_item.done');
  expect(done.map((e) => e.item)).toEqual(last.response.output);
  expect(done.map((e) => e.output_index)).toEqual(done.map((_, i) => i));
  return last.response;
}

/** An output item as Codex sends it back in the next request's `input` (no id, no status). */
function asInput(item: Item): Item {
  const { id: _id, status: _status, ...rest } = item;
  return rest as Item;
}

describe('capture proxy: the Responses API', () => {
  for (const stream of [false, true]) {
    it(`a Codex-style tool loop (${stream ? 'SSE' : 'JSON'}, store: false) packs into one exact row`, async () => {
      const { tokenizer, proxy, calls, drift } = await setup(script(...TOOL_LOOP));
      const session = proxy.openSession(`resp-${stream}`);
      const instructions = 'You are a coding agent.';
      const input: Item[] = [
        {
          type: 'message',
          role: 'developer',
          content: [{ type: 'input_text', text: 'Sandbox: workspace-write.' }],
        },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Fix the failing test.' }] },
      ];
      const chat: TemplateMessage[] = [
        { role: 'system', content: instructions },
        { role: 'system', content: 'Sandbox: workspace-write.' },
        { role: 'user', content: 'Fix the failing test.' },
      ];
      const rendered: string[] = [];
      for (let k = 0; k < 3; k++) {
        rendered.push(tokenizer.render(chat, { tools }));
        const res = await post(
          `${proxy.url}/v1/responses`,
          {
            model: 'policy',
            instructions,
            input,
            tools: responsesTools,
            tool_choice: 'auto',
            parallel_tool_calls: true,
            reasoning: { effort: 'medium', summary: 'auto' },
            store: false,
            stream,
            include: ['reasoning.encrypted_content'],
            prompt_cache_key: 'conversation-1',
          },
          { authorization: `Bearer ${session.apiKey}` },
        );
        expect(res.status).toBe(200);
        expect(res.type).toBe(stream ? 'text/event-stream' : 'application/json');
        const response = responseOf(res.text, stream);
        expect(response.status).toBe('completed');
        const types = response.output.map((o) => o.type);
        const reasoning = response.output[0]!;
        expect(reasoning).toMatchObject({ type: 'reasoning', summary: [] });
        const thought = (reasoning.content as Array<{ type: string; text: string }>)[0]!;
        expect(thought.type).toBe('reasoning_text');
        const message = response.output.find((o) => o.type === 'message');
        const text = message ? (message.content as Array<{ text: string }>)[0]!.text : '';
        const call = response.output.find((o) => o.type === 'function_call');
        input.push(...response.output.map(asInput));
        chat.push({
          role: 'assistant',
          content: text,
          reasoning_content: thought.text,
          ...(call
            ? {
                tool_calls: [
                  {
                    type: 'function',
                    function: { name: 'bash', arguments: JSON.parse(call.arguments as string) },
                  },
                ],
              }
            : {}),
        });
        if (k < 2) {
          expect(types).toEqual(
            k === 0 ? ['reasoning', 'message', 'function_call'] : ['reasoning', 'function_call'],
          );
          expect(call).toMatchObject({
            name: 'bash',
            arguments: k === 0 ? '{"cmd": "ls"}' : '{"cmd": "cat a.py"}',
          });
          expect(call!.call_id).toMatch(/^call_/);
          input.push({ type: 'function_call_output', call_id: call!.call_id, output: OBSERVATIONS[k] });
          chat.push({ role: 'tool', content: OBSERVATIONS[k]! });
        } else {
          expect(types).toEqual(['reasoning', 'message']);
          expect(text).toBe('The bug is in a.py: `return 1` should be `return 2`.');
          expect(thought.text).toBe('The fix is clear.');
        }
        expect(response.usage).toMatchObject({
          input_tokens: calls[k]!.inputIds.length,
          output_tokens: calls[k]!.result.outputIds.length,
          total_tokens: calls[k]!.inputIds.length + calls[k]!.result.outputIds.length,
        });
      }
      const samples = proxy.finishSession(session.id, { reward: 1 });
      expect(samples).toHaveLength(1);
      expectExactRow(samples[0]!, calls, tokenizer, rendered);
      expect(drift).toEqual([
        { sessionId: session.id, turns: 3, rows: 1, forks: 0, realigns: 0, retokenizedTokens: 0 },
      ]);
    });
  }

  it('custom (freeform) and namespaced tools; parallel calls come back in call order whatever order the results are sent in', async () => {
    const patch = '*** Begin Patch\n*** Add File: b.py\n+x = 1\n*** End Patch';
    const both =
      '<tool_call>\n{"name": "apply_patch", "arguments": {"input": ' +
      JSON.stringify(patch) +
      '}}\n</tool_call>\n<tool_call>\n{"name": "mcp__fs__read", "arguments": {"path": "a.py"}}\n</tool_call>';
    const { tokenizer, proxy, calls, drift } = await setup(script(both, 'Done.'));
    const session = proxy.openSession('resp-tools');
    const grammar = 'start: begin_patch hunk+ end_patch';
    const wireTools = [
      {
        type: 'custom',
        name: 'apply_patch',
        description: 'Edit files.',
        format: { type: 'grammar', syntax: 'lark', definition: grammar },
      },
      {
        type: 'namespace',
        name: 'mcp__fs__',
        description: 'File server.',
        tools: [
          {
            type: 'function',
            name: 'read',
            description: 'Read a file.',
            strict: false,
            parameters: { type: 'object', properties: { path: { type: 'string' } } },
          },
        ],
      },
      { type: 'web_search' },
    ];
    const templateTools = [
      {
        type: 'function' as const,
        function: {
          name: 'apply_patch',
          description: 'Edit files.',
          parameters: {
            type: 'object',
            properties: {
              input: { type: 'string', description: `The raw input, in this lark grammar:\n${grammar}` },
            },
            required: ['input'],
          },
        },
      },
      {
        type: 'function' as const,
        function: {
          name: 'mcp__fs__read',
          description: 'Read a file.',
          parameters: { type: 'object', properties: { path: { type: 'string' } } },
        },
      },
    ];
    const input: Array<Record<string, unknown>> = [{ role: 'user', content: 'Add b.py and read a.py.' }];
    const first = JSON.parse(
      (await post(`${session.baseURL}/responses`, { model: 'm', input, tools: wireTools, store: false }))
        .text,
    );
    expect(Array.from(calls[0]!.inputIds)).toEqual(
      Array.from(
        tokenizer.encodeChat([{ role: 'user', content: 'Add b.py and read a.py.' }], {
          tools: templateTools,
        }),
      ),
    );
    const [custom, fn] = first.output as Item[];
    expect(custom).toMatchObject({ type: 'custom_tool_call', name: 'apply_patch', input: patch });
    expect(fn).toMatchObject({
      type: 'function_call',
      name: 'read',
      namespace: 'mcp__fs__',
      arguments: '{"path": "a.py"}',
    });
    // Codex sends back the calls, then the results in the order they finished (here: reversed)
    input.push(
      asInput(custom!),
      asInput(fn!),
      { type: 'function_call_output', call_id: fn!.call_id, output: [{ type: 'input_text', text: 'x = 2' }] },
      { type: 'custom_tool_call_output', call_id: custom!.call_id, output: 'Done!' },
    );
    const second = await post(`${session.baseURL}/responses`, {
      model: 'm',
      input,
      tools: wireTools,
      store: false,
    });
    expect(second.status).toBe(200);
    const rendered = tokenizer.render(
      [
        { role: 'user', content: 'Add b.py and read a.py.' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [
            { type: 'function', function: { name: 'apply_patch', arguments: { input: patch } } },
            { type: 'function', function: { name: 'mcp__fs__read', arguments: { path: 'a.py' } } },
          ],
        },
        { role: 'tool', content: 'Done!' },
        { role: 'tool', content: 'x = 2' },
      ],
      { tools: templateTools },
    );
    expect(Array.from(calls[1]!.inputIds)).toEqual(Array.from(tokenizer.encode(rendered)));
    proxy.finishSession(session.id, { reward: 1 });
    expect(drift[0]).toMatchObject({ rows: 1, forks: 0, realigns: 0 });
    expect([
      flatToolName('read', 'ns'),
      flatToolName('_read', 'ns'),
      flatToolName('read', undefined),
    ]).toEqual(['ns_read', 'ns_read', 'read']);
  });

  it('a string input and a capped turn: status incomplete (max_output_tokens) in JSON and SSE', async () => {
    const { proxy } = await setup(() => ({ ids: new Array(50).fill(13) }));
    const session = proxy.openSession('resp-cap');
    for (const stream of [false, true]) {
      const res = await post(`${session.baseURL}/responses`, {
        input: 'Write a lot.',
        max_output_tokens: 5,
        stream,
      });
      const response = responseOf(res.text, stream);
      expect(response).toMatchObject({
        status: 'incomplete',
        incomplete_details: { reason: 'max_output_tokens' },
      });
      if (stream) expect(sse(res.text).at(-1)!.event).toBe('response.incomplete');
    }
  });

  it('refuses what needs stored state, naming the field and the fix, without calling the engine', async () => {
    const { proxy, calls } = await setup(script('unused'));
    const session = proxy.openSession('resp-refuse');
    const input = [{ role: 'user', content: 'hi' }];
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ previous_response_id: 'resp_123' }, /previous_response_id .*"resp_123".*store: false/],
      [{ previous_response_id: '' }, /previous_response_id/],
      [{ previous_response_id: 0 }, /previous_response_id/],
      [{ conversation: 'conv_1' }, /conversation is not supported/],
      [{ conversation: { id: 'conv_1' } }, /conversation is not supported/],
      [{ store: true }, /store: true is not supported/],
      [{ store: 'true' }, /store/],
      [{ background: true }, /background: true is not supported/],
      [{ input: [{ type: 'item_reference', id: 'msg_1' }] }, /item_reference needs stored items/],
      [
        { input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:' }] }] },
        /input\[0\]\.content\[0\].*input_image/,
      ],
      [
        { input: [{ type: 'local_shell_call_output', call_id: 'x' }] },
        /input\[0\]\.type.*local_shell_call_output/,
      ],
      [{ input: [{ type: 'function_call_output', output: 'x' }] }, /input\[0\].*call_id/],
      [{ tools: [{ type: 'computer', name: 'c' }] }, /tools\[0\]\.type/],
      [{ text: { format: { type: 'json_schema', name: 'x', schema: {} } } }, /text\.format\.type/],
      [{ input: 3 }, /input/],
      [
        {
          tools: [
            { type: 'function', name: 'ns_read' },
            { type: 'namespace', name: 'ns', tools: [{ type: 'function', name: 'read' }] },
          ],
        },
        /tools\[1\]: tool name "ns_read" is declared twice/,
      ],
    ];
    for (const [fields, message] of cases) {
      const res = await post(`${session.baseURL}/responses`, { model: 'm', input, ...fields });
      expect(res.status, JSON.stringify(fields)).toBe(400);
      const body = JSON.parse(res.text);
      expect(body.error.message, JSON.stringify(fields)).toMatch(message);
      expect(body.error.type).toBe('invalid_request_error');
    }
    expect(calls).toHaveLength(0);
    const ok = await post(`${session.baseURL}/responses`, {
      model: 'm',
      input,
      store: false,
      previous_response_id: null,
    });
    expect(ok.status).toBe(200);
  });

  for (const [stream, inProcess] of [
    [false, false],
    [true, false],
    [true, true],
  ] as const) {
    it(`the official openai client: responses.${stream ? 'stream' : 'create'} with store: false${inProcess ? ' in process (captureFetch)' : ''}, two turns in one row`, async () => {
      const { proxy, drift } = await setup(script(TOOL_LOOP[0]!, TOOL_LOOP[2]!));
      const session = proxy.openSession(`sdk-${stream}-${inProcess}`);
      const client = inProcess
        ? new OpenAI({ baseURL: 'http://vime.invalid/v1', apiKey: 'unused', fetch: captureFetch(session) })
        : new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session.apiKey, maxRetries: 0 });
      const input: OpenAI.Responses.ResponseInput = [{ role: 'user', content: 'Fix the failing test.' }];
      const sdkTools: OpenAI.Responses.Tool[] = [
        {
          type: 'function',
          name: 'bash',
          description: 'Run a shell command',
          strict: false,
          parameters: tools[0]!.function.parameters!,
        },
      ];
      const texts: string[] = [];
      for (let k = 0; k < 2; k++) {
        const params = { model: 'policy', input, tools: sdkTools, store: false };
        const response = stream
          ? await client.responses.stream(params).finalResponse()
          : await client.responses.create(params);
        expect(response.status).toBe('completed');
        texts.push(response.output_text);
        input.push(...(response.output as OpenAI.Responses.ResponseInputItem[]));
        for (const item of response.output) {
          if (item.type !== 'function_call') continue;
          expect(JSON.parse(item.arguments)).toEqual({ cmd: 'ls' });
          input.push({ type: 'function_call_output', call_id: item.call_id, output: 'a.py' });
        }
      }
      expect(texts).toEqual(['Let me look.', 'The bug is in a.py: `return 1` should be `return 2`.']);
      const samples = proxy.finishSession(session.id, { reward: 1 });
      expect(samples).toHaveLength(1);
      expect(drift[0]).toMatchObject({ turns: 2, rows: 1, forks: 0, realigns: 0, retokenizedTokens: 0 });
    });
  }
});
