// Hostile clients against the capture proxy: oversize, huge, slow and flooding clients must be refused,
// dropped or worked off the event loop while a legitimate session keeps being served within a bound of
// its own unloaded latency. One file, so these heavy tests never run at the same time as each other.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type Attacker,
  flowing,
  LegitClient,
  latencyBound,
  p99,
  parseRaw,
  send,
  startAttacker,
} from '../__fixtures__/proxy-attack.js';
import { closeAll, closers, setup } from '../__fixtures__/proxy-harness.js';
import type { CaptureProxy } from './proxy.js';
import type { ProxyLimits } from './server.js';

afterEach(closeAll);
let attacker: Attacker;
beforeAll(async () => {
  attacker = await startAttacker();
});
afterAll(() => attacker.close());

async function attacked(limits: ProxyLimits = {}) {
  const { proxy } = await setup(() => 'pong', { proxy: { limits } });
  proxy.openSession('victim');
  proxy.openSession('attacker');
  // a second attacking session: one session's bodies in flight are capped together (maxSessionBodyBytes)
  proxy.openSession('attacker-2');
  const legit = new LegitClient(proxy.url, proxy.session('victim')!.apiKey);
  closers.push(async () => legit.close());
  await legit.turns(3); // warm up: JIT, the keep-alive socket, the engine connection
  const baseline = await legit.turns(15);
  return { proxy, legit, bound: latencyBound(baseline) };
}

describe('capture proxy hardening: oversize bodies', () => {
  const MB600 = 600 * 1024 * 1024;

  for (const variant of ['declared Content-Length', 'chunked, no Content-Length'] as const) {
    it(`refuses a 600 MB body (${variant}) with a 413 in the dialect, without buffering it`, async () => {
      const { proxy, legit, bound } = await attacked();
      const rss0 = process.memoryUsage().rss;
      const declared = variant === 'declared Content-Length';
      const openai = attacker.run({
        op: 'stream',
        url: `${proxy.url}/v1/chat/completions`,
        bytes: MB600,
        headers: declared
          ? {
              authorization: `Bearer ${proxy.session('attacker')!.apiKey}`,
              'content-length': String(MB600 + 48),
            }
          : { authorization: `Bearer ${proxy.session('attacker')!.apiKey}`, 'transfer-encoding': 'chunked' },
      });
      const anthropic = attacker.run({
        op: 'stream',
        url: `${proxy.session('attacker-2')!.baseURL}/messages`,
        bytes: MB600,
        headers: declared ? { 'content-length': String(MB600 + 48) } : {},
      });
      const during = await legit.turns(10);
      const [a, b] = await Promise.all([openai, anthropic]);
      for (const [answer, dialect] of [
        [a, 'openai'],
        [b, 'anthropic'],
      ] as const) {
        // the proxy answers 413 and closes; a client still writing may see the reset first
        if ('error' in answer) expect(answer.error).toMatch(/EPIPE|ECONNRESET/);
        else {
          expect(answer.status).toBe(413);
          const body = JSON.parse(answer.text);
          if (dialect === 'openai') expect(body.error.message).toMatch(/limits\.maxBodyBytes/);
          else expect(body).toMatchObject({ type: 'error', error: { type: 'request_too_large' } });
        }
      }
      expect(process.memoryUsage().rss - rss0).toBeLessThan(300 * 1024 * 1024);
      const flow = flowing(during, bound);
      expect(flow.ok, JSON.stringify({ ...flow, bound, during })).toBe(true);
      expect(await legit.turn()).toBeLessThan(bound);
    });
  }

  it('refuses an oversize body sent through captureFetch, and a body just over a configured cap', async () => {
    const { proxy } = await setup(() => 'pong', { proxy: { limits: { maxBodyBytes: 4096 } } });
    const s = proxy.openSession('cf');
    const huge = JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(5000) }] });
    const inProcess = await s.fetch('http://vime/v1/chat/completions', { method: 'POST', body: huge });
    expect(inProcess.status).toBe(413);
    const overHttp = await send(undefined, `${s.baseURL}/chat/completions`, huge);
    expect(overHttp.status).toBe(413);
    expect(overHttp.headers.connection).toBe('close');
    const fits = JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(3000) }] });
    expect((await send(undefined, `${s.baseURL}/chat/completions`, fits)).status).toBe(200);
  });

  it('refuses an oversize request head with a JSON 431 (one huge header, thousands of headers)', async () => {
    const { proxy, legit, bound } = await attacked({ maxHeaderBytes: 8192 });
    const heads = [
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(100_000)}\r\n\r\n`,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 3000 }, (_, i) => `X-H${i}: v\r\n`).join('')}\r\n`,
    ];
    const attack = attacker.run({
      op: 'sockets',
      url: proxy.url,
      scripts: heads,
      everyMs: 0,
      waitMs: 10_000,
    });
    const during = await legit.turns(5);
    for (const { closed, received } of await attack) {
      expect(closed).toBe(true);
      const answer = parseRaw(received);
      expect(answer.status).toBe(431);
      expect(answer.body).toMatchObject({ error: { message: expect.stringMatching(/maxHeaderBytes/) } });
    }
    expect(p99(during)).toBeLessThan(bound);
  });

  it('refuses JSON nested past the depth cap with a 400, in tool schemas and tool_use inputs', async () => {
    const { proxy, legit, bound } = await attacked();
    const deep = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
    const bodies = [
      [
        'openai',
        `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":${deep(100_000)}}}]}`,
      ],
      [
        'anthropic',
        `{"max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":${deep(100_000)}}]},{"role":"user","content":"x"}]}`,
      ],
      ['openai', `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"k":${deep(5_000)}}}`],
    ] as const;
    for (const [dialect, body] of bodies) {
      const path = dialect === 'openai' ? '/v1/chat/completions' : '/v1/messages';
      const res = await send(
        undefined,
        `${proxy.url}/sessions/${proxy.session('attacker')!.apiKey}${path}`,
        body,
      );
      expect(res.status).toBe(400);
      expect(JSON.parse(res.text).error.message).toMatch(/limits\.maxJsonDepth/);
    }
    expect(p99(await legit.turns(5))).toBeLessThan(bound);
  });
});

