import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import { startStandInEngine } from '../standin/engine.js';
import { captureFetch, startCaptureProxy } from './proxy.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

const SCRIPT = [
  '<think>\nList first.\n</think>\n\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>',
  '<think>\nDone.\n</think>\n\nAll tests pass.',
];

async function setup() {
  const tokenizer = await qwen3();
  let turn = 0;
  const engine = await startStandInEngine({ tokenizer, policy: () => SCRIPT[turn++ % SCRIPT.length]! });
  const sg = sglangEngine(engine.url);
  const proxy = await startCaptureProxy({ engine: sg, tokenizer });
  closers.push(
    () => engine.close(),
    () => sg.close(),
    () => proxy.close(),
  );
  return proxy;
}

const tools: OpenAI.ChatCompletionTool[] = [
  {
    type: 'function',
    function: { name: 'bash', parameters: { type: 'object', properties: { cmd: { type: 'string' } } } },
  },
];

/** Two turns of a tool loop with the official client; returns the packed rows. */
async function toolLoop(client: OpenAI, stream: boolean) {
  const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Run the tests.' }];
  for (let k = 0; k < 2; k++) {
    let message: OpenAI.ChatCompletionMessage;
    if (stream) {
      const runner = client.chat.completions.stream({ model: 'policy', messages, tools, temperature: 0 });
      message = (await runner.finalChatCompletion()).choices[0]!.message;
    } else {
      message = (await client.chat.completions.create({ model: 'policy', messages, tools, temperature: 0 }))
        .choices[0]!.message;
    }
    // vLLM/SGLang-style reasoning field, passed through by the client
    const reasoning = (message as unknown as { reasoning_content?: string }).reasoning_content;
    expect(reasoning).toBe(k === 0 ? 'List first.' : 'Done.');
    messages.push({ ...message, reasoning_content: reasoning } as OpenAI.ChatCompletionMessageParam);
    for (const call of message.tool_calls ?? []) {
      if (call.type !== 'function') continue;
      expect(JSON.parse(call.function.arguments)).toEqual({ cmd: 'ls' });
      messages.push({ role: 'tool', tool_call_id: call.id, content: 'ok' });
    }
  }
}

describe('capture proxy with the official openai client', () => {
  for (const stream of [false, true]) {
    it(`over HTTP (session as API key, ${stream ? 'streaming' : 'JSON'}): turns pack into one row`, async () => {
      const proxy = await setup();
      const session = proxy.openSession(`http-${stream}`);
      await toolLoop(
        new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session.apiKey, maxRetries: 0 }),
        stream,
      );
      const samples = proxy.finishSession(session.id, { reward: 1 });
      expect(samples).toHaveLength(1);
      expect(samples[0]!.metadata.drift).toEqual({ forks: 0, realigns: 0, retokenizedTokens: 0 });
      expect(samples[0]!.metadata.trajectory_turns).toEqual([0, 1]);
    });
  }

  it('in-process through captureFetch (no HTTP hop)', async () => {
    const proxy = await setup();
    const session = proxy.openSession('in-process');
    const client = new OpenAI({
      baseURL: 'http://vime.invalid/v1',
      apiKey: 'unused',
      fetch: captureFetch(session),
    });
    await toolLoop(client, true);
    const [sample] = proxy.finishSession('in-process', { reward: 0.5 });
    expect(sample).toMatchObject({ reward: 0.5, session_id: 'in-process', status: 'completed' });
    expect(sample!.loss_mask!.reduce((a, b) => a + b, 0)).toBeGreaterThan(10);
  });
});
