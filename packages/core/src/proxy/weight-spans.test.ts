/**
 * The weight version of every captured token, on both wires, through the capture proxy against the
 * stand-in engine (a scripted stand-in, not a model): SGLang's answers carry `meta_info.weight_version`;
 * vLLM's carry no version, so its tokens take the version the router's weight-update log had in force
 * when each streamed chunk (or a whole non-streamed answer) arrived.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { closeAll, closers, post } from '../__fixtures__/proxy-harness.js';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { Engine } from '../engine/types.js';
import { vllmEngine } from '../engine/vllm.js';
import { type StandInPolicy, startStandInEngine } from '../standin/engine.js';
import { type CaptureProxy, startCaptureProxy } from './proxy.js';

afterEach(closeAll);

type Spans = Array<[number, number, string]>;

async function world(
  kind: 'sglang' | 'vllm',
  policy: StandInPolicy,
  options: {
    tokensPerSecond?: number;
    wrap?: (engine: Engine, proxy: () => CaptureProxy) => Engine;
    adminToken?: string;
  } = {},
) {
  const tokenizer = await qwen3();
  const standIn = await startStandInEngine({
    tokenizer,
    policy,
    weightVersion: '3',
    ...(options.tokensPerSecond ? { service: { tokensPerSecond: options.tokensPerSecond } } : {}),
  });
  closers.push(() => standIn.close());
  const client = kind === 'vllm' ? vllmEngine(standIn.url) : sglangEngine(standIn.url);
  closers.push(() => client.close());
  let proxy: CaptureProxy | undefined;
  const engine = options.wrap ? options.wrap(client, () => proxy!) : client;
  proxy = await startCaptureProxy({ engine, tokenizer, adminToken: options.adminToken });
  closers.push(() => proxy!.close());
  return { tokenizer, standIn, proxy };
}

const turn = (proxy: CaptureProxy, session: string, messages: unknown[], stream: boolean) =>
  post(`${proxy.session(session)!.baseURL}/chat/completions`, { messages, stream });

/** The response's spans and loss mask of a session's single row. */
function finish(proxy: CaptureProxy, session: string) {
  const rows = proxy.finishSession(session, { reward: 1 });
  expect(rows).toHaveLength(1);
  const row = rows[0]!;
  return {
    row,
    spans: row.metadata.weight_version_spans as Spans | undefined,
    mask: Array.from(row.loss_mask!),
  };
}

/** The trained stretches of a loss mask as `[start, end]`. */
function trained(mask: number[]): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let i = 0; i < mask.length; ) {
    if (mask[i] !== 1) {
      i++;
      continue;
    }
    let j = i;
    while (j < mask.length && mask[j] === 1) j++;
    out.push([i, j]);
    i = j;
  }
  return out;
}