/** Source-like text: what a `cat` of a huge log or generated file sends back as a tool result. */
const FILL = 'def handler(event, ctx):\\n    return process(event.payload, retries=3)  # see issue 1234\\n';

describe('capture proxy hardening: large inputs are tokenized off the event loop', () => {
  // caps raised so a 30 MB prompt is tokenized at all (by default it is refused: limits.maxTokenizeChars)
  const limits = { maxTokenizeChars: 64 << 20, maxTokenizeCharsPerMinute: 64 << 20 };
  for (const dialect of ['openai', 'anthropic'] as const) {
    it(`a 30 MB ${dialect} body does not hold other sessions' turns`, async () => {
      const { proxy } = await setup(() => 'pong', { proxy: { limits } });
      proxy.openSession('victim');
      proxy.openSession('big');
      const legit = new LegitClient(proxy.url, proxy.session('victim')!.apiKey);
      closers.push(async () => legit.close());
      await legit.turns(3);
      const bound = latencyBound(await legit.turns(15));
      const turns: unknown[] = [];
      proxy.events.on('turn', (e) => turns.push(e.sessionId));
      const big = attacker.run({
        op: 'stream',
        url: `${proxy.session('big')!.baseURL}/${dialect === 'openai' ? 'chat/completions' : 'messages'}`,
        bytes: 30 * 1024 * 1024,
        headers: {},
        fill: FILL,
      });
      // every legitimate turn while the big one is received, parsed and tokenized
      const during = await legit.turns(30);
      expect(turns.filter((s) => s === 'big')).toEqual([]); // still tokenizing: the bound held against it
      const flow = flowing(during, bound);
      expect(flow.ok, JSON.stringify({ ...flow, bound, during })).toBe(true);
      await proxy.close(); // the big request's connection drops: its tokenization is stopped
      expect(await big).toMatchObject({ error: expect.any(String) });
    });
  }
});

/** The legitimate session's turn latencies while `attack` is under way (one at least). */
async function turnsDuring(legit: LegitClient, attack: Promise<unknown>): Promise<number[]> {
  let answered = false;
  void attack.then(() => {
    answered = true;
  });
  const during: number[] = [];
  while (!answered) during.push(await legit.turn());
  return during;
}

