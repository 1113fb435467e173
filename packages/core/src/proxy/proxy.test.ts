import { afterEach, describe, expect, it } from 'vitest';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { Engine, GenerateResult } from '../engine/types.js';
import { vllmEngine } from '../engine/vllm.js';
import { assertSampleInvariants, type Sample } from '../sample.js';
import { type StandInPolicy, startStandInEngine } from '../standin/engine.js';
import type { TemplateMessage, ToolDefinition } from '../tokenizer/template.js';
import type { ChatTokenizer } from '../tokenizer/tokenizer.js';
import type { DriftReport } from '../trajectory/manager.js';
import { type CaptureProxy, captureFetch, startCaptureProxy } from './proxy.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

interface Call {
  inputIds: Int32Array;
  result: GenerateResult;
}

/** An engine client that also keeps what the engine was sent and what it sampled. */
function recording(engine: Engine): { engine: Engine; calls: Call[] } {
  const calls: Call[] = [];
  return {
    calls,
    engine: {
      ...engine,
      async generate(request, options) {
        const result = await engine.generate(request, options);
        calls.push({ inputIds: Int32Array.from(request.inputIds), result });
        return result;
      },
    },
  };
}

async function setup(
  policy: StandInPolicy,
  opts: { service?: { tokensPerSecond?: number; slots?: number } } = {},
) {
  const tokenizer = await qwen3();
  const standIn = await startStandInEngine({
    tokenizer,
    policy,
    ...(opts.service ? { service: opts.service } : {}),
  });
  closers.push(() => standIn.close());
  const sg = sglangEngine(standIn.url);
  closers.push(() => sg.close());
  const rec = recording(sg);
  const proxy = await startCaptureProxy({ engine: rec.engine, tokenizer });
  closers.push(() => proxy.close());
  const drift: DriftReport[] = [];
  proxy.trajectories.on('drift', (r) => drift.push(r));
  return { tokenizer, standIn, proxy, calls: rec.calls, drift };
}

/** A policy that plays a script: the n-th request gets the n-th text. */
function script(...turns: Array<string | { ids: number[] }>): StandInPolicy {
  let i = 0;
  return () => turns[Math.min(i++, turns.length - 1)]!;
}

const tools: ToolDefinition[] = [
  {
    type: 'function',
    function: {
      name: 'bash',
      description: 'Run a shell command',
      parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] },
    },
  },
];
const anthropicTools = [
  { name: 'bash', description: 'Run a shell command', input_schema: tools[0]!.function.parameters },
];

const TOOL_LOOP = [
  '<think>\nI should list the files.\n</think>\n\nLet me look.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>',
  '<think>\nRead a.py next.\n</think>\n\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "cat a.py"}}\n</tool_call>',
  '<think>\nThe fix is clear.\n</think>\n\nThe bug is in a.py: `return 1` should be `return 2`.',
];
const OBSERVATIONS = ['a.py\nb.py', 'def f():\n    return 1\n'];

/**
 * The token-exactness check: rebuild the expected row from what the engine was sent and sampled, and
 * check every observation is exactly the tokenization of the newly rendered chat text.
 */
function expectExactRow(sample: Sample, calls: Call[], tok: ChatTokenizer, rendered: string[]): void {
  assertSampleInvariants(sample);
  const tokens = Array.from(calls[0]!.inputIds);
  const promptLength = tokens.length;
  const mask: number[] = [];
  const logprobs: number[] = [];
  calls.forEach(({ inputIds, result }, k) => {
    if (k > 0) {
      expect(Array.from(inputIds.subarray(0, tokens.length))).toEqual(tokens);
      const observation = Array.from(inputIds.subarray(tokens.length));
      const before = tok.decode(tokens);
      expect(rendered[k]!.startsWith(before)).toBe(true);
      expect(Array.from(tok.encode(rendered[k]!.slice(before.length)))).toEqual(observation);
      tokens.push(...observation);
      mask.push(...observation.map(() => 0));
      logprobs.push(...observation.map(() => 0));
    } else {
      expect(Array.from(tok.encode(rendered[0]!))).toEqual(Array.from(inputIds));
    }
    tokens.push(...result.outputIds);
    mask.push(...result.outputIds.map(() => 1));
    logprobs.push(...result.logprobs);
  });
  expect(Array.from(sample.tokens)).toEqual(tokens);
  expect(sample.response_length).toBe(tokens.length - promptLength);
  expect(Array.from(sample.loss_mask!)).toEqual(mask);
  expect(Array.from(sample.rollout_log_probs!)).toEqual(Array.from(Float32Array.from(logprobs)));
}