describe('weight version spans on both wires', () => {
  for (const stream of [false, true]) {
    it(`SGLang (${stream ? 'streamed' : 'not streamed'}): each turn's tokens carry the version the engine reported`, async () => {
      const { proxy, standIn } = await world('sglang', (r) => `answer ${r.requestIndex}`);
      proxy.openSession('s');
      const first = await turn(proxy, 's', [{ role: 'user', content: 'one' }], stream);
      expect(first.status).toBe(200);
      standIn.setWeightVersion('4');
      const history = [
        { role: 'user', content: 'one' },
        { role: 'assistant', content: 'answer 0' },
        { role: 'user', content: 'two' },
      ];
      expect((await turn(proxy, 's', history, stream)).status).toBe(200);
      const { row, spans, mask } = finish(proxy, 's');
      const [a, b] = trained(mask);
      expect(spans).toEqual([
        [a![0], a![1], '3'],
        [b![0], b![1], '4'],
      ]);
      expect(row.weight_versions).toEqual(['3', '4']);
      const url = proxy.router.status()[0]!.url;
      expect(proxy.router.weightLog.entries().map((e) => [e.url, e.version, e.source])).toEqual([
        [url, '3', 'reported'],
        [url, '4', 'reported'],
      ]);
    });

    it(`vLLM (${stream ? 'streamed' : 'not streamed'}): tokens take the version the update log has in force; none logged, no spans`, async () => {
      const { proxy, standIn } = await world('vllm', (r) => `answer ${r.requestIndex}`);
      proxy.openSession('none');
      expect((await turn(proxy, 'none', [{ role: 'user', content: 'one' }], stream)).status).toBe(200);
      expect(finish(proxy, 'none').spans).toBeUndefined();

      // The stand-in's own version never reaches the vLLM wire: only the log names versions.
      standIn.setWeightVersion('99');
      proxy.router.noteWeightUpdate('5');
      proxy.openSession('s');
      expect((await turn(proxy, 's', [{ role: 'user', content: 'one' }], stream)).status).toBe(200);
      proxy.router.noteWeightUpdate('6');
      const history = [
        { role: 'user', content: 'one' },
        { role: 'assistant', content: 'answer 1' },
        { role: 'user', content: 'two' },
      ];
      expect((await turn(proxy, 's', history, stream)).status).toBe(200);
      const { row, spans, mask } = finish(proxy, 's');
      const [a, b] = trained(mask);
      expect(spans).toEqual([
        [a![0], a![1], '5'],
        [b![0], b![1], '6'],
      ]);
      expect(row.weight_versions).toEqual(['5', '6']);
      expect(proxy.router.weightLog.entries().map((e) => [e.version, e.source])).toEqual([
        ['5', 'noted'],
        ['6', 'noted'],
      ]);
    });
  }

  it("SGLang streamed: a generation frozen across an update (in_place pause) is split where the chunks' version changed", async () => {
    const ids = Array.from({ length: 400 }, (_, i) => 1000 + i);
    const { proxy, standIn } = await world('sglang', () => ({ ids }), { tokensPerSecond: 800 });
    const interrupted: number[] = [];
    proxy.events.on('turn:interrupted', (e) => interrupted.push(e.outputTokens));
    proxy.openSession('f');
    const reply = turn(proxy, 'f', [{ role: 'user', content: 'long' }], true);
    const deadline = performance.now() + 30_000;
    while (standIn.stats().running !== 1) {
      if (performance.now() > deadline)
        throw new Error(`waited for the turn to run: ${JSON.stringify(standIn.stats())}`);
      await new Promise((r) => setTimeout(r, 5));
    }
    await new Promise((r) => setTimeout(r, 100));
    await proxy.router.updateWeights({ modelPath: '/ckpt/4', weightVersion: '4', pauseMode: 'in_place' });
    expect((await reply).status).toBe(200);
    expect(interrupted).toEqual([]);
    const { spans } = finish(proxy, 'f');
    expect(spans!.map((x) => x[2])).toEqual(['3', '4']);
    const k = spans![0]![1];
    expect(k).toBeGreaterThan(0);
    expect(k).toBeLessThan(ids.length);
    expect(spans).toEqual([
      [0, k, '3'],
      [k, ids.length, '4'],
    ]);
  });

  it('vLLM: a trainer in another process notes its version through the admin route, only with the admin token', async () => {
    const { proxy } = await world('vllm', (r) => `answer ${r.requestIndex}`, { adminToken: 'secret-admin' });
    const route = `${proxy.url}/admin/weight-version`;
    const auth = { authorization: 'Bearer secret-admin' };
    expect((await post(route, { version: '4' })).status).toBe(401);
    const empty = await post(route, { version: '' }, auth);
    expect(empty.status).toBe(400);
    expect(JSON.parse(empty.text).error.message).toMatch(/version.*send \{"version": "7"\}/s);
    const unknown = await post(route, { version: '4', urls: ['http://127.0.0.1:1'] }, auth);
    expect(unknown.status).toBe(400);
    expect(JSON.parse(unknown.text).error.message).toMatch(/engine http:\/\/127\.0\.0\.1:1 is not routed/);
    const noted = await post(route, { version: '4' }, auth);
    expect(noted.status).toBe(200);
    const url = proxy.router.status()[0]!.url;
    expect(JSON.parse(noted.text).log).toMatchObject([{ url, version: '4', source: 'noted', seq: 0 }]);
    proxy.openSession('a');
    expect((await turn(proxy, 'a', [{ role: 'user', content: 'go' }], true)).status).toBe(200);
    const { spans, mask } = finish(proxy, 'a');
    const [a] = trained(mask);
    expect(spans).toEqual([[a![0], a![1], '4']]);
  });

  /** One 300-token vLLM stream, with a version noted once 100 or more tokens reached the proxy. */
  async function splitStream(before: string | undefined) {
    const ids = Array.from({ length: 300 }, (_, i) => 1000 + i);
    let splitAt = -1;
    const { proxy } = await world('vllm', () => ({ ids }), {
      tokensPerSecond: 600,
      // The trainer's note lands between two chunks.
      wrap: (engine, proxy) => ({
        ...engine,
        generateStream: (request, opts) => {
          let seen = 0;
          return engine.generateStream!(request, {
            ...opts,
            onTokens: (chunk) => {
              if (splitAt < 0 && seen >= 100) {
                splitAt = seen;
                proxy().router.noteWeightUpdate('8');
              }
              seen += chunk.outputIds.length;
              opts.onTokens(chunk);
            },
          });
        },
      }),
    });
    if (before !== undefined) proxy.router.noteWeightUpdate(before);
    proxy.openSession('s');
    const res = await turn(proxy, 's', [{ role: 'user', content: 'go' }], true);
    expect(res.status).toBe(200);
    expect(splitAt).toBeGreaterThanOrEqual(100);
    expect(splitAt).toBeLessThan(ids.length);
    return { ...finish(proxy, 's'), splitAt, n: ids.length };
  }

  it('vLLM streamed: an update noted while one generation streams splits it at the chunk the proxy received next', async () => {
    const { spans, row, splitAt, n } = await splitStream('7');
    expect(spans).toEqual([
      [0, splitAt, '7'],
      [splitAt, n, '8'],
    ]);
    expect(row.weight_versions).toEqual(['7', '8']);
  });

  it('vLLM streamed: a first version logged mid-turn gives the turn no version, not one its earlier tokens lacked', async () => {
    const { spans, row } = await splitStream(undefined);
    expect(spans).toBeUndefined();
    expect(row.weight_versions).toEqual([]);
  });

  for (const stream of [false, true]) {
    it(`vLLM (${stream ? 'streamed' : 'not streamed'}): a turn continued across a weight update (abort, update noted while paused, resume) has two versions`, async () => {
      const ids = Array.from({ length: 400 }, (_, i) => 1000 + i);
      const { proxy, standIn } = await world('vllm', () => ({ ids }), { tokensPerSecond: 800 });
      const interrupted: number[] = [];
      proxy.events.on('turn:interrupted', (e) => interrupted.push(e.outputTokens));
      proxy.router.noteWeightUpdate('1');
      proxy.openSession('w');
      const reply = turn(proxy, 'w', [{ role: 'user', content: 'long' }], stream);
      const deadline = performance.now() + 30_000;
      while (standIn.stats().running !== 1) {
        if (performance.now() > deadline)
          throw new Error(`waited for the turn to run: ${JSON.stringify(standIn.stats())}`);
        await new Promise((r) => setTimeout(r, 5));
      }
      await new Promise((r) => setTimeout(r, 100));
      // The stand-in's pause ends the in-flight request (finish_reason abort on the vLLM wire); once its
      // answer is back the update is noted, and the continuation runs after the resume.
      expect((await post(`${standIn.url}/pause_generation`, { mode: 'abort' })).status).toBe(200);
      while (interrupted.length === 0) {
        if (performance.now() > deadline) throw new Error('waited for the aborted generation to come back');
        await new Promise((r) => setTimeout(r, 5));
      }
      proxy.router.noteWeightUpdate('2');
      expect((await post(`${standIn.url}/continue_generation`, {})).status).toBe(200);
      expect((await reply).status).toBe(200);
      expect(interrupted).toHaveLength(1);
      const k = interrupted[0]!;
      expect(k).toBeGreaterThan(0);
      expect(k).toBeLessThan(ids.length);
      const { spans, row } = finish(proxy, 'w');
      expect(Array.from(row.tokens.subarray(row.tokens.length - row.response_length))).toEqual(ids);
      expect(spans).toEqual([
        [0, k, '1'],
        [k, ids.length, '2'],
      ]);
    });
  }
});
