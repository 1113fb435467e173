import { afterEach, describe, expect, it } from 'vitest';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { ChatTokenizer } from '../engine/tokenizer/tokenizer.js';
import { type StandInEngine, type StandInPolicy, startStandInEngine } from '../standin/engine.js';
import { type CaptureProxy, type CaptureProxyOptions, startCaptureProxy } from './proxy.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

const TEN_MINUTES = 600_000;

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return {
    status: res.status, // biome-ignore lint/suspicious/noExplicitAny: test reads arbitrary JSON answers
    json: (await res.json()) as any,
  };
}

async function until(check: () => boolean, ms = 30_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!check()) {
    if (performance.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

interface Fleet {
  tokenizer: ChatTokenizer;
  standIns: StandInEngine[];
  /** The prompt ids every engine was sent, by session (the `X-SMG-Routing-Key` header) and engine. */
  sent: Array<{ session: string | undefined; url: string; inputIds: Int32Array }>;
  proxy: CaptureProxy;
}

async function standIn(tokenizer: ChatTokenizer, policy: StandInPolicy, extra: Record<string, unknown> = {}) {
  const engine = await startStandInEngine({ tokenizer, policy, weightVersion: '1', ...extra });
  closers.push(() => engine.close());
  return engine;
}

async function fleet(
  n: number,
  policy: StandInPolicy,
  options: Partial<CaptureProxyOptions> & { service?: { tokensPerSecond?: number; slots?: number } } = {},
): Promise<Fleet> {
  const tokenizer = await qwen3();
  const { service, ...proxyOptions } = options;
  const standIns = await Promise.all(
    Array.from({ length: n }, () => standIn(tokenizer, policy, service ? { service } : {})),
  );
  const sent: Fleet['sent'] = [];
  for (const s of standIns) {
    s.events.on('request', (r) => sent.push({ session: r.routingKey, url: s.url, inputIds: r.inputIds }));
  }
  const proxy = await startCaptureProxy({
    engine: standIns.map((s) => sglangEngine(s.url)),
    tokenizer,
    router: { healthIntervalMs: TEN_MINUTES, ...proxyOptions.router },
    ...proxyOptions,
  });
  closers.push(() => proxy.close());
  return { tokenizer, standIns, sent, proxy };
}

const chat = (proxy: CaptureProxy, session: string, content: string, history: unknown[] = []) =>
  post(`${proxy.session(session)!.baseURL}/chat/completions`, {
    messages: [...history, { role: 'user', content }],
  });

describe('engine router in the capture proxy', () => {
  it('places new sessions on the least-loaded engine and keeps each on its engine', async () => {
    const { proxy, sent } = await fleet(3, () => 'ok');
    for (let i = 0; i < 6; i++) proxy.openSession(`s${i}`);
    for (const turn of ['one', 'two']) {
      await Promise.all(Array.from({ length: 6 }, (_, i) => chat(proxy, `s${i}`, turn)));
    }
    expect(proxy.router.status().map((e) => e.sessions)).toEqual([2, 2, 2]);
    for (let i = 0; i < 6; i++) {
      const urls = new Set(sent.filter((r) => r.session === `s${i}`).map((r) => r.url));
      expect(urls.size).toBe(1);
      expect([...urls][0]).toBe(proxy.router.engineOf(`s${i}`));
    }
  });

  it('caps the requests in flight on one engine', async () => {
    const { proxy, standIns } = await fleet(1, () => ({ ids: new Array(40).fill(7) }), {
      router: { maxInFlightPerEngine: 2 },
      service: { tokensPerSecond: 2000 },
    });
    for (let i = 0; i < 6; i++) proxy.openSession(`c${i}`);
    const replies = await Promise.all(Array.from({ length: 6 }, (_, i) => chat(proxy, `c${i}`, 'go')));
    expect(replies.map((r) => r.status)).toEqual(new Array(6).fill(200));
    expect(standIns[0]!.stats().peakRunning).toBe(2);
  });

  it('removes a dead engine at the next rollout completion and moves its sessions with the same token ids', async () => {
    const { proxy, standIns, sent, tokenizer } = await fleet(2, (r) => `turn ${r.requestIndex}`);
    const downs: Array<{ url: string; trigger: string; cause: string }> = [];
    proxy.router.events.on('engine:down', (e) => downs.push(e));
    const a = proxy.openSession('a');
    proxy.openSession('b');
    const first = await chat(proxy, 'a', 'hello');
    await chat(proxy, 'b', 'hello');
    const deadUrl = proxy.router.engineOf('a')!;
    const dead = standIns.find((s) => s.url === deadUrl)!;
    await dead.close();
    // Another rollout completes: the router checks at once (the background interval is 10 minutes).
    proxy.finishSession('b', { reward: 1 });
    await until(() => downs.length === 1);
    expect(downs[0]).toMatchObject({ url: deadUrl, trigger: 'completion' });
    // The cause is how the connection failed (a kept-alive socket closed, a refused connect), not a
    // bare "did not answer 200".
    expect(downs[0]!.cause).toMatch(
      new RegExp(`^${deadUrl.replaceAll('.', '\\.')}/health: (connect |UND_ERR_SOCKET|ECONNRESET)`),
    );
    const history = [
      { role: 'user', content: 'hello' },
      { role: 'assistant', content: first.json.choices[0].message.content },
    ];
    const second = await chat(proxy, 'a', 'again', history);
    expect(second.status).toBe(200);
    expect(proxy.router.engineOf('a')).not.toBe(deadUrl);
    const aSent = sent.filter((r) => r.session === 'a');
    expect(aSent.map((r) => r.url)).toEqual([deadUrl, proxy.router.engineOf('a')]);
    // The new engine got the old engine's prompt ids, then the new turn: no re-tokenisation.
    const turns = proxy.trajectories.trajectory('a').turns;
    const before = Array.from(turns[0]!.promptIds).concat(Array.from(turns[0]!.outputIds));
    expect(Array.from(aSent[1]!.inputIds.subarray(0, before.length))).toEqual(before);
    expect(Array.from(aSent[0]!.inputIds)).toEqual(Array.from(turns[0]!.promptIds));
    const [row] = proxy.finishSession(a.id, { reward: 1 });
    expect(row!.metadata.trajectory_rows).toBe(1);
    expect(row!.metadata.engines).toEqual([deadUrl, proxy.router.status()[1 - standIns.indexOf(dead)]!.url]);
    expect(tokenizer.decode(row!.tokens)).toContain('again');
  });

  it('retries a turn whose engine dies mid-request on a healthy engine', async () => {
    const { proxy, standIns } = await fleet(2, () => ({ ids: new Array(300).fill(9) }), {
      service: { tokensPerSecond: 300 },
    });
    const retries: string[] = [];
    proxy.events.on('turn:retry', (e) => retries.push(e.url));
    proxy.openSession('m');
    const pending = chat(proxy, 'm', 'go');
    await until(() => standIns.some((s) => s.stats().running === 1));
    const busy = standIns.find((s) => s.stats().running === 1)!;
    await busy.close();
    const res = await pending;
    expect(res.status).toBe(200);
    expect(retries).toEqual([busy.url]);
    expect(proxy.router.status().find((e) => e.url === busy.url)!.healthy).toBe(false);
    expect(proxy.trajectories.trajectory('m').turns[0]!.outputIds.length).toBe(300);
  });

  it('readmits a restarted engine and gives it new sessions', async () => {
    const tokenizer = await qwen3();
    const policy: StandInPolicy = () => 'ok';
    const [one, two] = [await standIn(tokenizer, policy), await standIn(tokenizer, policy)];
    const proxy = await startCaptureProxy({
      engine: [sglangEngine(one.url), sglangEngine(two.url)],
      tokenizer,
      router: { healthIntervalMs: TEN_MINUTES },
    });
    closers.push(() => proxy.close());
    const ups: Array<{ url: string; readmitted: boolean }> = [];
    proxy.router.events.on('engine:up', (e) => ups.push(e));
    const port = Number(new URL(two.url).port);
    await two.close();
    await proxy.router.checkNow();
    expect(proxy.router.healthyCount).toBe(1);
    for (let i = 0; i < 2; i++) proxy.openSession(`r${i}`);
    await Promise.all([chat(proxy, 'r0', 'x'), chat(proxy, 'r1', 'x')]);
    expect(proxy.router.status().map((e) => e.sessions)).toEqual([2, 0]);
    const again = await standIn(tokenizer, policy, { port });
    proxy.finishSession('r0', { reward: 0 });
    await until(() => ups.length === 1);
    expect(ups[0]).toMatchObject({ url: two.url, readmitted: true });
    proxy.openSession('r2');
    await chat(proxy, 'r2', 'x');
    expect(proxy.router.engineOf('r2')).toBe(two.url);
    expect(again.stats().completed).toBe(1);
  });

  it('adds and removes engines at run time through the admin route, only with the admin token', async () => {
    const { proxy, tokenizer } = await fleet(1, () => 'ok', { adminToken: 'secret-admin' });
    const extra = await standIn(tokenizer, () => 'ok');
    const admin = `${proxy.url}/admin/engines`;
    expect((await post(admin, { url: extra.url })).status).toBe(401);
    expect((await post(admin, { url: extra.url }, { authorization: 'Bearer s1' })).status).toBe(401);
    const bad = await post(admin, { url: 'not a url' }, { authorization: 'Bearer secret-admin' });
    expect(bad.status).toBe(400);
    expect(bad.json.error.message).toMatch(/url/);
    const added = await post(
      admin,
      { url: extra.url, kind: 'sglang' },
      { authorization: 'Bearer secret-admin' },
    );
    expect(added.status).toBe(200);
    await until(() => proxy.router.healthyCount === 2);
    for (let i = 0; i < 2; i++) proxy.openSession(`d${i}`);
    await Promise.all([chat(proxy, 'd0', 'x'), chat(proxy, 'd1', 'x')]);
    expect(proxy.router.status().map((e) => e.sessions)).toEqual([1, 1]);
    const first = proxy.router.status()[0]!.url;
    const res = await fetch(admin, {
      method: 'DELETE',
      headers: { authorization: 'Bearer secret-admin' },
      body: JSON.stringify({ url: first }),
    });
    expect(res.status).toBe(200);
    expect(proxy.router.status().map((e) => e.url)).toEqual([extra.url]);
    const moved = proxy.router.engineOf('d0') === first ? 'd0' : 'd1';
    expect((await chat(proxy, moved, 'y')).status).toBe(200);
    expect(proxy.router.engineOf(moved)).toBe(extra.url);
    // Without an admin token the route does not exist.
    const plain = await fleet(1, () => 'ok');
    expect((await post(`${plain.proxy.url}/admin/engines`, { url: extra.url })).status).toBe(404);
  });
});

describe('weight updates mid-turn', () => {
  const scripted = Array.from({ length: 400 }, (_, i) => 1000 + i);

  async function updateMidTurn(onWeightUpdate: 'continue' | 'restart') {
    const { proxy, standIns } = await fleet(2, () => ({ ids: scripted }), {
      onWeightUpdate,
      service: { tokensPerSecond: 800 },
    });
    const interrupted: number[] = [];
    proxy.events.on('turn:interrupted', (e) => interrupted.push(e.outputTokens));
    for (let i = 0; i < 4; i++) proxy.openSession(`w${i}`);
    const turns = Array.from({ length: 4 }, (_, i) => chat(proxy, `w${i}`, 'long'));
    await until(() => standIns.every((s) => s.stats().running === 2));
    await new Promise((r) => setTimeout(r, 100));
    await proxy.router.updateWeights({ modelPath: '/ckpt/step-2', weightVersion: '2' });
    const replies = await Promise.all(turns);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(interrupted).toHaveLength(4);
    expect(standIns.map((s) => s.stats().weightUpdates)).toEqual([1, 1]);
    return { proxy, interrupted };
  }

  it('continue: every interrupted turn finishes with its earlier tokens unchanged and per-token versions 1 then 2', async () => {
    const { proxy, interrupted } = await updateMidTurn('continue');
    for (let i = 0; i < 4; i++) {
      const [row] = proxy.finishSession(`w${i}`, { reward: 1 });
      const response = Array.from(row!.tokens.subarray(row!.tokens.length - row!.response_length));
      expect(response).toEqual(scripted);
      expect(row!.weight_versions).toEqual(['1', '2']);
      const spans = row!.metadata.weight_version_spans as Array<[number, number, string]>;
      expect(spans.map((s) => s[2])).toEqual(['1', '2']);
      expect(spans[0]![1]).toBeGreaterThan(0);
      expect(spans[1]![1]).toBe(scripted.length);
      expect(interrupted).toContain(spans[0]![1]);
    }
  });

  it('restart: no token of version 1 remains in a restarted turn', async () => {
    const { proxy } = await updateMidTurn('restart');
    for (let i = 0; i < 4; i++) {
      const [row] = proxy.finishSession(`w${i}`, { reward: 1 });
      expect(row!.weight_versions).toEqual(['2']);
      expect(row!.response_length).toBe(scripted.length);
      expect(row!.metadata.weight_version_spans).toEqual([[0, scripted.length, '2']]);
    }
  });
});

describe('circuit breaker', () => {
  it('fails a turn as an infra failure with the cause once no engine is healthy past the deadline, and closes when one is back', async () => {
    const tokenizer = await qwen3();
    const engine = await standIn(tokenizer, () => 'ok');
    const port = Number(new URL(engine.url).port);
    const proxy = await startCaptureProxy({
      engine: sglangEngine(engine.url),
      tokenizer,
      router: { healthIntervalMs: TEN_MINUTES, unavailableDeadlineMs: 300, recoveryProbeMs: 50 },
    });
    closers.push(() => proxy.close());
    const opened: unknown[] = [];
    const closed: unknown[] = [];
    proxy.router.events.on('breaker:open', (e) => opened.push(e));
    proxy.router.events.on('breaker:close', (e) => closed.push(e));
    proxy.openSession('x');
    await engine.close();
    const res = await chat(proxy, 'x', 'go');
    expect(res.status).toBe(503);
    expect(res.json.error.message).toMatch(
      /no healthy engine for 0\.\d s \(deadline 0\.3 s\): .*ECONNREFUSED/,
    );
    expect(proxy.router.breakerOpen).toBe(true);
    expect(opened).toHaveLength(1);
    let available = false;
    const waiting = proxy.router.whenAvailable().then(() => (available = true));
    await new Promise((r) => setTimeout(r, 100));
    expect(available).toBe(false);
    await standIn(tokenizer, () => 'ok', { port });
    await waiting;
    expect(closed).toHaveLength(1);
    expect((await chat(proxy, 'x', 'go')).status).toBe(200);
  });
});
