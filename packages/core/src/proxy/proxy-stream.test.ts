import { request as httpRequest } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import {
  anthropicMessage,
  anthropicTools,
  closeAll,
  closers,
  OBSERVATIONS,
  openaiMessage,
  post,
  recording,
  script,
  setup,
  sse,
  TOOL_LOOP,
  tools,
} from '../__fixtures__/proxy-harness.js';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { TemplateMessage } from '../engine/tokenizer/template.js';
import { startStandInEngine } from '../standin/engine.js';
import { startCaptureProxy } from './proxy.js';

afterEach(closeAll);

/** Run the TOOL_LOOP session in one dialect; what the client rebuilt each turn, and the captured row. */
async function toolLoop(
  dialect: 'openai' | 'anthropic',
  stream: boolean,
  engineKind: 'sglang' | 'vllm' = 'sglang',
) {
  const { proxy } = await setup(script(...TOOL_LOOP), {
    service: { tokensPerSecond: 200 },
    engine: engineKind,
  });
  const id = `${dialect}-${stream}`;
  proxy.openSession(id, { sampling: { temperature: 1 } });
  const answers: unknown[] = [];
  let events = 0;
  if (dialect === 'openai') {
    const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix the failing test.' }];
    for (let k = 0; k < 3; k++) {
      const res = await post(`${proxy.session(id)!.baseURL}/chat/completions`, {
        model: 'policy',
        messages,
        tools,
        stream,
      });
      expect(res.status).toBe(200);
      if (stream) events += sse(res.text).length;
      const { message, finish } = openaiMessage(res.text, stream);
      answers.push({ message, finish });
      messages.push(message as unknown as TemplateMessage);
      const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
      if (call) messages.push({ role: 'tool', tool_call_id: call.id, content: OBSERVATIONS[k]! });
    }
  } else {
    const messages: Array<{ role: string; content: unknown }> = [
      { role: 'user', content: 'Fix the failing test.' },
    ];
    for (let k = 0; k < 3; k++) {
      const res = await post(`${proxy.session(id)!.baseURL}/messages`, {
        model: 'policy',
        max_tokens: 512,
        messages,
        tools: anthropicTools,
        stream,
      });
      expect(res.status).toBe(200);
      if (stream) events += sse(res.text).length;
      const { content, stop } = anthropicMessage(res.text, stream);
      answers.push({ content, stop });
      messages.push({ role: 'assistant', content });
      const use = content.find((b) => b.type === 'tool_use');
      if (use) {
        messages.push({
          role: 'user',
          content: [{ type: 'tool_result', tool_use_id: use.id, content: OBSERVATIONS[k]! }],
        });
      }
    }
  }
  const [sample] = proxy.finishSession(id, { reward: 1 });
  return { answers, sample: sample!, events };
}

