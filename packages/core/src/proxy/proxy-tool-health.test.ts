/**
 * Tool-call health through the capture proxy, per dialect (Chat Completions, Anthropic Messages,
 * Responses): a stand-in engine (a scripted policy, not a model) emits a good call, a call to an unknown
 * tool, a call with arguments that are not an object, and a malformed block; every turn's `turn` event
 * carries the counts and the rollout's rows carry their sum (`metadata.tool_calls`). The malformed block
 * never reaches the client as a tool call.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { ToolCallHealth } from '../engine/tokenizer/tool-health.js';
import { startStandInEngine } from '../standin/engine.js';
import type { Dialect } from './dialects.js';
import { startCaptureProxy } from './proxy.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

const call = (body: string) => `<tool_call>\n${body}\n</tool_call>`;
const OUTPUT = [
  'Let me look.',
  call('{"name": "bash", "arguments": {"cmd": "ls"}}'),
  call('{"name": "browser", "arguments": {"url": "x"}}'),
  call('{"name": "bash", "arguments": ["ls"]}'),
  call('{"name": "bash", "arguments": {"cmd": "ls"'),
].join('\n');

/** One request of each dialect declaring the tool `bash`. */
const REQUESTS: Record<Dialect, { path: string; body: Record<string, unknown> }> = {
  openai: {
    path: 'chat/completions',
    body: {
      model: 'm',
      messages: [{ role: 'user', content: 'Fix it.' }],
      tools: [{ type: 'function', function: { name: 'bash', parameters: { type: 'object' } } }],
    },
  },
  anthropic: {
    path: 'messages',
    body: {
      model: 'm',
      max_tokens: 256,
      messages: [{ role: 'user', content: 'Fix it.' }],
      tools: [{ name: 'bash', input_schema: { type: 'object' } }],
    },
  },
  responses: {
    path: 'responses',
    body: {
      model: 'm',
      input: 'Fix it.',
      store: false,
      tools: [{ type: 'function', name: 'bash', parameters: { type: 'object' } }],
    },
  },
  gemini: {
    path: 'models/m:generateContent',
    body: {
      contents: [{ role: 'user', parts: [{ text: 'Fix it.' }] }],
      tools: [{ functionDeclarations: [{ name: 'bash', parametersJsonSchema: { type: 'object' } }] }],
    },
  },
};

/** The tool calls the client got, whatever the dialect's shape. */
function clientCalls(dialect: Dialect, answer: Record<string, unknown>): string[] {
  if (dialect === 'openai') {
    const message = (
      answer.choices as Array<{ message: { tool_calls?: Array<{ function: { name: string } }> } }>
    )[0]!.message;
    return (message.tool_calls ?? []).map((c) => c.function.name);
  }
  if (dialect === 'anthropic') {
    return (answer.content as Array<{ type: string; name?: string }>)
      .filter((b) => b.type === 'tool_use')
      .map((b) => b.name!);
  }
  if (dialect === 'gemini') {
    const parts = (
      answer.candidates as Array<{ content: { parts: Array<{ functionCall?: { name: string } }> } }>
    )[0]!.content.parts;
    return parts.filter((p) => p.functionCall).map((p) => p.functionCall!.name);
  }
  return (answer.output as Array<{ type: string; name?: string }>)
    .filter((o) => o.type === 'function_call')
    .map((o) => o.name!);
}