describe('capture proxy hardening: bodies of many tiny items', () => {
  // Parsing, validating and rendering cost grows with the number of JSON values, not bytes: 17 MB of
  // tiny messages held the event loop for seconds and took minutes to tokenize.
  const shapes = ['messages', 'parts', 'tools', 'toolCalls'] as const;
  for (const dialect of ['openai', 'anthropic'] as const) {
    const route = dialect === 'openai' ? 'chat/completions' : 'messages';
    it(`refuses ${dialect} bodies of 400k messages, parts, tools or tool calls with a 413 while others are served`, async () => {
      const { proxy, legit, bound } = await attacked();
      for (const shape of shapes) {
        const big = attacker.run({
          op: 'items',
          url: `${proxy.session('attacker')!.baseURL}/${route}`,
          dialect,
          shape,
          count: 400_000,
        });
        const during = await turnsDuring(legit, big);
        const flow = flowing(during, bound);
        expect(flow.ok, JSON.stringify({ shape, ...flow, bound })).toBe(true);
        const res = await big;
        expect(res, shape).toMatchObject({ status: 413 });
        expect(JSON.parse((res as { text: string }).text).error.message).toMatch(/limits\.maxJsonValues/);
      }
    });
  }

  it('answers a body of 30k distinct messages under the cap while other turns flow', async () => {
    const { proxy, legit, bound } = await attacked();
    const turns: string[] = [];
    proxy.events.on('turn', (e) => turns.push(e.sessionId));
    const big = attacker.run({
      op: 'items',
      url: `${proxy.session('attacker')!.baseURL}/chat/completions`,
      dialect: 'openai',
      shape: 'messages',
      count: 30_000,
    });
    const during = await turnsDuring(legit, big);
    expect(await big).toMatchObject({ status: 200 });
    expect(turns).toContain('attacker');
    const flow = flowing(during, bound);
    expect(flow.ok, JSON.stringify({ ...flow, bound })).toBe(true);
  });
});