/** Ids that differ between sessions (`chatcmpl-…`, `call_…`) made comparable. */
const normal = (x: unknown) =>
  JSON.parse(JSON.stringify(x).replace(/(chatcmpl|call|toolu)_?-?turn-[\w.-]+?(_\d+)?"/g, '$1$2"'));

describe('capture proxy streaming: the same capture as the non-streamed path', () => {
  for (const dialect of ['openai', 'anthropic'] as const) {
    it(`${dialect}: streamed and non-streamed sessions capture identical tokens, log probs and mask, and answer the same`, async () => {
      const whole = await toolLoop(dialect, false);
      const streamed = await toolLoop(dialect, true);
      expect(Array.from(streamed.sample.tokens)).toEqual(Array.from(whole.sample.tokens));
      expect(Array.from(streamed.sample.loss_mask!)).toEqual(Array.from(whole.sample.loss_mask!));
      expect(Array.from(streamed.sample.rollout_log_probs!)).toEqual(
        Array.from(whole.sample.rollout_log_probs!),
      );
      expect(streamed.sample.response_length).toBe(whole.sample.response_length);
      expect(normal(streamed.answers)).toEqual(normal(whole.answers));
      // token by token: many more events than the handful a finished answer needs
      expect(streamed.events).toBeGreaterThan(30);
    });
  }

  it('vLLM engine: streamed and non-streamed captures are identical', async () => {
    const whole = await toolLoop('openai', false, 'vllm');
    const streamed = await toolLoop('openai', true, 'vllm');
    expect(Array.from(streamed.sample.tokens)).toEqual(Array.from(whole.sample.tokens));
    expect(Array.from(streamed.sample.rollout_log_probs!)).toEqual(
      Array.from(whole.sample.rollout_log_probs!),
    );
    expect(normal(streamed.answers)).toEqual(normal(whole.answers));
  });
});

/**
 * POST over a raw HTTP connection; resolves at the first body bytes, with the time the body first
 * matched `match`, the rest of the body, and a way to hang up.
 */
function openStream(url: string, body: unknown, match = /./) {
  return new Promise<{
    first: string;
    matchedAt: () => number;
    rest: () => Promise<string>;
    hangUp: () => void;
  }>((resolve, reject) => {
    const req = httpRequest(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        let text = '';
        let matchedAt = 0;
        const rest = new Promise<string>((r) => res.once('end', () => r(text)));
        res.on('data', (chunk: Buffer) => {
          const first = text === '';
          text += chunk.toString();
          if (!matchedAt && match.test(text)) matchedAt = performance.now();
          if (first)
            resolve({
              first: text,
              matchedAt: () => matchedAt,
              rest: () => rest,
              hangUp: () => req.destroy(),
            });
        });
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

describe('capture proxy streaming: timing, disconnects and engine faults', () => {
  const LONG = `Here is a long answer, streamed as it is sampled: ${'one token after another, '.repeat(12)}done.`;

  it('the first content chunk reaches the client while a slow engine is still generating', async () => {
    const { proxy, standIn } = await setup(script(LONG), { service: { tokensPerSecond: 60 } });
    proxy.openSession('slow');
    let engineDone = 0;
    standIn.events.on('finish', () => (engineDone = performance.now()));
    const started = performance.now();
    // the first content delta (not just the role chunk)
    const s = await openStream(
      `${proxy.session('slow')!.baseURL}/chat/completions`,
      { messages: [{ role: 'user', content: 'go' }], stream: true },
      /"content":"[^"]/,
    );
    const all = await s.rest();
    const firstAt = s.matchedAt();
    expect(firstAt).toBeGreaterThan(0);
    expect(engineDone).toBeGreaterThan(0);
    // ~80 tokens at 60 tokens/s: over a second of decoding; the client had content before the engine was done
    expect(engineDone - started).toBeGreaterThan(800);
    expect(firstAt).toBeLessThan(engineDone);
    expect(openaiMessage(all, true).message.content).toBe(LONG);
  });

  it('a client that hangs up mid-stream stops the engine request and records no turn', async () => {
    const { proxy, standIn } = await setup(script(LONG), { service: { tokensPerSecond: 60 } });
    proxy.openSession('gone');
    const aborts: string[] = [];
    proxy.events.on('turn:abort', (e) => aborts.push(e.reason));
    const s = await openStream(`${proxy.session('gone')!.baseURL}/messages`, {
      max_tokens: 512,
      messages: [{ role: 'user', content: 'go' }],
      stream: true,
    });
    expect(s.first).toContain('message_start');
    s.hangUp();
    const end = performance.now() + 30_000;
    while ((standIn.stats().running > 0 || aborts.length === 0) && performance.now() < end) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(standIn.stats()).toMatchObject({ running: 0, completed: 0 });
    expect(aborts).toEqual(['Error: client disconnected']);
    expect(proxy.trajectories.trajectory('gone').turns).toHaveLength(0);
  });

  it('an engine that dies mid-stream: the client gets one seamless answer, continued on a healthy engine', async () => {
    const tokenizer = await qwen3();
    const policy = () => LONG;
    // its first answer breaks off halfway, and from then on it is down (503s, unhealthy)
    let down = false;
    const dying = await startStandInEngine({
      tokenizer,
      policy,
      service: { tokensPerSecond: 400 },
      fault: () => {
        if (down) return { kind: 'error', status: 503 };
        down = true;
        setTimeout(() => dying.setHealthy(false), 0);
        return { kind: 'disconnect' };
      },
    });
    const healthy = await startStandInEngine({ tokenizer, policy, service: { tokensPerSecond: 400 } });
    closers.push(
      () => dying.close(),
      () => healthy.close(),
    );
    const a = recording(sglangEngine(dying.url));
    const b = recording(sglangEngine(healthy.url));
    closers.push(
      () => a.engine.close(),
      () => b.engine.close(),
    );
    const proxy = await startCaptureProxy({ engine: [a.engine, b.engine], tokenizer });
    closers.push(() => proxy.close());
    proxy.openSession('moved', { engine: a.engine });
    const retries: string[] = [];
    proxy.events.on('turn:retry', (e) => retries.push(e.url));
    const res = await post(`${proxy.session('moved')!.baseURL}/chat/completions`, {
      messages: [{ role: 'user', content: 'go' }],
      stream: true,
    });
    expect(res.status).toBe(200);
    expect(openaiMessage(res.text, true).message.content).toBe(LONG);
    expect(retries[0]).toBe(dying.url);
    const [turn] = proxy.trajectories.trajectory('moved').turns;
    // the turn is the scripted answer exactly: the tokens sent before the break, then the continuation
    expect(Array.from(turn!.outputIds)).toEqual([...tokenizer.encode(LONG), tokenizer.eosTokenId]);
    expect(turn!.engines).toEqual([dying.url, healthy.url]);
    const continued = b.calls.at(-1)!;
    const sentBefore = turn!.outputIds.length - continued.result.outputIds.length;
    expect(sentBefore).toBeGreaterThan(0);
    expect(Array.from(continued.inputIds.subarray(-sentBefore))).toEqual(
      Array.from(turn!.outputIds.subarray(0, sentBefore)),
    );
  });

  it('retries that run out after tokens were sent end the stream with an error event, and record no turn', async () => {
    const tokenizer = await qwen3();
    let first = true;
    const failing = await startStandInEngine({
      tokenizer,
      policy: () => LONG,
      service: { tokensPerSecond: 400 },
      // half an answer, then 503s until the turn gives up (6 retries with backoff)
      fault: () => {
        const fault = first ? { kind: 'disconnect' as const } : { kind: 'error' as const, status: 503 };
        first = false;
        return fault;
      },
    });
    closers.push(() => failing.close());
    const engine = sglangEngine(failing.url);
    closers.push(() => engine.close());
    const proxy = await startCaptureProxy({ engine, tokenizer });
    closers.push(() => proxy.close());
    proxy.openSession('lost');
    const res = await post(`${proxy.session('lost')!.baseURL}/chat/completions`, {
      messages: [{ role: 'user', content: 'go' }],
      stream: true,
    });
    expect(res.status).toBe(200);
    const events = sse(res.text);
    expect(events.some((e) => /"content":"[^"]/.test(e.data))).toBe(true);
    expect(JSON.parse(events.at(-1)!.data).error.message).toMatch(/answered 503/);
    expect(events.some((e) => e.data === '[DONE]')).toBe(false);
    expect(proxy.trajectories.trajectory('lost').turns).toHaveLength(0);
  }, 20_000);

  it('a turn that fails before its first token is a plain error status (the SDK can retry it), not a stream', async () => {
    const tokenizer = await qwen3();
    const broken = await startStandInEngine({
      tokenizer,
      policy: () => 'x',
      fault: () => ({ kind: 'error', status: 400, message: 'bad request' }),
    });
    closers.push(() => broken.close());
    const engine = sglangEngine(broken.url);
    closers.push(() => engine.close());
    const proxy = await startCaptureProxy({ engine, tokenizer });
    closers.push(() => proxy.close());
    proxy.openSession('early');
    const res = await post(`${proxy.session('early')!.baseURL}/messages`, {
      max_tokens: 64,
      messages: [{ role: 'user', content: 'go' }],
      stream: true,
    });
    expect(res.status).toBe(502);
    expect(res.type).toBe('application/json');
    expect(JSON.parse(res.text).error.message).toContain('bad request');
  });
});

describe('capture proxy streaming: weight updates mid-stream', () => {
  it('a streamed turn cut by a weight update goes on from the sent tokens, even under restart', async () => {
    const tokenizer = await qwen3();
    const text = `Streaming across a weight update: ${'token after token, '.repeat(10)}done.`;
    const standIn = await startStandInEngine({
      tokenizer,
      policy: () => text,
      service: { tokensPerSecond: 100 },
      weightVersion: '1',
    });
    closers.push(() => standIn.close());
    const engine = sglangEngine(standIn.url);
    closers.push(() => engine.close());
    const proxy = await startCaptureProxy({ engine, tokenizer, onWeightUpdate: 'restart' });
    closers.push(() => proxy.close());
    proxy.openSession('w');
    const policies: string[] = [];
    proxy.events.on('turn:interrupted', (e) => policies.push(e.policy));
    const s = await openStream(
      `${proxy.session('w')!.baseURL}/chat/completions`,
      { messages: [{ role: 'user', content: 'go' }], stream: true },
      /"content":"[^"]/,
    );
    expect(s.first).toContain('chat.completion.chunk');
    await new Promise((r) => setTimeout(r, 150));
    await proxy.router.updateWeights({ modelPath: '/ckpt/step-2', weightVersion: '2' });
    const all = await s.rest();
    expect(openaiMessage(all, true).message.content).toBe(text);
    expect(policies).toEqual(['continue']);
    const [turn] = proxy.trajectories.trajectory('w').turns;
    expect(Array.from(turn!.outputIds)).toEqual([...tokenizer.encode(text), tokenizer.eosTokenId]);
    expect(turn!.versionRuns!.map((r) => r.version)).toEqual(['1', '2']);
  });
});
