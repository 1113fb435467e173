import { afterEach, describe, expect, it } from 'vitest';
import {
  anthropicTools,
  closeAll,
  closers,
  openaiMessage,
  post,
  script,
  setup,
  TOOL_LOOP,
  tools,
} from '../__fixtures__/proxy-harness.js';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import { vllmEngine } from '../engine/vllm.js';
import { type StandInPolicy, startStandInEngine } from '../standin/engine.js';
import { type CaptureProxy, captureFetch, startCaptureProxy } from './proxy.js';

afterEach(closeAll);

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
    const deadline = performance.now() + 30_000;
    while (standIn.stats().running !== 1 && performance.now() < deadline)
      await new Promise((r) => setTimeout(r, 5));
    expect(standIn.stats().running).toBe(1);
    ac.abort();
    await pending;
    const freedBy = performance.now() + 30_000;
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
    expect(JSON.parse(noSession.text).error.message).toMatch(
      /^no session key: send the session's apiKey \(Authorization: Bearer <apiKey> or x-api-key\)/,
    );
    const unknown = await post(`${proxy.url}/sessions/ghost/v1/messages`, {
      max_tokens: 5,
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(unknown.status).toBe(401);
    expect(JSON.parse(unknown.text)).toMatchObject({
      type: 'error',
      error: { message: expect.stringMatching(/^no open session has this key: send the session's apiKey/) },
    });
    proxy.openSession('s-1');
    const bad = await post(
      `${proxy.url}/v1/chat/completions`,
      { messages: [] },
      { authorization: `Bearer ${proxy.session('s-1')!.apiKey}` },
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

  it('spreads a batch of concurrent sessions evenly over two throughput-bound engines', async () => {
    // How much faster two engines make a batch is measured in bench/router.bench.ts; here, that they share it.
    const tokenizer = await qwen3();
    const policy: StandInPolicy = () => ({ ids: new Array(200).fill(42) });
    const standIns = await Promise.all(
      [0, 1].map(() => startStandInEngine({ tokenizer, policy, service: { tokensPerSecond: 4000 } })),
    );
    const engines = standIns.map((e) => sglangEngine(e.url));
    const proxy = await startCaptureProxy({ engine: engines, tokenizer });
    try {
      const sessions = Array.from({ length: 8 }, (_, i) => proxy.openSession(`batch-${i}`));
      await Promise.all(
        sessions.map((s) =>
          post(`${s.baseURL}/chat/completions`, { messages: [{ role: 'user', content: 'go' }] }),
        ),
      );
      expect(standIns.map((e) => e.stats().completed)).toEqual([4, 4]);
    } finally {
      await proxy.close();
      await Promise.all([...engines.map((e) => e.close()), ...standIns.map((e) => e.close())]);
    }
  });

  it('continues a turn the engine aborts from the tokens it already produced', async () => {
    const { proxy, standIn, calls } = await setup(() => ({ ids: new Array(400).fill(13) }), {
      service: { tokensPerSecond: 400 },
    });
    const s = proxy.openSession('engine-abort');
    const pending = post(`${s.baseURL}/chat/completions`, { messages: [{ role: 'user', content: 'go' }] });
    const deadline = performance.now() + 30_000;
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
