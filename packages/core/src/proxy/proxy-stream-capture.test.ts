import { request as httpRequest } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import {
  anthropicMessage,
  anthropicTools,
  closeAll,
  closers,
  OBSERVATIONS,
  openaiMessage,
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
import type { ProxyTurnEvent } from './events.js';
import { captureFetch, startCaptureProxy } from './proxy.js';
import type { StitchKind } from './stitch.js';

afterEach(closeAll);

/** A streamed first turn per dialect: the route and the body a harness sends. */
const STREAMED = {
  openai: {
    route: 'chat/completions',
    body: { model: 'm', messages: [{ role: 'user', content: 'go' }], stream: true },
  },
  anthropic: {
    route: 'messages',
    body: { model: 'm', max_tokens: 256, messages: [{ role: 'user', content: 'go' }], stream: true },
  },
  responses: { route: 'responses', body: { model: 'm', input: 'go', store: false, stream: true } },
} as const;
type DialectName = keyof typeof STREAMED;

async function send(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** POST over a raw connection; resolves at the first body bytes with a way to hang up. */
function openStream(url: string, body: unknown) {
  return new Promise<{ first: string; hangUp: () => void }>((resolve, reject) => {
    const req = httpRequest(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        res.once('data', (chunk: Buffer) =>
          resolve({ first: chunk.toString(), hangUp: () => req.destroy() }),
        );
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

const until = async (ok: () => boolean, what: string) => {
  const deadline = performance.now() + 30_000;
  while (!ok()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
};

/** The text the client assembled from a streamed answer, per dialect. */
function streamedText(dialect: DialectName, text: string): string {
  if (dialect === 'openai') return openaiMessage(text, true).message.content as string;
  if (dialect === 'anthropic') {
    return anthropicMessage(text, true)
      .content.map((b) => (b.type === 'text' ? b.text : ''))
      .join('');
  }
  return sse(text)
    .map(({ data }) => JSON.parse(data))
    .filter((e) => e.type === 'response.output_text.delta')
    .map((e) => e.delta)
    .join('');
}

describe('capture proxy: retry-safe capture of streamed turns', () => {
  const LONG = `A streamed answer, token after token: ${'one more piece, '.repeat(10)}done.`;

  for (const dialect of Object.keys(STREAMED) as DialectName[]) {
    it(`${dialect}: a streamed turn retried with x-stainless-retry-count: 1 replays the same SSE, no second sample or turn`, async () => {
      const { proxy, calls } = await setup(script(LONG, 'a second sample'), {
        service: { tokensPerSecond: 400 },
      });
      const session = proxy.openSession(`stream-retry-${dialect}`);
      const turns: ProxyTurnEvent[] = [];
      proxy.events.on('turn', (e) => turns.push(e));
      const { route, body } = STREAMED[dialect];
      const url = `${session.baseURL}/${route}`;
      const first = await send(url, body, { 'x-stainless-retry-count': '0' });
      expect(first.status).toBe(200);
      expect(first.headers.get('content-type')).toBe('text/event-stream');
      // live: the answer came as many events, not one whole body
      expect(sse(first.text).length).toBeGreaterThan(10);
      expect(streamedText(dialect, first.text)).toBe(LONG);
      await until(() => turns.length === 1, 'the streamed turn to be recorded');
      const again = await send(url, body, { 'x-stainless-retry-count': '1' });
      expect(again.status).toBe(200);
      expect(again.headers.get('x-vime-replayed')).toBe('true');
      expect(again.headers.get('content-type')).toBe('text/event-stream');
      expect(again.text).toBe(first.text);
      expect(calls).toHaveLength(1);
      expect(turns).toHaveLength(1);
      expect(proxy.trajectories.trajectory(session.id).turns).toHaveLength(1);
      expect(proxy.finishSession(session.id, { reward: 1 })).toHaveLength(1);
    });
  }

  it('a streamed turn whose client hangs up mid-stream records and keeps nothing: a re-send samples anew', async () => {
    const { proxy, standIn, calls } = await setup(script(LONG, 'the new sample'), {
      service: { tokensPerSecond: 60 },
    });
    const session = proxy.openSession('stream-gone');
    const aborts: string[] = [];
    proxy.events.on('turn:abort', (e) => aborts.push(e.reason));
    const { route, body } = STREAMED.openai;
    const url = `${session.baseURL}/${route}`;
    const s = await openStream(url, body);
    expect(s.first).toContain('chat.completion.chunk');
    s.hangUp();
    await until(() => aborts.length === 1 && standIn.stats().running === 0, 'the engine request to stop');
    expect(proxy.trajectories.trajectory(session.id).turns).toHaveLength(0);
    // The SDK's retry after the dropped connection: nothing was kept, so it is sampled anew.
    const again = await send(url, body, { 'x-stainless-retry-count': '1' });
    expect(again.status).toBe(200);
    expect(again.headers.get('x-vime-replayed')).toBeNull();
    expect(openaiMessage(again.text, true).message.content).toBe('the new sample');
    expect(calls).toHaveLength(1);
    await until(() => proxy.trajectories.trajectory(session.id).turns.length === 1, 'the re-sent turn');
    const [turn] = proxy.trajectories.trajectory(session.id).turns;
    expect(Array.from(turn!.outputIds)).toEqual(Array.from(calls[0]!.result.outputIds));
  });

  it('a streamed turn that fails mid-stream (no engine left) records and keeps nothing: the retry samples anew', async () => {
    const tokenizer = await qwen3();
    // the first answer breaks off halfway, then the engine is down until the test brings it back
    let state: 'first' | 'down' | 'up' = 'first';
    const standIn = await startStandInEngine({
      tokenizer,
      policy: script(LONG, 'after the outage'),
      service: { tokensPerSecond: 400 },
      fault: () => {
        if (state === 'up') return undefined;
        if (state === 'down') return { kind: 'error', status: 503 };
        state = 'down';
        setTimeout(() => standIn.setHealthy(false), 0);
        return { kind: 'disconnect' };
      },
    });
    closers.push(() => standIn.close());
    const engine = sglangEngine(standIn.url);
    closers.push(() => engine.close());
    const proxy = await startCaptureProxy({
      engine,
      tokenizer,
      router: { unavailableDeadlineMs: 300, recoveryProbeMs: 50 },
    });
    closers.push(() => proxy.close());
    const session = proxy.openSession('stream-failed');
    const { route, body } = STREAMED.openai;
    const url = `${session.baseURL}/${route}`;
    const failed = await send(url, body);
    expect(failed.status).toBe(200);
    const last = sse(failed.text).at(-1)!;
    expect(JSON.parse(last.data).error.code).toBe(503);
    expect(failed.text).not.toContain('[DONE]');
    expect(proxy.trajectories.trajectory(session.id).turns).toHaveLength(0);
    state = 'up';
    standIn.setHealthy(true);
    await proxy.router.whenAvailable();
    const again = await send(url, body, { 'x-stainless-retry-count': '1' });
    expect(again.headers.get('x-vime-replayed')).toBeNull();
    expect(openaiMessage(again.text, true).message.content).toBe('after the outage');
    await until(() => proxy.trajectories.trajectory(session.id).turns.length === 1, 'the retried turn');
  });

  it('maxTurns counts a streamed turn while it is written; a hang-up frees its place', async () => {
    const { proxy } = await setup(script(LONG, 'the one turn'), { service: { tokensPerSecond: 60 } });
    const session = proxy.openSession('stream-cap', { maxTurns: 1 });
    const { route, body } = STREAMED.openai;
    const url = `${session.baseURL}/${route}`;
    const s = await openStream(url, body);
    const other = { ...body, messages: [{ role: 'user', content: 'another' }] };
    const refused = await send(url, other);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('x-should-retry')).toBe('false');
    const aborts: string[] = [];
    proxy.events.on('turn:abort', (e) => aborts.push(e.reason));
    s.hangUp();
    await until(() => aborts.length === 1, 'the hang-up to reach the proxy');
    const admitted = await send(url, other);
    expect(admitted.status).toBe(200);
    expect(openaiMessage(admitted.text, true).message.content).toBe('the one turn');
    await until(() => proxy.trajectories.trajectory(session.id).turns.length === 1, 'the admitted turn');
    expect((await send(url, { ...body, messages: [{ role: 'user', content: 'a third' }] })).status).toBe(429);
  });

  it('in process (captureFetch): a streamed turn is recorded once its body was read to the end, a cancelled one never', async () => {
    const { proxy } = await setup(script(LONG, 'read whole'), { service: { tokensPerSecond: 200 } });
    const session = proxy.openSession('stream-in-process');
    const doFetch = captureFetch(session);
    const { body } = STREAMED.openai;
    const post = (content: string) =>
      doFetch('http://vime/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...body, messages: [{ role: 'user', content }] }),
      });
    const turns = () => proxy.trajectories.trajectory(session.id).turns.length;

    const cancelled = await post('first');
    const reader = cancelled.body!.getReader();
    await reader.read();
    await reader.cancel(new Error('the client gave up'));
    await new Promise((r) => setTimeout(r, 100));
    expect(turns()).toBe(0);

    const whole = await post('second');
    const stream = whole.body!.getReader();
    const decoder = new TextDecoder();
    let text = decoder.decode((await stream.read()).value);
    // the first chunk is out, the turn is not yet the client's
    expect(turns()).toBe(0);
    for (;;) {
      const next = await stream.read();
      if (next.done) break;
      text += decoder.decode(next.value);
    }
    expect(openaiMessage(text, true).message.content).toBe('read whole');
    expect(turns()).toBe(1);
  });
});

describe('capture proxy: stitching of streamed turns', () => {
  for (const dialect of ['openai', 'anthropic'] as const) {
    it(`${dialect}: a 3-turn streamed tool loop reuses the captured history token for token`, async () => {
      const { proxy, calls } = await setup(script(...TOOL_LOOP), { service: { tokensPerSecond: 400 } });
      const kinds: StitchKind[] = [];
      proxy.events.on('turn', (e) => kinds.push(e.stitch.kind));
      const session = proxy.openSession(`stitch-stream-${dialect}`);
      if (dialect === 'openai') {
        const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix the failing test.' }];
        for (let k = 0; k < 3; k++) {
          const res = await send(`${session.baseURL}/chat/completions`, { messages, tools, stream: true });
          expect(res.status).toBe(200);
          const { message } = openaiMessage(res.text, true);
          messages.push(message as unknown as TemplateMessage);
          const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
          if (call) messages.push({ role: 'tool', tool_call_id: call.id, content: OBSERVATIONS[k]! });
        }
      } else {
        const messages: Array<{ role: string; content: unknown }> = [
          { role: 'user', content: 'Fix the failing test.' },
        ];
        for (let k = 0; k < 3; k++) {
          const res = await send(`${session.baseURL}/messages`, {
            max_tokens: 512,
            messages,
            tools: anthropicTools,
            stream: true,
          });
          expect(res.status).toBe(200);
          const { content } = anthropicMessage(res.text, true);
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
      await until(() => kinds.length === 3, 'three recorded turns');
      expect(kinds).toEqual(['first', 'reused', 'reused']);
      // each prompt starts with the previous prompt and output ids exactly as the engine had them
      for (let k = 1; k < 3; k++) {
        const prev = calls[k - 1]!;
        const history = [...prev.inputIds, ...prev.result.outputIds];
        expect(Array.from(calls[k]!.inputIds.subarray(0, history.length))).toEqual(history);
      }
      const samples = proxy.finishSession(session.id, { reward: 1 });
      expect(samples).toHaveLength(1);
      expect(samples[0]!.metadata.trajectory_turns).toEqual([0, 1, 2]);
    });
  }
});
