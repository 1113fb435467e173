/**
 * The sharded capture proxy against a stand-in engine over HTTP: the same rows as the one-thread proxy,
 * sessions spread over shards that each know only their own, and `finishSession` exact while answers
 * are on their way.
 */
import { connect as netConnect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { QWEN3_DIR, qwen3 } from '../../__fixtures__/tokenizer.js';
import { sglangEngine } from '../../engine/sglang.js';
import { ConfigError } from '../../errors.js';
import type { Sample } from '../../sample.js';
import type { StandInEngine } from '../../standin/engine.js';
import { startStandInEngine } from '../../standin/engine.js';
import { startCaptureProxy } from '../proxy.js';
import {
  type ShardedCaptureProxy,
  type ShardedCaptureProxyOptions,
  startShardedCaptureProxy,
} from './sharded.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

const ANSWER = (k: number) =>
  `<think>\nstep ${k}\n</think>\n\nRunning.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls ${k}"}}\n</tool_call>`;
const TOOLS = [
  {
    type: 'function',
    function: { name: 'bash', parameters: { type: 'object', properties: { cmd: { type: 'string' } } } },
  },
];

async function engine(tokensPerSecond = Number.POSITIVE_INFINITY): Promise<StandInEngine> {
  const e = await startStandInEngine({
    tokenizer: await qwen3(),
    policy: (r) => ANSWER(r.prompt.split('<tool_response>').length - 1),
    service: { slots: 1000, maxTokensPerSecondPerRequest: tokensPerSecond },
  });
  closers.push(() => e.close());
  return e;
}

async function sharded(
  url: string,
  options: Partial<ShardedCaptureProxyOptions> = {},
): Promise<ShardedCaptureProxy> {
  const proxy = await startShardedCaptureProxy({
    shards: 2,
    engines: [{ kind: 'sglang', url }],
    tokenizerDir: QWEN3_DIR,
    defaultSampling: { temperature: 0 },
    ...options,
  });
  closers.push(() => proxy.close());
  return proxy;
}

/** A harness's loop: each answer sent back as received, with one tool result per call. */
async function converse(
  baseURL: string,
  turns: number,
  body: Record<string, unknown> = {},
  opening = 'fix the failing test',
) {
  const messages: unknown[] = [{ role: 'user', content: opening }];
  for (let k = 0; k < turns; k++) {
    const res = await fetch(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'policy', messages, tools: TOOLS, ...body }),
    });
    expect(res.status).toBe(200);
    const answer = (
      (await res.json()) as { choices: Array<{ message: { tool_calls?: Array<{ id: string }> } }> }
    ).choices[0]!.message;
    messages.push(answer);
    for (const call of answer.tool_calls ?? [])
      messages.push({ role: 'tool', tool_call_id: call.id, content: `file${k}.py` });
  }
}

/** Wait (bounded) until `ready` holds. */
async function until(ready: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ready()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 10));
  }
}

const tokens = (rows: Sample[]) => rows.map((r) => ({ tokens: r.tokens, loss_mask: r.loss_mask }));

