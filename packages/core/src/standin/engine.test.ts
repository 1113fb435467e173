import { afterEach, describe, expect, it } from 'vitest';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { Engine } from '../engine/types.js';
import { vllmEngine } from '../engine/vllm.js';
import { EngineError } from '../errors.js';
import { type StandInEngine, type StandInEngineOptions, startStandInEngine } from './engine.js';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

async function standIn(options: Partial<StandInEngineOptions> = {}): Promise<StandInEngine> {
  const engine = await startStandInEngine({
    tokenizer: await qwen3(),
    policy: () => 'Hello there.',
    ...options,
  });
  open.push(engine);
  return engine;
}
function client<E extends Engine>(e: E): E {
  open.push(e);
  return e;
}

/** Polls `check` until it holds; the budget is generous enough for a machine at load 8 on 2 cores. */
async function until(check: () => boolean, ms = 30_000): Promise<void> {
  const end = performance.now() + ms;
  while (!check()) {
    if (performance.now() > end) throw new Error(`condition not met in ${ms} ms: ${check.toString()}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** The regex for SGLang decode-batch lines (from the engine's log format). */
const DECODE_LINE =
  /Decode batch(?: \[\d+\])?[.,] #running-req: (?<running>\d+), (?:#token: (?<tokens>\d+), token usage: (?<usage>[\d.]+)).*?(?:cuda|cpu) graph: (?<graph>True|False), gen throughput \(token\/s\): (?<tput>[\d.]+), #queue-req: (?<queue>\d+)/;

describe('stand-in engine over the SGLang wire', () => {
  it('returns the policy text as real token ids, with one logprob each and the stop token', async () => {
    const tok = await qwen3();
    const seen: string[] = [];
    const engine = await standIn({
      policy: (r) => {
        seen.push(r.prompt);
        return 'Sure: `ls`.';
      },
      weightVersion: 'v7',
    });
    const sg = client(sglangEngine(engine.url));
    const prompt = tok.encode('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
    const out = await sg.generate({ inputIds: prompt, sampling: { maxTokens: 64, temperature: 1 } });
    expect(Array.from(out.outputIds)).toEqual([...tok.encode('Sure: `ls`.'), tok.eosTokenId]);
    expect(out.logprobs.length).toBe(out.outputIds.length);
    for (const lp of out.logprobs) expect(lp).toBeLessThanOrEqual(0);
    expect(out.finishReason).toBe('stop');
    expect(out.weightVersion).toBe('v7');
    expect(out.promptTokens).toBe(prompt.length);
    expect(seen[0]).toBe(tok.decode(prompt));
    expect(await sg.health()).toBe(true);
    expect((await sg.modelInfo()).weightVersion).toBe('v7');
  });

  it('truncates at max_new_tokens with finish reason length', async () => {
    const engine = await standIn({ policy: () => 'one two three four five six seven eight' });
    const out = await client(sglangEngine(engine.url)).generate({
      inputIds: [1, 2, 3],
      sampling: { maxTokens: 3 },
    });
    expect(out.outputIds.length).toBe(3);
    expect(out.finishReason).toBe('length');
  });

  it('serves vLLM completions with prompt token ids, token_ids and logprobs', async () => {
    const tok = await qwen3();
    const engine = await standIn({ policy: () => 'Done.' });
    const vl = client(vllmEngine(engine.url));
    const out = await vl.generate({ inputIds: tok.encode('hi'), sampling: { maxTokens: 16 } });
    expect(Array.from(out.outputIds)).toEqual([...tok.encode('Done.'), tok.eosTokenId]);
    expect(out.logprobs.length).toBe(out.outputIds.length);
    expect((await vl.modelInfo()).modelPath).toBe('vime-standin');
  });

  it('queues beyond its slots and shares a fixed token throughput (saturation is real)', async () => {
    const engine = await standIn({
      policy: () => ({ ids: new Array(100).fill(42) }),
      service: { slots: 2, tokensPerSecond: 400 },
    });
    const sg = client(sglangEngine(engine.url));
    const t0 = performance.now();
    const runs = Array.from({ length: 4 }, () =>
      sg.generate({ inputIds: [1], sampling: { maxTokens: 100 } }),
    );
    await until(() => engine.stats().queued === 2);
    expect(engine.stats().running).toBe(2);
    const metrics = await (await fetch(`${engine.url}/metrics`)).text();
    expect(metrics).toMatch(/^sglang:num_running_reqs\{model_name="vime-standin".*\} 2$/m);
    expect(metrics).toMatch(/^sglang:num_queue_reqs\{.*\} 2$/m);
    await Promise.all(runs);
    const elapsed = performance.now() - t0;
    // 400 tokens at 400 tokens/s: at least one second of service however they are batched (a busy
    // machine may take longer; the engine never serves faster than its rate).
    expect(elapsed).toBeGreaterThan(990);
    const stats = engine.stats();
    expect(stats).toMatchObject({ completed: 4, running: 0, queued: 0, peakRunning: 2, peakQueued: 2 });
    expect(stats.generationTokens).toBe(400);
    const after = await (await fetch(`${engine.url}/metrics`)).text();
    expect(after).toMatch(/^sglang:generation_tokens_total\{.*\} 400$/m);
    expect(after).toMatch(/^sglang:e2e_request_latency_seconds_count\{.*\} 4$/m);
  });

  it('writes SGLang decode-batch log lines while busy', async () => {
    const engine = await standIn({
      policy: () => ({ ids: new Array(50).fill(7) }),
      service: { slots: 1, tokensPerSecond: 500 },
      decodeLogIntervalMs: 20,
    });
    const lines: string[] = [];
    engine.events.on('log', (l) => lines.push(l));
    const sg = client(sglangEngine(engine.url));
    await Promise.all([0, 1].map(() => sg.generate({ inputIds: [1], sampling: { maxTokens: 50 } })));
    expect(lines.length).toBeGreaterThan(2);
    const parsed = lines.map((l) => DECODE_LINE.exec(l)?.groups);
    expect(parsed.every((g) => g !== undefined)).toBe(true);
    // one request decodes while the other waits for the single slot
    expect(parsed).toContainEqual(expect.objectContaining({ running: '1', queue: '1', graph: 'False' }));
    expect(lines[0]).toMatch(/^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Decode batch/);
  });

  it('frees the slot when the client aborts (abort_request) and when the connection drops', async () => {
    const engine = await standIn({
      policy: () => ({ ids: new Array(100).fill(5) }),
      service: { slots: 1, tokensPerSecond: 20 },
    });
    const sg = client(sglangEngine(engine.url));
    const ac = new AbortController();
    const pending = sg.generate({ inputIds: [1], sampling: { maxTokens: 100 } }, { signal: ac.signal });
    await until(() => engine.stats().running === 1);
    const reason = new Error('rollout cancelled');
    ac.abort(reason);
    // An aborted call rejects with the signal's reason, as fetch does.
    expect(await pending.catch((e: unknown) => e)).toBe(reason);
    await until(() => engine.stats().running === 0);
    expect(engine.stats().aborted).toBe(1);

    // vLLM-style: no abort endpoint, the closed connection is what frees the slot
    const vl = client(vllmEngine(engine.url, { model: 'vime-standin' }));
    const ac2 = new AbortController();
    const p2 = vl.generate({ inputIds: [1], sampling: { maxTokens: 100 } }, { signal: ac2.signal });
    await until(() => engine.stats().running === 1);
    ac2.abort();
    await p2.catch(() => {});
    await until(() => engine.stats().running === 0);
    expect(engine.stats().aborted).toBe(2);
  });

  it('POST /abort_request ends a request with finish reason abort and the tokens decoded so far', async () => {
    const engine = await standIn({
      policy: () => ({ ids: new Array(1000).fill(5) }),
      service: { tokensPerSecond: 100 },
    });
    const sg = client(sglangEngine(engine.url));
    const pending = sg.generate({ inputIds: [1], sampling: { maxTokens: 1000 }, rid: 'r-1' });
    await new Promise((r) => setTimeout(r, 100));
    await sg.abort('r-1');
    const out = await pending;
    expect(out.finishReason).toBe('abort');
    expect(out.outputIds.length).toBeGreaterThan(0);
    expect(out.outputIds.length).toBeLessThan(1000);
  });

  it('injects 5xx errors (retryable), stalls and mid-response disconnects', async () => {
    const engine = await standIn({
      fault: ({ requestIndex }) =>
        requestIndex === 0
          ? { kind: 'error', status: 503, message: 'overloaded' }
          : requestIndex === 1
            ? { kind: 'stall', ms: 150 }
            : requestIndex === 2
              ? { kind: 'disconnect' }
              : requestIndex === 3
                ? { kind: 'error', status: 400, message: 'bad prompt' }
                : undefined,
    });
    const sg = client(sglangEngine(engine.url));
    const req = { inputIds: [1, 2], sampling: { maxTokens: 8 } };
    const e503 = (await sg.generate(req).catch((e: unknown) => e)) as EngineError;
    expect(e503).toBeInstanceOf(EngineError);
    expect(e503).toMatchObject({ status: 503, isRetryable: true });
    expect(e503.message).toMatch(/overloaded/);
    const t0 = performance.now();
    await sg.generate(req);
    expect(performance.now() - t0).toBeGreaterThan(140);
    const dropped = (await sg.generate(req).catch((e: unknown) => e)) as EngineError;
    expect(dropped).toBeInstanceOf(EngineError);
    expect(dropped.isRetryable).toBe(true);
    const e400 = (await sg.generate(req).catch((e: unknown) => e)) as EngineError;
    expect(e400).toMatchObject({ status: 400, isRetryable: false });
    expect((await sg.generate(req)).finishReason).toBe('stop');
  });

  it('reports unhealthy engines and unreachable ones as retryable engine errors', async () => {
    const engine = await standIn();
    const sg = client(sglangEngine(engine.url));
    engine.setHealthy(false);
    expect(await sg.health()).toBe(false);
    const dead = client(sglangEngine('http://127.0.0.1:9'));
    await expect(dead.health()).rejects.toThrow(/health failed: .*ECONNREFUSED.*is the engine running/);
    const error = (await dead
      .generate({ inputIds: [1], sampling: {} })
      .catch((e: unknown) => e)) as EngineError;
    expect(error).toBeInstanceOf(EngineError);
    expect(error.isRetryable).toBe(true);
    expect(error.message).toMatch(/is the engine running/);
    expect(() => sglangEngine('not a url')).toThrow(/invalid URL "not a url"/);
  });
});

describe("stand-in engine: SGLang's weight-update controls", () => {
  const long = { ids: Array.from({ length: 300 }, (_, i) => 500 + i) };

  it('updates weights from disk with a version, after the running requests finish', async () => {
    const s = await standIn({ weightVersion: '1', policy: () => long, service: { tokensPerSecond: 1500 } });
    const e = client(sglangEngine(s.url));
    const running = e.generate({ inputIds: [1, 2, 3], sampling: { maxTokens: 400 } });
    await until(() => s.stats().running === 1);
    const update = await e.weights!.updateWeightsFromDisk({ modelPath: '/ckpt/2', weightVersion: '2' });
    // Without a pause the update waits for the in-flight request, which finishes on version 1.
    expect((await running).weightVersion).toBe('1');
    expect(update.numPausedRequests).toBe(0);
    expect(await e.weights!.weightVersion()).toBe('2');
    expect((await e.modelInfo()).raw.model_path).toBe('/ckpt/2');
    expect((await e.generate({ inputIds: [1], sampling: { maxTokens: 4 } })).weightVersion).toBe('2');
  });

  it('pause (abort) ends in-flight requests with their partial output and holds new ones until continue', async () => {
    // 300 tokens at 100 tokens/s: the pause lands mid-generation however busy the machine is.
    const s = await standIn({ weightVersion: '1', policy: () => long, service: { tokensPerSecond: 100 } });
    const e = client(sglangEngine(s.url));
    const first = e.generate({ inputIds: [1, 2, 3], sampling: { maxTokens: 400 } });
    await until(() => s.stats().running === 1);
    await new Promise((r) => setTimeout(r, 300));
    await e.weights!.pauseGeneration({ mode: 'abort' });
    const cut = await first;
    expect(cut.finishReason).toBe('abort');
    expect(cut.outputIds.length).toBeGreaterThan(0);
    expect(Array.from(cut.outputIds)).toEqual(long.ids.slice(0, cut.outputIds.length));
    let held = true;
    const next = e.generate({ inputIds: [1, 2, 3], sampling: { maxTokens: 400 } }).finally(() => {
      held = false;
    });
    await until(() => s.stats().held === 1);
    const update = await e.weights!.updateWeightsFromDisk({ modelPath: '/ckpt/2', weightVersion: '2' });
    expect(update.numPausedRequests).toBe(1);
    expect(held).toBe(true);
    await e.weights!.continueGeneration();
    const done = await next;
    expect(done.weightVersion).toBe('2');
    expect(s.stats()).toMatchObject({ weightUpdates: 1, paused: null });
  });

  it('pause (in_place) freezes running requests without ending them', async () => {
    const s = await standIn({ policy: () => long, service: { tokensPerSecond: 1500 } });
    const e = client(sglangEngine(s.url));
    const req = e.generate({ inputIds: [9], sampling: { maxTokens: 400 } });
    await until(() => s.stats().running === 1);
    await e.weights!.pauseGeneration({ mode: 'in_place' });
    const before = s.stats().generationTokens;
    await new Promise((r) => setTimeout(r, 150));
    expect(s.stats()).toMatchObject({ running: 1, paused: 'in_place', generationTokens: before });
    await e.weights!.continueGeneration();
    const out = await req;
    expect(out.finishReason).toBe('stop');
    expect(Array.from(out.outputIds)).toEqual(long.ids);
  });

  it('answers 400 naming the field for a malformed update', async () => {
    const s = await standIn();
    for (const body of [{}, { model_path: '' }, { model_path: 7 }]) {
      const res = await fetch(`${s.url}/update_weights_from_disk`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/model_path/);
    }
    const pause = await fetch(`${s.url}/pause_generation`, { method: 'POST', body: '{"mode":"later"}' });
    expect(pause.status).toBe(400);
  });
});