describe('capture proxy hardening: slow and idle clients, connection floods', () => {
  const limits = { headersTimeoutMs: 600, requestTimeoutMs: 1_200, keepAliveTimeoutMs: 500 };
  /** A turn's head from the attacker's own session (its key is valid: the proxy waits for the body). */
  const postHead = (proxy: CaptureProxy) =>
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${proxy.session('attacker')!.apiKey}\r\nContent-Type: application/json\r\n`;

  it('drops slow-header clients (several spellings) with a 408 while a session is served', async () => {
    const { proxy, legit, bound } = await attacked(limits);
    const attack = attacker.run({
      op: 'sockets',
      url: proxy.url,
      scripts: [
        `${postHead(proxy)}Content-Length: 10\r\n\r\n{"a": 1}\r\n`, // a byte at a time
        'GET /v1/models HTTP/1.1\r\nHost: x\r\n', // a head that never ends
        '', // connect and say nothing
      ],
      everyMs: 100,
      waitMs: 10 * limits.headersTimeoutMs,
    });
    const during = await legit.turns(10);
    for (const { closed, received } of await attack) {
      expect(closed).toBe(true);
      if (received) expect(parseRaw(received).status).toBe(408);
    }
    expect(p99(during)).toBeLessThan(bound);
  });

  it('drops a slow body (trickled and stalled) with a 408, but never a turn whose answer is slow', async () => {
    const { proxy, legit, bound } = await attacked(limits);
    const attack = attacker.run({
      op: 'sockets',
      url: proxy.url,
      scripts: [
        { now: `${postHead(proxy)}Content-Length: 5000\r\n\r\n{"messages"`, dribble: ' '.repeat(4989) },
        { now: `${postHead(proxy)}Transfer-Encoding: chunked\r\n\r\n4\r\n{"me\r\n`, dribble: '' },
      ],
      // the heads arrive at once; the bodies never finish
      everyMs: 50,
      waitMs: 10 * limits.requestTimeoutMs,
    });
    const during = await legit.turns(10);
    for (const { closed, received } of await attack) {
      expect(closed).toBe(true);
      expect(parseRaw(received).status).toBe(408);
    }
    expect(p99(during)).toBeLessThan(bound);
    // A turn that takes longer than requestTimeoutMs to answer is not a slow client: it completes.
    const slow = await setup(() => ({ ids: new Array(40).fill(13) }), {
      service: { tokensPerSecond: 20 },
      proxy: { limits },
    });
    const s = slow.proxy.openSession('slow-engine');
    const t0 = performance.now();
    const body = JSON.stringify({ messages: [{ role: 'user', content: 'go' }] });
    expect((await send(undefined, `${s.baseURL}/chat/completions`, body)).status).toBe(200);
    expect(performance.now() - t0).toBeGreaterThan(limits.requestTimeoutMs);
  });

  it('closes idle keep-alive connections after keepAliveTimeoutMs', async () => {
    const { proxy } = await attacked(limits);
    const idle = await attacker.run({
      op: 'sockets',
      url: proxy.url,
      scripts: Array.from({ length: 20 }, () => 'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n'),
      everyMs: 0,
      waitMs: 10 * limits.keepAliveTimeoutMs,
    });
    for (const { closed, received } of idle) {
      expect(closed).toBe(true);
      expect(parseRaw(received).status).toBe(200);
    }
  });

  it('closes the oldest of a flood of 1,100 slow connections past the cap, 503 + Retry-After, and keeps serving', async () => {
    const { keepAliveTimeoutMs: _, ...timeouts } = limits; // the legitimate client keeps its connection
    const { proxy, legit, bound } = await attacked({ ...timeouts, maxConnections: 200 });
    const flood = attacker.run({
      op: 'sockets',
      url: proxy.url,
      scripts: Array.from({ length: 1_100 }, (_, i) =>
        i % 2 ? postHead(proxy) : 'GET /v1/models HTTP/1.1\r\n',
      ),
      everyMs: 150,
      waitMs: 10 * limits.headersTimeoutMs,
    });
    let peak = 0;
    const sample = setInterval(() => {
      peak = Math.max(peak, proxy.connections);
    }, 5);
    await new Promise((r) => setTimeout(r, 200));
    const during = await legit.turns(10);
    const sockets = await flood;
    clearInterval(sample);
    // never more than 200 open sockets (the legitimate one among them); every flood socket is closed:
    // to make room for a newer one (a 503 that says why, or no answer while many others are closing)
    // or with a 408 when its head does not arrive in time
    expect(peak).toBeLessThanOrEqual(200);
    expect(sockets.every((c) => c.closed)).toBe(true);
    const answers = sockets.map((c) => parseRaw(c.received));
    expect(answers.filter((a) => ![0, 503, 408].includes(a.status))).toEqual([]);
    const refused = answers.filter((a) => a.status === 503);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused[0]!.headers).toMatch(/Retry-After: 1/);
    expect(refused[0]!.body).toMatchObject({
      type: 'error',
      error: { type: 'overloaded_error', message: expect.stringMatching(/maxConnections/) },
    });
    expect(p99(during)).toBeLessThan(bound);
    // once the flood is dropped, new connections are served again
    const fresh = new LegitClient(proxy.url, proxy.session('victim')!.apiKey);
    closers.push(async () => fresh.close());
    expect(await fresh.turn()).toBeLessThan(bound);
  });

  it('rejects bad limits with a ConfigError naming the field', async () => {
    for (const [limits, message] of [
      [{ maxBodyBytes: -1 }, /limits\.maxBodyBytes: expected a positive integer, found -1/],
      [{ headersTimeoutMs: 1.5 }, /limits\.headersTimeoutMs/],
      [{ headersTimeoutMs: 5_000, requestTimeoutMs: 1_000 }, /must not exceed limits\.requestTimeoutMs/],
      [{ maxConnection: 10 }, /limits\.maxConnection: unknown limit/],
      [{ maxSessionRequests: 0 }, /limits\.maxSessionRequests: expected a positive integer, found 0/],
      [
        { maxTokenizeChars: 10, maxTokenizeCharsPerMinute: 5 },
        /limits\.maxTokenizeChars \(10\) must not exceed limits\.maxTokenizeCharsPerMinute \(5\)/,
      ],
      [
        { maxSessionBodyBytes: 10 },
        /limits\.maxBodyBytes \(\d+\) must not exceed limits\.maxSessionBodyBytes \(10\)/,
      ],
    ] as const) {
      await expect(setup(() => 'x', { proxy: { limits: limits as ProxyLimits } })).rejects.toThrow(message);
    }
  });
});