describe('sharded capture proxy', () => {
  it('records the same rows as the one-thread proxy, and relays its events', async () => {
    const e = await engine();
    const single = await startCaptureProxy({
      engine: sglangEngine(e.url),
      tokenizer: await qwen3(),
      defaultSampling: { temperature: 0 },
    });
    closers.push(() => single.close());
    const proxy = await sharded(e.url);
    const seen: string[] = [];
    proxy.events.on('turn', (t) => seen.push(`${t.sessionId}:${t.turn.index}:${t.stitch.kind}`));
    const overrides: string[] = [];
    proxy.events.on('sampling:override', (o) => overrides.push(Object.keys(o.fields).join()));

    await converse(single.openSession('task-1').baseURL, 3);
    await converse(proxy.openSession('task-1').baseURL, 3, { temperature: 0.7 });
    const want = single.finishSession('task-1', { reward: 1 });
    const got = proxy.finishSession('task-1', { reward: 1 });
    expect(got).toHaveLength(1);
    expect(tokens(got)).toEqual(tokens(want));
    expect(got[0]!.rollout_log_probs).toEqual(want[0]!.rollout_log_probs);
    expect(got[0]!.response).toBe(want[0]!.response);
    expect((got[0]!.metadata as { lineage: unknown }).lineage).toEqual(
      (want[0]!.metadata as { lineage: unknown }).lineage,
    );
    expect(seen).toEqual(['task-1:0:first', 'task-1:1:reused', 'task-1:2:reused']);
    expect(overrides).toEqual(['temperature', 'temperature', 'temperature']);
  });

  it('a second opening is a thread of its own: its turn events name its trajectory, its rows carry that id', async () => {
    const e = await engine();
    const proxy = await sharded(e.url);
    const seen: string[] = [];
    proxy.events.on('turn', (t) => seen.push(`${t.trajectoryId}:${t.turn.index}:${t.stitch.kind}`));
    const { baseURL } = proxy.openSession('main');
    await converse(baseURL, 2);
    // a subagent: the same session, its own first message
    await converse(baseURL, 2, {}, 'find where the test fails');
    const rows = proxy.finishSession('main', { reward: 1 });
    expect(seen).toEqual(['main:0:first', 'main:1:reused', 'main/1:0:branch', 'main/1:1:reused']);
    expect(rows.map((r) => r.session_id)).toEqual(['main', 'main/1']);
    expect(rows.map((r) => r.reward)).toEqual([1, 1]);
  });

  it('records the same routing replay (R3) as the one-thread proxy', async () => {
    const e = await startStandInEngine({
      tokenizer: await qwen3(),
      policy: (r) => ANSWER(r.prompt.split('<tool_response>').length - 1),
      routedExperts: { layers: 2, topK: 2, experts: 8 },
    });
    closers.push(() => e.close());
    const routingReplay = { layers: 2, topK: 2 };
    const single = await startCaptureProxy({
      engine: sglangEngine(e.url),
      tokenizer: await qwen3(),
      defaultSampling: { temperature: 0 },
      routingReplay,
    });
    closers.push(() => single.close());
    const proxy = await sharded(e.url, { routingReplay });
    await converse(single.openSession('r3').baseURL, 3);
    await converse(proxy.openSession('r3').baseURL, 3);
    const want = single.finishSession('r3', { reward: 1 });
    const got = proxy.finishSession('r3', { reward: 1 });
    expect(tokens(got)).toEqual(tokens(want));
    expect(got[0]!.rollout_routed_experts).toHaveLength(got[0]!.tokens.length - 1);
    expect(got[0]!.rollout_routed_experts).toEqual(want[0]!.rollout_routed_experts);
  });

  it('spreads sessions over its shards; a shard serves only its own, and every other key is a 401', async () => {
    const e = await engine();
    const proxy = await sharded(e.url, { shards: 3 });
    expect(new Set(proxy.urls).size).toBe(3);
    const handles = Array.from({ length: 6 }, (_, i) => proxy.openSession(`rollout-${i}`));
    const origins = handles.map((h) => new URL(h.baseURL).origin);
    expect(new Set(origins).size).toBe(3);
    expect(proxy.session('rollout-4')).toBe(handles[4]);
    const victim = handles[0]!;
    const wrongShard = proxy.urls.find((u) => u !== new URL(victim.baseURL).origin)!;
    const chat = JSON.stringify({ messages: [{ role: 'user', content: 'x' }] });
    const attempts = [
      [`${wrongShard}/sessions/${encodeURIComponent(victim.apiKey)}/v1/chat/completions`, {}],
      [`${new URL(victim.baseURL).origin}/sessions/rollout-0/v1/chat/completions`, {}],
      [`${new URL(victim.baseURL).origin}/v1/chat/completions`, { authorization: 'Bearer rollout-0' }],
      [
        `${new URL(victim.baseURL).origin}/v1/chat/completions`,
        { authorization: `Bearer ${handles[1]!.id}.x` },
      ],
    ] as const;
    for (const [url, headers] of attempts) {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: chat,
      });
      expect(res.status).toBe(401);
    }
    // through its shard, by path, by bearer and through its fetch
    const origin = new URL(victim.baseURL).origin;
    const byBearer = await fetch(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${victim.apiKey}` },
      body: chat,
    });
    expect(byBearer.status).toBe(200);
    const viaFetch = await victim.fetch('http://vime/v1/chat/completions', { method: 'POST', body: chat });
    expect(viaFetch.status).toBe(200);
    await viaFetch.text();
    // the same opening twice: two threads of the session, a row each
    const rows = proxy.finishSession('rollout-0', { reward: 1 });
    expect(rows.map((r) => r.session_id)).toEqual(['rollout-0', 'rollout-0']);
    expect(proxy.trajectories.has('rollout-1')).toBe(true);
    // a finished session's key gets the shard's 409
    const late = await fetch(`${victim.baseURL}/chat/completions`, { method: 'POST', body: chat });
    expect(late.status).toBe(409);
    expect(proxy.size).toBe(5);
  });

  it('finishSession, called the moment an answer arrives, returns every turn answered and no other', async () => {
    const e = await engine();
    const proxy = await sharded(e.url);
    const recorded: number[] = [];
    await Promise.all(
      Array.from({ length: 40 }, async (_, i) => {
        const session = proxy.openSession(`r${i}`);
        await converse(session.baseURL, 1 + (i % 3));
        // no pause: the shard's report of the last turn may still be on its way to this thread
        const rows = proxy.finishSession(session.id, { reward: 1 });
        expect(rows).toHaveLength(1);
        const { turns } = (rows[0]!.metadata as { lineage: { stitch: { turns: Record<string, number> } } })
          .lineage.stitch;
        recorded[i] = Object.values(turns).reduce((a, b) => a + b, 0);
      }),
    );
    expect(recorded).toEqual(Array.from({ length: 40 }, (_, i) => 1 + (i % 3)));
  });

  it('a streamed answer cut by finishSession is not recorded and does not reach its client whole', async () => {
    const e = await engine(50);
    const proxy = await sharded(e.url);
    const session = proxy.openSession('slow');
    const res = await fetch(`${session.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], stream: true }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    await reader.read(); // the stream has begun
    expect(proxy.finishSession('slow', { reward: 0.5 })).toEqual([]);
    let text = '';
    try {
      for (let r = await reader.read(); !r.done; r = await reader.read())
        text += new TextDecoder().decode(r.value);
    } catch {
      // the shard cut the stream
    }
    expect(text).not.toContain('[DONE]');
  });

  it('refuses options it cannot honour, naming them and the fix', async () => {
    const base = {
      engines: [{ kind: 'sglang' as const, url: 'http://127.0.0.1:9' }],
      tokenizerDir: QWEN3_DIR,
    };
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ ...base, engine: {} }, /option `engine` is not for the sharded proxy: give `engines/],
      [{ ...base, socketPath: '/tmp/s' }, /`socketPath`.*startCaptureProxy/],
      [{ ...base, autoOpenSessions: true }, /`autoOpenSessions`/],
      [{ ...base, shardz: 2 }, /unknown option `shardz`/],
      [{ ...base, engines: [] }, /`engines` needs at least one/],
      [
        { ...base, engines: [{ kind: 'tgi', url: 'x' }] },
        /engines\[0\]: expected \{ kind: 'sglang' \| 'vllm', url \}/,
      ],
      [{ ...base, shards: 0 }, /shards: expected a positive integer, found 0/],
      [{ ...base, tokenizerDir: '/nonexistent/tok' }, /\/nonexistent\/tok/],
      [{ ...base, trajectories: undefined, tokenizerDir: '' }, /`tokenizerDir` is required/],
    ];
    for (const [options, message] of cases) {
      const error = await startShardedCaptureProxy(options as unknown as ShardedCaptureProxyOptions).then(
        (p) => p.close().then(() => undefined),
        (err: unknown) => err,
      );
      expect(error, JSON.stringify(options)).toBeInstanceOf(ConfigError);
      expect((error as Error).message).toMatch(message);
    }
    const e = await engine();
    const proxy = await sharded(e.url);
    expect(() => proxy.openSession('a b')).toThrow(/without spaces/);
    expect(() => proxy.openSession('x', { maxContextTokens: -1 })).toThrow(/maxContextTokens/);
    expect(() => proxy.openSession('x', { engine: sglangEngine('http://127.0.0.1:1') })).toThrow(
      /is not one of the proxy's engines/,
    );
    // a value that cannot be copied to a thread: refused, and the id stays free
    expect(() => proxy.openSession('x', { templateKwargs: { f: () => 1 } })).toThrow(
      /cannot cross to a shard/,
    );
    proxy.openSession('x');
    expect(() => proxy.openSession('x')).toThrow(/already open/);
    expect(() => proxy.finishSession('nope')).toThrow(/no open session "nope"/);
  });

  it.each([
    ['one shard filled, then the other', [0, 0, 0, 0, 1, 1, 1, 1]],
    ['both shards in turn', [0, 1, 0, 1, 0, 1, 0, 1]],
    ['the flood on one shard only', [1, 1, 1, 1, 1, 1, 1, 1]],
  ])(
    'limits.maxConnections caps the whole proxy in equal shares; silent sockets make room, oldest first (%s)',
    async (_, order) => {
      const e = await engine();
      const proxy = await sharded(e.url, { limits: { maxConnections: 4 } });
      expect(proxy.maxConnections).toBe(4);
      const sockets: Array<{ shard: number; socket: Socket; received: string; closed: boolean }> = [];
      closers.push(async () => {
        for (const s of sockets) s.socket.destroy();
      });
      // sockets that send nothing, as a slow flood does, one at a time (the order is the point)
      const counts = [0, 0];
      for (const shard of order) {
        const { hostname, port } = new URL(proxy.urls[shard]!);
        const entry = { shard, socket: netConnect(Number(port), hostname), received: '', closed: false };
        entry.socket.on('data', (d) => {
          entry.received += d;
        });
        entry.socket.on('error', () => {});
        entry.socket.on('close', () => {
          entry.closed = true;
        });
        sockets.push(entry);
        counts[shard]!++;
        // this one counted, and the one it made room for told so
        const held = Math.min(counts[0]!, 2) + Math.min(counts[1]!, 2);
        const older = sockets.filter((s) => s.shard === shard).slice(0, -2);
        await until(() => proxy.connections === held && older.every((s) => s.received.includes('\r\n\r\n')));
      }
      // each shard holds its two newest; each older one was told why it was closed
      for (const shard of [0, 1]) {
        const mine = sockets.filter((s) => s.shard === shard);
        const evicted = mine.slice(0, Math.max(0, mine.length - 2));
        await until(() => evicted.every((s) => s.closed));
        for (const s of evicted) {
          expect(s.received).toMatch(/^HTTP\/1\.1 503 /);
          expect(s.received).toMatch(/Retry-After: 1/);
          expect(s.received).toMatch(/limits\.maxConnections\) and this one had sent no request/);
        }
        for (const s of mine.slice(-2)) expect([s.closed, s.received]).toEqual([false, '']);
      }
      expect(proxy.connections).toBe(Math.min(2, order.filter((s) => s === 0).length) + 2);
      // the flood gone, a session is served again on either shard
      for (const s of sockets) s.socket.destroy();
      await until(() => proxy.connections === 0);
      await converse(proxy.openSession('after-1').baseURL, 1);
      await converse(proxy.openSession('after-2').baseURL, 1);
      expect(proxy.finishSession('after-1', { reward: 1 })).toHaveLength(1);
    },
  );

  it('refuses a socket with a 503 only when every socket of its shard carries a request', async () => {
    const e = await engine(1); // one token a second: the request below is still being answered
    const proxy = await sharded(e.url, { limits: { maxConnections: 2 } });
    const s = proxy.openSession('slow');
    const { hostname, port, pathname } = new URL(s.baseURL);
    const open = (text: string) => {
      const entry = { socket: netConnect(Number(port), hostname), received: '' };
      entry.socket.on('data', (d) => {
        entry.received += d;
      });
      entry.socket.on('error', () => {});
      entry.socket.write(text);
      closers.push(async () => void entry.socket.destroy());
      return entry;
    };
    // a request the engine is answering: its socket carries a request and makes no room (waiting for
    // the engine to see it, not for the socket to connect: the proxy counts a request from its head)
    const body = JSON.stringify({ messages: [{ role: 'user', content: 'x' }] });
    const reached = new Promise<void>((resolve) => e.events.once('request', () => resolve()));
    const busy = open(
      `POST ${pathname}/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await reached;
    const refused = open('');
    await until(() => refused.received.includes('\r\n\r\n'));
    expect(refused.received).toMatch(/^HTTP\/1\.1 503 /);
    expect(refused.received).toMatch(/each carrying a request \(limits\.maxConnections\)/);
    expect(busy.received).toBe('');
  });
});
