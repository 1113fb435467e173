import { connect } from 'node:net';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { closeAll, closers, recording, script, setup, TOOL_LOOP } from '../__fixtures__/proxy-harness.js';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { Engine } from '../engine/types.js';
import { startStandInEngine } from '../standin/engine.js';
import { type CaptureProxy, startCaptureProxy } from './proxy.js';

afterEach(closeAll);

/** One first turn per dialect: the route and a body a harness would send. */
const FIRST_TURN = {
  openai: { route: 'chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'go' }] } },
  anthropic: {
    route: 'messages',
    body: { model: 'm', max_tokens: 64, messages: [{ role: 'user', content: 'go' }] },
  },
  responses: { route: 'responses', body: { model: 'm', input: 'go', store: false } },
} as const;
type DialectName = keyof typeof FIRST_TURN;
const DIALECTS = Object.keys(FIRST_TURN) as DialectName[];

async function send(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

const until = async (ok: () => boolean, what: string) => {
  const deadline = performance.now() + 30_000;
  while (!ok()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
};

describe('capture proxy: retry-safe capture', () => {
  for (const dialect of DIALECTS) {
    it(`${dialect}: an SDK retry (x-stainless-retry-count > 0) replays the answer: no second sample, no fork`, async () => {
      const { proxy, calls } = await setup(script(TOOL_LOOP[0]!, 'second sample'));
      const session = proxy.openSession(`retry-${dialect}`);
      const { route, body } = FIRST_TURN[dialect];
      const url = `${session.baseURL}/${route}`;
      const first = await send(url, body, { 'x-stainless-retry-count': '0' });
      expect(first.status).toBe(200);
      for (const headers of [
        { 'x-stainless-retry-count': '1' },
        { 'X-Stainless-Retry-Count': '2' },
        { 'x-stainless-retry-count': ' 3 ' },
      ]) {
        const again = await send(url, body, headers);
        expect(again.status).toBe(200);
        expect(again.text).toBe(first.text);
        expect(again.headers.get('x-vime-replayed')).toBe('true');
      }
      expect(calls).toHaveLength(1);
      expect(proxy.trajectories.trajectory(session.id).turns).toHaveLength(1);
      const samples = proxy.finishSession(session.id, { reward: 1 });
      expect(samples).toHaveLength(1);
      expect(samples[0]!.metadata.trajectory_turns).toEqual([0]);
    });
  }

  it("a retry on another session never gets this session's answer (answers are kept per session)", async () => {
    const { proxy, calls } = await setup(script('secret answer of A', 'fresh answer of B'));
    const a = proxy.openSession('owner-a');
    const b = proxy.openSession('owner-b');
    const { body } = FIRST_TURN.responses;
    expect((await send(`${a.baseURL}/responses`, body)).text).toMatch(/secret answer of A/);
    for (const headers of [{ 'x-stainless-retry-count': '1' }, {}]) {
      const other = await send(`${proxy.url}/v1/responses`, body, {
        authorization: `Bearer ${b.apiKey}`,
        ...headers,
      });
      expect(other.headers.get('x-vime-replayed')).toBeNull();
      expect(other.text).not.toMatch(/secret answer of A/);
    }
    expect(calls).toHaveLength(3);
    expect(proxy.trajectories.trajectory(b.id).turns).toHaveLength(2);
  });

  it('a retry header that is not a count, or a plain re-send of an answer that was delivered, is a new sample', async () => {
    const { proxy, calls } = await setup(script('one', 'two', 'three'));
    const session = proxy.openSession('not-a-retry');
    const url = `${session.baseURL}/chat/completions`;
    const { body } = FIRST_TURN.openai;
    await send(url, body);
    for (const value of ['abc', '-1', '1.5']) {
      expect(
        (await send(url, body, { 'x-stainless-retry-count': value })).headers.get('x-vime-replayed'),
      ).toBeNull();
    }
    expect(calls).toHaveLength(4);
  });

  for (const api of ['chat', 'responses'] as const) {
    it(`the official openai client retries a turn whose answer was lost (${api}): it gets the recorded answer`, async () => {
      const { proxy, calls } = await setup(script(TOOL_LOOP[2]!, 'a second sample'));
      const session = proxy.openSession(`sdk-retry-${api}`);
      const retryHeaders: Array<string | null> = [];
      // The first answer reaches the client's network layer and is lost there (a reset): the SDK retries.
      const lossy: typeof fetch = async (input, init) => {
        retryHeaders.push(new Headers(init?.headers).get('x-stainless-retry-count'));
        const res = await fetch(input, init);
        if (retryHeaders.length === 1) {
          await res.text();
          throw new TypeError('fetch failed: socket hang up');
        }
        return res;
      };
      const client = new OpenAI({
        baseURL: `${proxy.url}/v1`,
        apiKey: session.apiKey,
        maxRetries: 2,
        fetch: lossy,
      });
      const text =
        api === 'chat'
          ? (
              await client.chat.completions.create({
                model: 'm',
                messages: [{ role: 'user', content: 'go' }],
              })
            ).choices[0]!.message.content
          : (await client.responses.create({ model: 'm', input: 'go', store: false })).output_text;
      expect(text).toBe('The bug is in a.py: `return 1` should be `return 2`.');
      expect(retryHeaders).toEqual(['0', '1']);
      expect(calls).toHaveLength(1);
      const samples = proxy.finishSession(session.id, { reward: 1 });
      expect(samples).toHaveLength(1);
      expect(samples[0]!.metadata.trajectory_turns).toEqual([0]);
    });
  }
});

/** A proxy whose engine holds each result until released: the turn is generated, the client not yet answered. */
async function heldProxy() {
  const tokenizer = await qwen3();
  const standIn = await startStandInEngine({ tokenizer, policy: script(...TOOL_LOOP) });
  const sg = sglangEngine(standIn.url);
  let held: { generated: () => void; release: Promise<void> } | undefined;
  const holding: Engine = {
    ...sg,
    async generate(request) {
      // the engine finishes the turn even though the client leaves meanwhile
      const result = await sg.generate(request, {});
      if (held) {
        held.generated();
        await held.release;
      }
      return result;
    },
  };
  const rec = recording(holding);
  const proxy = await startCaptureProxy({ engine: rec.engine, tokenizer });
  closers.push(
    () => standIn.close(),
    () => sg.close(),
    () => proxy.close(),
  );
  /** Send a turn on a raw socket and drop the connection after the engine produced it, before the answer. */
  async function dropAfterGeneration(sessionId: string, route: string, body: string): Promise<void> {
    let generated!: () => void;
    let release!: () => void;
    const wasGenerated = new Promise<void>((r) => {
      generated = r;
    });
    held = { generated, release: new Promise<void>((r) => (release = r)) };
    const { hostname, port } = new URL(proxy.url);
    const socket = connect(Number(port), hostname);
    socket.on('error', () => {});
    socket.write(
      `POST /sessions/${proxy.session(sessionId)!.apiKey}/v1/${route} HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await wasGenerated;
    socket.destroy();
    await until(() => proxy.connections === 0, 'the proxy to see the client gone');
    held = undefined;
    release();
    // the proxy finishes the turn and finds nobody to answer
    await new Promise((r) => setTimeout(r, 50));
  }
  return { proxy, calls: rec.calls, dropAfterGeneration };
}

describe('capture proxy: a client that disconnects before its answer', () => {
  it('the turn is not recorded; the same body re-sent gets the kept answer and records it once (no second sample)', async () => {
    const { proxy, calls, dropAfterGeneration } = await heldProxy();
    const session = proxy.openSession('dropped-1');
    const messages: Array<Record<string, unknown>> = [{ role: 'user', content: 'Fix the failing test.' }];
    const body = JSON.stringify({ model: 'm', messages });
    await dropAfterGeneration(session.id, 'chat/completions', body);
    expect(calls).toHaveLength(1);
    expect(proxy.trajectories.trajectory(session.id).turns).toHaveLength(0);
    // the SDK re-sends the identical body (no retry header: it never saw an answer)
    const again = await send(`${session.baseURL}/chat/completions`, body);
    expect(again.status).toBe(200);
    expect(again.headers.get('x-vime-replayed')).toBe('true');
    expect(calls).toHaveLength(1);
    expect(proxy.trajectories.trajectory(session.id).turns).toHaveLength(1);
    const message = JSON.parse(again.text).choices[0].message;
    messages.push(message, { role: 'tool', tool_call_id: message.tool_calls[0].id, content: 'a.py' });
    expect((await send(`${session.baseURL}/chat/completions`, { model: 'm', messages })).status).toBe(200);
    expect(calls).toHaveLength(2);
    const samples = proxy.finishSession(session.id, { reward: 1 });
    expect(samples).toHaveLength(1);
    expect(samples[0]!.metadata.trajectory_turns).toEqual([0, 1]);
    expect(samples[0]!.metadata.drift).toEqual({ forks: 0, realigns: 0, retokenizedTokens: 0 });
  });

  it('a dropped turn the client never asks for again stays unrecorded (responses dialect)', async () => {
    const { proxy, calls, dropAfterGeneration } = await heldProxy();
    const session = proxy.openSession('dropped-2');
    await dropAfterGeneration(session.id, 'responses', JSON.stringify({ input: 'first try', store: false }));
    const res = await send(`${session.baseURL}/responses`, { input: 'second try', store: false });
    expect(res.status).toBe(200);
    expect(calls).toHaveLength(2);
    const { turns } = proxy.trajectories.trajectory(session.id);
    expect(turns).toHaveLength(1);
    expect(Array.from(turns[0]!.promptIds)).toEqual(Array.from(calls[1]!.inputIds));
  });
});

describe('capture proxy: turn caps and finished sessions', () => {
  it('a session past its turn cap is answered 429 in each dialect (x-should-retry: false); retries still replay', async () => {
    const { proxy, calls } = await setup(script('ok'), { proxy: { maxTurns: 2 } });
    type ErrorBody = { type?: string; error: { type: string } };
    const shapeOf = (dialect: DialectName, b: ErrorBody) =>
      dialect === 'anthropic' ? `${b.type}/${b.error.type}` : b.error.type;
    const expected = {
      openai: 'usage_limit_reached',
      anthropic: 'error/rate_limit_error',
      responses: 'usage_limit_reached',
    };
    for (const dialect of DIALECTS) {
      const session = proxy.openSession(`cap-${dialect}`);
      const { route, body } = FIRST_TURN[dialect];
      const url = `${session.baseURL}/${route}`;
      const turn = (n: number) => send(url, { ...body, model: `m-${n}` }, { 'x-stainless-retry-count': '0' });
      expect((await turn(1)).status).toBe(200);
      expect((await turn(2)).status).toBe(200);
      const capped = await turn(3);
      expect(capped.status).toBe(429);
      expect(capped.headers.get('x-should-retry')).toBe('false');
      const error = JSON.parse(capped.text);
      expect(shapeOf(dialect, error)).toBe(expected[dialect]);
      expect(capped.text).toMatch(/2 turns \(maxTurns\)/);
      const replay = await send(url, { ...body, model: 'm-2' }, { 'x-stainless-retry-count': '1' });
      expect(replay.status).toBe(200);
      expect(proxy.trajectories.trajectory(session.id).turns).toHaveLength(2);
    }
    expect(calls).toHaveLength(6);
    const roomy = proxy.openSession('cap-roomy', { maxTurns: 3 });
    for (let n = 0; n < 3; n++) {
      expect(
        (await send(`${roomy.baseURL}/chat/completions`, { messages: [{ role: 'user', content: `${n}` }] }))
          .status,
      ).toBe(200);
    }
    expect(
      (await send(`${roomy.baseURL}/chat/completions`, { messages: [{ role: 'user', content: 'x' }] }))
        .status,
    ).toBe(429);
    for (const bad of [0, -1, 1.5, '2', Number.NaN]) {
      expect(() => proxy.openSession(`bad-${String(bad)}`, { maxTurns: bad as number })).toThrow(
        /maxTurns: expected a positive integer/,
      );
    }
  });

  it('a burst of parallel turns on a capped session: exactly maxTurns are sampled, the rest get 429', async () => {
    const { proxy, calls } = await setup(script('ok'), {
      service: { tokensPerSecond: 200 },
      proxy: { maxTurns: 2 },
    });
    const session = proxy.openSession('cap-burst');
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        send(`${session.baseURL}/chat/completions`, { messages: [{ role: 'user', content: `burst ${i}` }] }),
      ),
    );
    expect(results.map((r) => r.status).sort()).toEqual([200, 200, 429, 429, 429, 429, 429, 429]);
    expect(calls).toHaveLength(2);
    expect(proxy.trajectories.trajectory(session.id).turns).toHaveLength(2);
  });

  it('a finished session answers 409 with the reason (path, bearer, x-api-key, auto-open); a never-opened one stays 401', async () => {
    const { proxy } = await setup(script('ok'), { proxy: { autoOpenSessions: true } });
    const session = proxy.openSession('done-1');
    expect((await send(`${session.baseURL}/chat/completions`, FIRST_TURN.openai.body)).status).toBe(200);
    proxy.finishSession('done-1', { reward: 1 });
    const attempts = [
      send(`${session.baseURL}/chat/completions`, FIRST_TURN.openai.body),
      send(`${proxy.url}/v1/chat/completions`, FIRST_TURN.openai.body, {
        authorization: `Bearer ${session.apiKey}`,
      }),
      send(`${proxy.url}/v1/messages`, FIRST_TURN.anthropic.body, { 'x-api-key': session.apiKey }),
      // auto-open takes a bare id as a new session's key, never a finished one's
      send(`${proxy.url}/v1/responses`, FIRST_TURN.responses.body, { authorization: 'Bearer done-1' }),
    ];
    for (const res of await Promise.all(attempts)) {
      expect(res.status).toBe(409);
      expect(res.headers.get('x-should-retry')).toBe('false');
      expect(res.text).toMatch(/session \\"done-1\\" is finished/);
    }
    // auto-open did not bring it back
    expect(proxy.size).toBe(0);
    expect(proxy.trajectories.has('done-1')).toBe(false);
    // opened again on purpose, it is a new session
    const again = proxy.openSession('done-1');
    expect((await send(`${again.baseURL}/chat/completions`, FIRST_TURN.openai.body)).status).toBe(200);
  });

  it('a turn in flight when its session is finished is answered 409', async () => {
    const tokenizer = await qwen3();
    const standIn = await startStandInEngine({
      tokenizer,
      policy: () => ({ ids: new Array(400).fill(13) }),
      service: { tokensPerSecond: 200 },
    });
    const sg = sglangEngine(standIn.url);
    const proxy: CaptureProxy = await startCaptureProxy({ engine: sg, tokenizer });
    closers.push(
      () => standIn.close(),
      () => sg.close(),
      () => proxy.close(),
    );
    const session = proxy.openSession('done-2');
    const pending = send(`${session.baseURL}/responses`, { input: 'write a lot', store: false });
    await until(() => standIn.stats().running === 1, 'the turn to start');
    proxy.finishSession('done-2', { status: 'aborted' });
    const res = await pending;
    expect(res.status).toBe(409);
    expect(JSON.parse(res.text).error.message).toMatch(/is finished/);
  });
});