/** Parse an SSE body into its `data:` payloads (and event names). */
function sse(body: string): Array<{ event?: string; data: string }> {
  return body
    .split('\n\n')
    .filter((b) => b.trim())
    .map((block) => {
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)![1]!;
      return event ? { event, data } : { data };
    });
}

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, type: res.headers.get('content-type'), text: await res.text() };
}

/** Rebuild an OpenAI assistant message from a JSON answer or a stream of chunks. */
function openaiMessage(text: string, stream: boolean): { message: Record<string, unknown>; finish: string } {
  if (!stream) {
    const json = JSON.parse(text);
    return { message: json.choices[0].message, finish: json.choices[0].finish_reason };
  }
  const events = sse(text);
  expect(events.at(-1)!.data).toBe('[DONE]');
  const message: Record<string, unknown> = { role: 'assistant', content: '' };
  let finish = '';
  for (const { data } of events.slice(0, -1)) {
    const chunk = JSON.parse(data);
    expect(chunk.object).toBe('chat.completion.chunk');
    const choice = chunk.choices[0];
    if (!choice) continue;
    const d = choice.delta;
    if (d.content) message.content = (message.content as string) + d.content;
    if (d.reasoning_content) message.reasoning_content = d.reasoning_content;
    if (d.tool_calls) {
      message.tool_calls ??= [];
      const calls = message.tool_calls as unknown[];
      for (const c of d.tool_calls) calls[c.index] = { id: c.id, type: c.type, function: c.function };
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { message, finish };
}

/** Rebuild an Anthropic message from JSON or from its event stream. */
function anthropicMessage(
  text: string,
  stream: boolean,
): { content: Array<Record<string, unknown>>; stop: string } {
  if (!stream) {
    const json = JSON.parse(text);
    return { content: json.content, stop: json.stop_reason };
  }
  const content: Array<Record<string, unknown>> = [];
  let stop = '';
  const events = sse(text);
  expect(events[0]!.event).toBe('message_start');
  expect(events.at(-1)!.event).toBe('message_stop');
  for (const { event, data } of events) {
    const e = JSON.parse(data);
    expect(e.type).toBe(event);
    if (event === 'content_block_start') content[e.index] = { ...e.content_block };
    if (event === 'content_block_delta') {
      const block = content[e.index]!;
      if (e.delta.type === 'text_delta') block.text = (block.text as string) + e.delta.text;
      if (e.delta.type === 'thinking_delta') block.thinking = (block.thinking as string) + e.delta.thinking;
      if (e.delta.type === 'input_json_delta') block.input = JSON.parse(e.delta.partial_json);
    }
    if (event === 'message_delta') stop = e.delta.stop_reason;
  }
  return { content, stop };
}

describe('capture proxy: token-exact multi-turn capture', () => {
  for (const stream of [false, true]) {
    it(`OpenAI Chat Completions (${stream ? 'SSE' : 'JSON'}): a tool loop packs into one exact row`, async () => {
      const { tokenizer, proxy, calls, drift } = await setup(script(...TOOL_LOOP));
      const session = proxy.openSession('oa-1', { sampling: { temperature: 1 } });
      const messages: TemplateMessage[] = [
        { role: 'system', content: 'You are a coding agent.' },
        { role: 'user', content: 'Fix the failing test.' },
      ];
      const rendered: string[] = [];
      for (let k = 0; k < 3; k++) {
        rendered.push(tokenizer.render(messages, { tools }));
        const res = await post(
          `${proxy.url}/v1/chat/completions`,
          {
            model: 'policy',
            messages,
            tools,
            stream,
            ...(stream ? { stream_options: { include_usage: true } } : {}),
          },
          { authorization: `Bearer ${session.apiKey}` },
        );
        expect(res.status).toBe(200);
        expect(res.type).toBe(stream ? 'text/event-stream' : 'application/json');
        const { message, finish } = openaiMessage(res.text, stream);
        messages.push(message as unknown as TemplateMessage);
        if (k < 2) {
          expect(finish).toBe('tool_calls');
          const call = (message.tool_calls as Array<{ id: string; function: { arguments: string } }>)[0]!;
          expect(call.function.arguments).toBe(k === 0 ? '{"cmd": "ls"}' : '{"cmd": "cat a.py"}');
          messages.push({ role: 'tool', tool_call_id: call.id, content: OBSERVATIONS[k]! });
        } else {
          expect(finish).toBe('stop');
          expect(message.content).toBe('The bug is in a.py: `return 1` should be `return 2`.');
          expect(message.reasoning_content).toBe('The fix is clear.');
        }
      }
      const samples = proxy.finishSession('oa-1', { reward: 1, baseSample: { index: 3, group_index: 1 } });
      expect(samples).toHaveLength(1);
      expectExactRow(samples[0]!, calls, tokenizer, rendered);
      expect(samples[0]).toMatchObject({
        status: 'completed',
        reward: 1,
        session_id: 'oa-1',
        index: 3,
        group_index: 1,
      });
      expect(samples[0]!.weight_versions).toEqual(['default']);
      expect(drift).toEqual([
        { sessionId: 'oa-1', turns: 3, rows: 1, forks: 0, realigns: 0, retokenizedTokens: 0 },
      ]);
    });

    it(`Anthropic Messages (${stream ? 'SSE' : 'JSON'}): tool_use/tool_result turns pack into one exact row`, async () => {
      const { tokenizer, proxy, calls, drift } = await setup(script(...TOOL_LOOP));
      const session = proxy.openSession('an-1');
      const system = 'You are a coding agent.';
      const messages: Array<{ role: string; content: unknown }> = [
        { role: 'user', content: 'Fix the failing test.' },
      ];
      // what the template sees, kept alongside to check the observations' tokens
      const chat: TemplateMessage[] = [
        { role: 'system', content: system },
        { role: 'user', content: 'Fix the failing test.' },
      ];
      const rendered: string[] = [];
      for (let k = 0; k < 3; k++) {
        rendered.push(tokenizer.render(chat, { tools }));
        const res = await post(
          `${session.baseURL}/messages`,
          { model: 'policy', max_tokens: 1024, system, messages, tools: anthropicTools, stream },
          { 'x-api-key': 'ignored-when-the-path-names-the-session' },
        );
        expect(res.status).toBe(200);
        const { content, stop } = anthropicMessage(res.text, stream);
        messages.push({ role: 'assistant', content });
        const thinking = content.find((b) => b.type === 'thinking')!.thinking as string;
        const text = (content.find((b) => b.type === 'text')?.text as string | undefined) ?? '';
        const use = content.find((b) => b.type === 'tool_use');
        chat.push({
          role: 'assistant',
          content: text,
          reasoning_content: thinking,
          ...(use
            ? {
                tool_calls: [
                  {
                    type: 'function',
                    function: { name: 'bash', arguments: use.input as Record<string, unknown> },
                  },
                ],
              }
            : {}),
        });
        if (k < 2) {
          expect(stop).toBe('tool_use');
          expect(use!.input).toEqual({ cmd: k === 0 ? 'ls' : 'cat a.py' });
          messages.push({
            role: 'user',
            content: [{ type: 'tool_result', tool_use_id: use!.id, content: OBSERVATIONS[k] }],
          });
          chat.push({ role: 'tool', content: OBSERVATIONS[k]! });
        } else expect(stop).toBe('end_turn');
      }
      const samples = proxy.finishSession('an-1', { reward: 0 });
      expect(samples).toHaveLength(1);
      expectExactRow(samples[0]!, calls, tokenizer, rendered);
      expect(samples[0]!.reward).toBe(0);
      expect(drift[0]).toMatchObject({ forks: 0, realigns: 0 });
    });
  }

  it('forks when Qwen3 drops earlier <think> blocks after a new user message; rows share rollout_id', async () => {
    const { proxy, calls, drift } = await setup(script(TOOL_LOOP[0]!, TOOL_LOOP[2]!, 'Added a test.'));
    const session = proxy.openSession('think-1');
    const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix the failing test.' }];
    for (const followUp of [null, null, 'Now add a regression test.']) {
      if (followUp) messages.push({ role: 'user', content: followUp });
      const res = await post(`${session.baseURL}/chat/completions`, { messages, tools });
      const { message } = openaiMessage(res.text, false);
      messages.push(message as unknown as TemplateMessage);
      const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
      if (call) messages.push({ role: 'tool', tool_call_id: call.id, content: 'a.py' });
    }
    const samples = proxy.finishSession('think-1', {
      reward: 1,
      rewardSplit: 'divide',
      baseSample: { rollout_id: 9 },
    });
    expect(drift[0]).toMatchObject({ turns: 3, rows: 2, forks: 1 });
    expect(samples).toHaveLength(2);
    expect(samples.map((s) => [s.rollout_id, s.session_id, s.reward])).toEqual([
      [9, 'think-1', 0.5],
      [9, 'think-1', 0.5],
    ]);
    for (const s of samples) expect(s.metadata.rollout_reward).toBe(1);
    // the new row starts from the re-rendered prompt, which no longer holds the first turn's reasoning
    const second = samples[1]!;
    const [, , third] = calls;
    expect(Array.from(second.tokens)).toEqual([...third!.inputIds, ...third!.result.outputIds]);
    expect(Array.from(second.loss_mask!)).toEqual(Array.from(third!.result.outputIds, () => 1));
    expect(Array.from(second.rollout_log_probs!)).toEqual(Array.from(third!.result.logprobs));
    expect(second.prompt).not.toContain('I should list the files.');
    expect(samples[0]!.prompt).toContain('Fix the failing test.');
  });

  it('realigns a sampled tokenization that re-rendering merges differently (short drift in the last output)', async () => {
    const tok = await qwen3();
    // "Done." sampled as "Do" + "ne" + "."; the template re-tokenizes it as "Done" + "."
    const sampled = [...tok.encode('Do'), ...tok.encode('ne'), ...tok.encode('.'), tok.eosTokenId];
    expect(Array.from(tok.encode('Done.'))).not.toEqual(sampled.slice(0, 3));
    const { proxy, calls, drift } = await setup(script({ ids: sampled }, 'Continuing.'));
    const session = proxy.openSession('realign-1');
    const messages: TemplateMessage[] = [{ role: 'user', content: 'Say done.' }];
    const first = openaiMessage(
      (await post(`${session.baseURL}/chat/completions`, { messages })).text,
      false,
    );
    expect(first.message.content).toBe('Done.');
    messages.push(first.message as unknown as TemplateMessage, { role: 'user', content: 'Continue.' });
    await post(`${session.baseURL}/chat/completions`, { messages });
    const [sample] = proxy.finishSession('realign-1', { reward: 1 });
    expect(drift[0]).toMatchObject({ rows: 1, forks: 0, realigns: 1, retokenizedTokens: 4 });
    const p0 = calls[0]!.inputIds.length;
    // tokens follow the second prompt exactly; the overwritten first output and the observation are masked
    expect(Array.from(sample!.tokens)).toEqual([...calls[1]!.inputIds, ...calls[1]!.result.outputIds]);
    const mask = Array.from(sample!.loss_mask!);
    expect(mask.slice(0, calls[1]!.inputIds.length - p0).every((m) => m === 0)).toBe(true);
    expect(mask.slice(calls[1]!.inputIds.length - p0).every((m) => m === 1)).toBe(true);
  });
});

describe('capture proxy: sessions, sampling, budgets, cancellation', () => {
  it('overrides a harness temperature of 0 with the session sampling and reports it', async () => {
    const seen: Array<number | undefined> = [];
    const { proxy } = await setup((r) => {
      seen.push(r.temperature);
      return 'ok';
    });
    const overrides: unknown[] = [];
    proxy.events.on('sampling:override', (e) => overrides.push(e));
    const s = proxy.openSession('temp-1', { sampling: { temperature: 0.8, topP: 0.95, maxTokens: 64 } });
    const res = await post(`${s.baseURL}/chat/completions`, {
      messages: [{ role: 'user', content: 'hi' }],
      temperature: 0,
      top_p: 0.95,
      max_tokens: 1000,
    });
    expect(res.status).toBe(200);
    expect(seen).toEqual([0.8]);
    expect(overrides).toEqual([
      {
        sessionId: 'temp-1',
        fields: { temperature: { sent: 0, used: 0.8 }, max_tokens: { sent: 1000, used: 64 } },
      },
    ]);
    proxy.finishSession('temp-1', { reward: 0 });
  });

  it('clamps each turn to the whole-trajectory token budget and marks the session truncated', async () => {
    const { proxy, calls, tokenizer } = await setup(
      script('one two three four five six seven eight nine ten'),
    );
    const messages = [{ role: 'user', content: 'count' }];
    const promptLength = tokenizer.encodeChat(messages).length;
    const s = proxy.openSession('budget-1', { maxContextTokens: promptLength + 4 });
    const exhausted: unknown[] = [];
    proxy.events.on('budget:exhausted', (e) => exhausted.push(e));
    const first = openaiMessage((await post(`${s.baseURL}/chat/completions`, { messages })).text, false);
    expect(first.finish).toBe('length');
    expect(calls[0]!.result.outputIds.length).toBe(4);
    const again = openaiMessage(
      (
        await post(`${s.baseURL}/chat/completions`, {
          messages: [...messages, first.message, { role: 'user', content: 'more' }],
        })
      ).text,
      false,
    );
    expect(again.finish).toBe('length');
    expect(calls).toHaveLength(1);
    expect(exhausted).toHaveLength(1);
    const [sample] = proxy.finishSession('budget-1', { reward: 0 });
    expect(sample!.status).toBe('truncated');
    expect(sample!.tokens.length).toBe(promptLength + 4);
  });

  it('a disconnecting client cancels the upstream request and frees the engine slot', async () => {
    const { proxy, standIn } = await setup(() => ({ ids: new Array(500).fill(13) }), {
      service: { tokensPerSecond: 50, slots: 1 },
    });
    const aborted: unknown[] = [];
    proxy.events.on('turn:abort', (e) => aborted.push(e));
    const s = proxy.openSession('dc-1');
    const ac = new AbortController();
    const pending = fetch(`${s.baseURL}/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ messages: [{ role: 'user', content: 'write a lot' }], max_tokens: 500 }),
      signal: ac.signal,
    }).catch((e: unknown) => e);
    const deadline = performance.now() + 2000;
    while (standIn.stats().running !== 1 && performance.now() < deadline)
      await new Promise((r) => setTimeout(r, 5));
    expect(standIn.stats().running).toBe(1);
    ac.abort();
    await pending;
    const freedBy = performance.now() + 1000;
    while (standIn.stats().running !== 0 && performance.now() < freedBy)
      await new Promise((r) => setTimeout(r, 5));
    expect(standIn.stats()).toMatchObject({ running: 0, aborted: 1, completed: 0 });
    expect(aborted).toHaveLength(1);
    expect(proxy.trajectories.trajectory('dc-1').turns).toHaveLength(0);
  });

  it('routes by bearer token or path, rejects unknown sessions clearly, and lists models', async () => {
    const { proxy } = await setup(script('hello'));
    const noSession = await post(`${proxy.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(noSession.status).toBe(401);
    expect(JSON.parse(noSession.text).error.message).toMatch(/Authorization: Bearer <id>/);
    const unknown = await post(`${proxy.url}/sessions/ghost/v1/messages`, {
      max_tokens: 5,
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(unknown.status).toBe(401);
    expect(JSON.parse(unknown.text)).toMatchObject({
      type: 'error',
      error: { message: 'no open session "ghost"' },
    });
    proxy.openSession('s-1');
    const bad = await post(
      `${proxy.url}/v1/chat/completions`,
      { messages: [] },
      { authorization: 'Bearer s-1' },
    );
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.text).error.message).toMatch(/messages/);
    const models = (await (await fetch(`${proxy.url}/sessions/s-1/v1/models`)).json()) as {
      data: Array<{ id: string }>;
    };
    expect(models.data[0]?.id).toBe('vime-policy');
    expect(() => proxy.openSession('s-1')).toThrow(/already open/);
    expect(() => proxy.openSession('a b')).toThrow(/session id/);
    expect(() => proxy.finishSession('nope', { reward: 1 })).toThrow(/no open session/);
  });

  it('spreads sessions over several engines (sticky) and speaks to vLLM engines the same way', async () => {
    const tokenizer = await qwen3();
    const a = await startStandInEngine({ tokenizer, policy: () => 'from a', modelName: 'm' });
    const b = await startStandInEngine({ tokenizer, policy: () => 'from b', modelName: 'm' });
    closers.push(
      () => a.close(),
      () => b.close(),
    );
    const engines = [sglangEngine(a.url), vllmEngine(b.url)];
    closers.push(() => Promise.all(engines.map((e) => e.close())).then(() => {}));
    const proxy: CaptureProxy = await startCaptureProxy({ engine: engines, tokenizer });
    closers.push(() => proxy.close());
    const answers: string[] = [];
    for (const id of ['x', 'y', 'x2']) {
      const s = proxy.openSession(id);
      for (let i = 0; i < 2; i++) {
        const r = await post(`${s.baseURL}/chat/completions`, {
          messages: [{ role: 'user', content: `hi ${i}` }],
        });
        answers.push(JSON.parse(r.text).choices[0].message.content);
      }
    }
    expect(answers).toEqual(['from a', 'from a', 'from b', 'from b', 'from a', 'from a']);
    expect(a.stats().completed).toBe(4);
    expect(b.stats().completed).toBe(2);
  });

  it('captureFetch runs turns in-process for OpenAI-compatible clients', async () => {
    const { proxy, calls } = await setup(script(...TOOL_LOOP));
    const session = proxy.openSession('fetch-1');
    const f = captureFetch(session);
    const res = await f('http://in-process/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer anything' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'go' }], tools, stream: true }),
    });
    expect(res.status).toBe(200);
    const { message, finish } = openaiMessage(await res.text(), true);
    expect(finish).toBe('tool_calls');
    expect(message.reasoning_content).toBe('I should list the files.');
    const models = (await (await f(new Request('http://in-process/v1/models'))).json()) as {
      data: Array<{ id: string }>;
    };
    expect(models.data[0]?.id).toBe('vime-policy');
    const [sample] = proxy.finishSession('fetch-1', { reward: 1 });
    expect(Array.from(sample!.tokens)).toEqual([...calls[0]!.inputIds, ...calls[0]!.result.outputIds]);
    expect(() => captureFetch({} as never)).toThrow(/openSession/);
  });

  it('answers Anthropic count_tokens with the rendered prompt length, without calling the engine', async () => {
    const { proxy, calls, tokenizer } = await setup(script('unused'));
    const s = proxy.openSession('count-1');
    const res = await post(`${s.baseURL}/messages/count_tokens`, {
      system: 'Be brief.',
      messages: [{ role: 'user', content: 'How many tokens?' }],
      tools: anthropicTools,
    });
    expect(res.status).toBe(200);
    const expected = tokenizer.encodeChat(
      [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'How many tokens?' },
      ],
      { tools },
    ).length;
    expect(JSON.parse(res.text)).toEqual({ input_tokens: expected });
    expect(calls).toHaveLength(0);
  });

  it('spreading sessions over two throughput-bound engines halves the time of a batch', async () => {
    const tokenizer = await qwen3();
    const policy: StandInPolicy = () => ({ ids: new Array(200).fill(42) });
    async function batchMs(engineCount: number): Promise<number> {
      const standIns = await Promise.all(
        Array.from({ length: engineCount }, () =>
          startStandInEngine({ tokenizer, policy, service: { tokensPerSecond: 4000 } }),
        ),
      );
      const engines = standIns.map((e) => sglangEngine(e.url));
      const proxy = await startCaptureProxy({ engine: engines, tokenizer });
      try {
        const sessions = Array.from({ length: 8 }, (_, i) => proxy.openSession(`b${engineCount}-${i}`));
        const t0 = performance.now();
        await Promise.all(
          sessions.map((s) =>
            post(`${s.baseURL}/chat/completions`, { messages: [{ role: 'user', content: 'go' }] }),
          ),
        );
        return performance.now() - t0;
      } finally {
        await proxy.close();
        await Promise.all([...engines.map((e) => e.close()), ...standIns.map((e) => e.close())]);
      }
    }
    const one = await batchMs(1);
    const two = await batchMs(2);
    // 1,600 tokens at 4,000 tokens/s: 400 ms on one engine, 200 ms on two (plus HTTP and rendering)
    expect(one).toBeGreaterThanOrEqual(395);
    expect(two).toBeGreaterThanOrEqual(195);
    expect(two).toBeLessThan(one * 0.8);
  });

  it('continues a turn the engine aborts from the tokens it already produced', async () => {
    const { proxy, standIn, calls } = await setup(() => ({ ids: new Array(400).fill(13) }), {
      service: { tokensPerSecond: 400 },
    });
    const s = proxy.openSession('engine-abort');
    const pending = post(`${s.baseURL}/chat/completions`, { messages: [{ role: 'user', content: 'go' }] });
    const deadline = performance.now() + 2000;
    while (standIn.stats().running !== 1 && performance.now() < deadline)
      await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 100));
    await post(`${standIn.url}/abort_request`, { abort_all: true });
    const res = await pending;
    expect(res.status).toBe(200);
    expect(calls).toHaveLength(2);
    const partial = calls[0]!.result.outputIds.length;
    expect(calls[0]!.result.finishReason).toBe('abort');
    expect(partial).toBeGreaterThan(0);
    // The continuation is sent the prompt and the partial output, and asked only for the rest.
    expect(calls[1]!.inputIds.length).toBe(calls[0]!.inputIds.length + partial);
    const [turn] = proxy.trajectories.trajectory('engine-abort').turns;
    expect(Array.from(turn!.outputIds)).toEqual(new Array(400).fill(13));
  });
});