describe('tool-call health per dialect', () => {
  for (const dialect of ['openai', 'anthropic', 'responses', 'gemini'] as Dialect[]) {
    it(`${dialect}: the turn event and the rows count emitted, parsed, malformed, unknown tool, bad arguments`, async () => {
      const tokenizer = await qwen3();
      const standIn = await startStandInEngine({ tokenizer, policy: () => OUTPUT });
      const engine = sglangEngine(standIn.url);
      const proxy = await startCaptureProxy({ engine, tokenizer });
      closers.push(
        () => standIn.close(),
        () => engine.close(),
        () => proxy.close(),
      );
      const seen: Array<ToolCallHealth | undefined> = [];
      proxy.events.on('turn', (e) => seen.push(e.toolCalls));
      const session = proxy.openSession(`health-${dialect}`);
      const { path, body } = REQUESTS[dialect];
      const res = await fetch(`${session.baseURL}/${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${session.apiKey}` },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(200);
      const answer = (await res.json()) as Record<string, unknown>;
      // Three calls parsed (whatever their name or arguments); the malformed block is not a call.
      expect(clientCalls(dialect, answer)).toEqual(['bash', 'browser', 'bash']);
      const expected = { emitted: 4, parsed: 3, malformed: 1, unknownTool: 1, badArguments: 1 };
      expect(seen).toEqual([expected]);
      const rows = proxy.finishSession(session.id, { reward: 0 });
      expect(rows.map((r) => r.metadata.tool_calls)).toEqual([expected]);
    });
  }

  it('a turn without tool calls counts zeros; the rows of a session sum its turns', async () => {
    const tokenizer = await qwen3();
    let k = 0;
    const standIn = await startStandInEngine({
      tokenizer,
      policy: () => (k++ === 0 ? call('{"name": "bash", "arguments": {"cmd": "ls"}}') : 'Done.'),
    });
    const engine = sglangEngine(standIn.url);
    const proxy = await startCaptureProxy({ engine, tokenizer });
    closers.push(
      () => standIn.close(),
      () => engine.close(),
      () => proxy.close(),
    );
    const session = proxy.openSession('sum');
    const messages: Array<Record<string, unknown>> = [{ role: 'user', content: 'Fix it.' }];
    for (let turn = 0; turn < 2; turn++) {
      const res = await fetch(`${session.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${session.apiKey}` },
        body: JSON.stringify({ ...REQUESTS.openai.body, messages }),
      });
      const message = ((await res.json()) as { choices: Array<{ message: Record<string, unknown> }> })
        .choices[0]!.message;
      messages.push(message);
      const id = (message.tool_calls as Array<{ id: string }> | undefined)?.[0]?.id;
      if (id) messages.push({ role: 'tool', tool_call_id: id, content: 'a.py' });
    }
    const [row] = proxy.finishSession(session.id, { reward: 1 });
    expect(row!.metadata.tool_calls).toEqual({
      emitted: 1,
      parsed: 1,
      malformed: 0,
      unknownTool: 0,
      badArguments: 0,
    });
  });
});

describe('tool-call health of turns without tools', () => {
  it('a text-protocol turn (no tools offered, no call) reports none; a call without tools is an unknown tool', async () => {
    const tokenizer = await qwen3();
    let k = 0;
    const standIn = await startStandInEngine({
      tokenizer,
      policy: () =>
        k++ === 0 ? 'THOUGHT: list.\n\n```bash\nls\n```' : call('{"name": "bash", "arguments": {}}'),
    });
    const engine = sglangEngine(standIn.url);
    const proxy = await startCaptureProxy({ engine, tokenizer });
    closers.push(
      () => standIn.close(),
      () => engine.close(),
      () => proxy.close(),
    );
    const seen: Array<ToolCallHealth | undefined> = [];
    proxy.events.on('turn', (e) => seen.push(e.toolCalls));
    const text = proxy.openSession('text');
    const post = (session: typeof text) =>
      fetch(`${session.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${session.apiKey}` },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Fix it.' }] }),
      });
    expect((await post(text)).status).toBe(200);
    expect(proxy.finishSession(text.id, { reward: 0 })[0]!.metadata.tool_calls).toBeUndefined();
    const stray = proxy.openSession('stray');
    expect((await post(stray)).status).toBe(200);
    const expected = { emitted: 1, parsed: 1, malformed: 0, unknownTool: 1, badArguments: 0 };
    expect(seen).toEqual([undefined, expected]);
    expect(proxy.finishSession(stray.id, { reward: 0 })[0]!.metadata.tool_calls).toEqual(expected);
  });
});
