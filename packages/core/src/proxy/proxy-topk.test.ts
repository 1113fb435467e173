/**
 * Top-k log probs (score centering) through the capture proxy, against the stand-in engine (labelled: it
 * serves SGLang's `output_top_logprobs` and vLLM's `top_logprobs` wires, not a real model's heads).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { type Dialect, DialectConversation } from '../__fixtures__/dialect-conversation.js';
import {
  type Call,
  closeAll,
  closers,
  OBSERVATIONS,
  post,
  recording,
  script,
  TOOL_LOOP,
} from '../__fixtures__/proxy-harness.js';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { Engine, Sampling } from '../engine/types.js';
import { vllmEngine } from '../engine/vllm.js';
import type { Turn } from '../rollout.js';
import type { Sample } from '../sample.js';
import { type StandInPolicy, startStandInEngine } from '../standin/engine.js';
import { startCaptureProxy } from './proxy.js';
import { capturedTurnRecord } from './trajectory/turn-log.js';

afterEach(closeAll);

const K = 5;
const SAMPLING: Sampling = { temperature: 1, maxTokens: 256, topLogprobs: K };
type Wire = 'sglang' | 'vllm';
const DIALECTS = ['openai', 'anthropic', 'responses', 'gemini'] as const;

async function start(
  policy: StandInPolicy,
  wire: Wire,
  opts: { tokensPerSecond?: number; engine?: (e: Engine) => Engine; maxLogprobs?: number } = {},
) {
  const tokenizer = await qwen3();
  const standIn = await startStandInEngine({
    tokenizer,
    policy,
    weightVersion: '1',
    ...(opts.tokensPerSecond ? { service: { tokensPerSecond: opts.tokensPerSecond } } : {}),
  });
  closers.push(() => standIn.close());
  const client =
    wire === 'vllm'
      ? vllmEngine(standIn.url, { model: 'vime-standin', maxLogprobs: opts.maxLogprobs })
      : sglangEngine(standIn.url);
  closers.push(() => client.close());
  const rec = recording(opts.engine ? opts.engine(client) : client);
  const proxy = await startCaptureProxy({ engine: rec.engine, tokenizer });
  closers.push(() => proxy.close());
  const turns: Turn[] = [];
  const log: unknown[] = [];
  proxy.events.on('turn', (e) => {
    turns.push(e.turn);
    log.push(capturedTurnRecord(e.sessionId, e.turn));
  });
  return { tokenizer, standIn, proxy, calls: rec.calls, turns, log };
}

/** Drive the three-turn tool loop in one dialect; the HTTP statuses. */
async function toolLoop(
  dialect: Dialect,
  baseURL: string,
  apiKey: string,
  stream: boolean,
): Promise<number[]> {
  const c = new DialectConversation(dialect, baseURL, apiKey, stream);
  const statuses: number[] = [];
  for (let k = 0; k < 3; k++) {
    const res = await c.turn(OBSERVATIONS[k]);
    statuses.push(res.status);
    if (!res.kept) break;
  }
  return statuses;
}

/**
 * The row's heads, checked against the turns it packs: every sampled position (mask 1) carries its turn's
 * head of that token, in order; every other position the uniform filler; the sampled id is in its head
 * or less likely than all of it.
 */
function expectTopKRow(sample: Sample, turns: readonly Turn[], k = K): void {
  const ids = sample.extra!.rollout_topk_token_ids as number[][];
  const lps = sample.extra!.rollout_topk_log_probs as number[][];
  const n = sample.response_length;
  expect(ids).toHaveLength(n);
  expect(lps).toHaveLength(n);
  const rowTurns = sample.metadata.trajectory_turns as number[];
  const wantIds: number[] = [];
  const wantLps: number[] = [];
  for (const t of rowTurns) {
    wantIds.push(...turns[t]!.topK!.ids);
    wantLps.push(...turns[t]!.topK!.logprobs);
  }
  const gotIds: number[] = [];
  const gotLps: number[] = [];
  const promptLength = sample.tokens.length - n;
  const filler = Array.from({ length: k }, (_, j) => j);
  for (let j = 0; j < n; j++) {
    expect(ids[j]).toHaveLength(k);
    if (sample.loss_mask![j] === 0) {
      expect(ids[j]).toEqual(filler);
      expect(lps[j]).toEqual(filler.map(() => Math.fround(-Math.log(k))));
      continue;
    }
    gotIds.push(...ids[j]!);
    gotLps.push(...lps[j]!);
    const token = sample.tokens[promptLength + j]!;
    const at = ids[j]!.indexOf(token);
    if (at >= 0) expect(lps[j]![at]).toBe(sample.rollout_log_probs![j]);
    else expect(Math.min(...lps[j]!)).toBeGreaterThan(sample.rollout_log_probs![j]!);
  }
  expect(gotIds).toEqual(wantIds);
  expect(gotLps).toEqual(wantLps);
}

describe('capture proxy: top-k log probs, per dialect, streamed and not, on both wires', () => {
  for (const wire of ['sglang', 'vllm'] as const) {
    for (const dialect of DIALECTS) {
      for (const stream of [false, true]) {
        it(`${wire} / ${dialect} / ${stream ? 'streamed' : 'JSON'}: a 3-turn tool loop packs every head into one row`, async () => {
          const { proxy, turns, calls, log } = await start(script(...TOOL_LOOP), wire);
          const s = proxy.openSession(`topk-${wire}-${dialect}-${stream}`, { sampling: SAMPLING });
          expect(await toolLoop(dialect, s.baseURL, s.apiKey, stream)).toEqual([200, 200, 200]);
          const samples = proxy.finishSession(s.id, { reward: 1 });
          expect(samples).toHaveLength(1);
          expect(samples[0]!.metadata.trajectory_turns).toEqual([0, 1, 2]);
          for (const [i, call] of calls.entries()) {
            expect(turns[i]!.topK!.k).toBe(K);
            expect(Array.from(turns[i]!.topK!.ids)).toEqual(Array.from(call.result.topK!.ids));
            expect(log[i]).toMatchObject({ topk_k: K, topk_token_ids: Array.from(call.result.topK!.ids) });
          }
          expectTopKRow(samples[0]!, turns);
          // No top-p < 1: no nucleus beside it.
          expect(samples[0]!.rollout_top_p_token_ids).toBeNull();
        });
      }
    }
  }

  it('streamed and JSON turns capture the same heads', async () => {
    for (const wire of ['sglang', 'vllm'] as const) {
      const { proxy } = await start(script(...TOOL_LOOP, ...TOOL_LOOP), wire);
      const a = proxy.openSession(`same-a-${wire}`, { sampling: SAMPLING });
      await toolLoop('openai', a.baseURL, a.apiKey, false);
      const b = proxy.openSession(`same-b-${wire}`, { sampling: SAMPLING });
      await toolLoop('openai', b.baseURL, b.apiKey, true);
      const [x] = proxy.finishSession(a.id, { reward: 1 });
      const [y] = proxy.finishSession(b.id, { reward: 1 });
      expect(y!.extra!.rollout_topk_token_ids).toEqual(x!.extra!.rollout_topk_token_ids);
      expect(y!.extra!.rollout_topk_log_probs).toEqual(x!.extra!.rollout_topk_log_probs);
    }
  });
});

describe('capture proxy: top-k beside the nucleus, across forks, compaction and weight updates', () => {
  it('top_p < 1 and top-k together (SGLang): both packed, each with its own filler', async () => {
    for (const stream of [false, true]) {
      const { proxy, turns } = await start(script(...TOOL_LOOP), 'sglang');
      const s = proxy.openSession(`both-${stream}`, { sampling: { ...SAMPLING, topP: 0.95 } });
      expect(await toolLoop('openai', s.baseURL, s.apiKey, stream)).toEqual([200, 200, 200]);
      const [sample] = proxy.finishSession(s.id, { reward: 1 });
      expectTopKRow(sample!, turns);
      const offsets = Array.from(sample!.rollout_top_p_token_offsets!);
      expect(offsets).toHaveLength(sample!.response_length + 1);
      for (let j = 0; j < sample!.response_length; j++) {
        const span = offsets[j + 1]! - offsets[j]!;
        expect(span > 0).toBe(sample!.loss_mask![j] === 1);
      }
      expect(sample!.extra!.rollout_top_p_log_probs).toBeDefined();
    }
  });

  for (const wire of ['sglang', 'vllm'] as const) {
    for (const dialect of DIALECTS) {
      for (const stream of [false, true]) {
        it(`${wire} / ${dialect} / ${stream ? 'streamed' : 'JSON'}: a fork and a compaction-like fresh prompt start new rows, each with its heads`, async () => {
          const { proxy, turns } = await start(script(...TOOL_LOOP, ...TOOL_LOOP), wire);
          const s = proxy.openSession(`fork-${wire}-${dialect}-${stream}`, { sampling: SAMPLING });
          const c = new DialectConversation(dialect, s.baseURL, s.apiKey, stream);
          expect((await c.turn(OBSERVATIONS[0])).kept).toBe(true);
          expect((await c.turn(OBSERVATIONS[1])).kept).toBe(true);
          // A fork: the client rewrote its first observation, so the prompt no longer extends the row.
          c.editObservation(0, 'a.py\nb.py\nc.py');
          expect((await c.turn()).kept).toBe(true);
          // Compaction: the history replaced by a summary.
          const summary = 'Summary so far: a.py returns 1. Finish the fix.';
          const compacted = new DialectConversation(dialect, s.baseURL, s.apiKey, stream, summary);
          expect((await compacted.turn()).kept).toBe(true);
          // Each thread (the compacted conversation is one of its own) has its own turns.
          const threads = new Map<string, readonly Turn[]>();
          for (const key of [s.id, `${s.id}/1`])
            threads.set(key, [...proxy.trajectories.trajectory(key).turns]);
          expect([...threads.values()].flat()).toHaveLength(turns.length);
          const samples = proxy.finishSession(s.id, { reward: 1 });
          // The tool loop, its fork, and the compacted thread: three rows.
          expect(samples.map((x) => [x.session_id, x.metadata.trajectory_turns])).toEqual([
            [s.id, [0, 1]],
            [s.id, [2]],
            [`${s.id}/1`, [0]],
          ]);
          for (const sample of samples) expectTopKRow(sample, threads.get(sample.session_id!)!);
        });
      }
    }
  }

  for (const wire of ['sglang', 'vllm'] as const) {
    for (const dialect of DIALECTS) {
      for (const stream of [false, true]) {
        it(`${wire} / ${dialect} / ${stream ? 'streamed' : 'JSON'}: a weight update inside a turn keeps one head per token across the cut`, async () => {
          const text = `Across a weight update: ${'token after token, '.repeat(12)}done.`;
          const { proxy, turns, calls, tokenizer, standIn } = await start(() => text, wire, {
            tokensPerSecond: 100,
          });
          const s = proxy.openSession(`update-${wire}-${dialect}-${stream}`, { sampling: SAMPLING });
          const pending = new DialectConversation(dialect, s.baseURL, s.apiKey, stream, 'go').turn();
          const deadline = performance.now() + 30_000;
          while (proxy.router.status()[0]!.inFlight === 0) {
            if (performance.now() > deadline)
              throw new Error('timed out waiting for the turn to reach the engine');
            await new Promise((r) => setTimeout(r, 5));
          }
          await new Promise((r) => setTimeout(r, 150));
          if (wire === 'sglang')
            await proxy.router.updateWeights({ modelPath: '/ckpt/step-2', weightVersion: '2' });
          else {
            // vLLM's client has no weight controls: the update (and its abort) goes to the stand-in directly.
            const update = { model_path: '/ckpt/step-2', weight_version: '2', abort_all_requests: true };
            expect((await post(`${standIn.url}/update_weights_from_disk`, update)).status).toBe(200);
          }
          expect((await pending).kept).toBe(true);
          const [turn] = turns;
          // vLLM reports no weight version: the cut shows as two generations, the first aborted.
          if (wire === 'sglang') expect(turn!.versionRuns!.map((r) => r.version)).toEqual(['1', '2']);
          expect(calls.map((c) => c.result.finishReason)).toEqual(['abort', 'stop']);
          expect(Array.from(turn!.outputIds)).toEqual([...tokenizer.encode(text), tokenizer.eosTokenId]);
          expect(turn!.topK!.ids.length).toBe(turn!.outputIds.length * K);
          expect(Array.from(turn!.topK!.ids)).toEqual([
            ...calls[0]!.result.topK!.ids,
            ...calls[1]!.result.topK!.ids,
          ]);
          const [sample] = proxy.finishSession(s.id, { reward: 1 });
          expectTopKRow(sample!, turns);
        });
      }
    }
  }
});

describe('capture proxy: top-k fails closed', () => {
  const damage: Array<[string, (r: Call['result']) => void, RegExp]> = [
    [
      'none',
      (r) => delete r.topK,
      /needs the top-k log probs of every output token, but the engine returned none/,
    ],
    ['short', (r) => (r.topK = { ...r.topK!, ids: r.topK!.ids.subarray(K) }), /expected \d+ rows of 5/],
    ['k', (r) => (r.topK = { ...r.topK!, k: K - 1 }), /expected k = 5, found 4/],
    ['dup', (r) => (r.topK!.ids[1] = r.topK!.ids[0]!), /row 0: ids must be distinct/],
    ['nan', (r) => (r.topK!.logprobs[2] = Number.NaN), /row 0: expected a finite log prob <= 0, found NaN/],
  ];
  const lying =
    (hurt: (r: Call['result']) => void) =>
    (e: Engine): Engine => ({
      ...e,
      async generate(request, options) {
        const result = await e.generate(request, options);
        hurt(result);
        return result;
      },
      async generateStream(request, options) {
        const result = await e.generateStream!(request, options);
        hurt(result);
        return result;
      },
    });

  for (const wire of ['sglang', 'vllm'] as const) {
    for (const dialect of DIALECTS) {
      for (const stream of [false, true]) {
        it(`${wire} / ${dialect} / ${stream ? 'streamed' : 'JSON'}: no heads, or heads of the wrong shape, fail the turn, unrecorded`, async () => {
          for (const [name, hurt, message] of damage) {
            const { proxy } = await start(script('Hello.'), wire, { engine: lying(hurt) });
            const errors: string[] = [];
            proxy.events.on('turn:error', (e) => errors.push(e.error.message));
            const s = proxy.openSession(`bad-${name}`, { sampling: SAMPLING });
            const res = await new DialectConversation(dialect, s.baseURL, s.apiKey, stream, 'hi').turn();
            // JSON: a 502. Streamed: the tokens went out as they came, so the stream ends in an error event.
            expect(res.kept, name).toBe(false);
            expect(res.status, name).toBe(stream ? 200 : 502);
            expect(res.text).toMatch(message);
            expect(errors).toEqual([expect.stringMatching(message)]);
            expect(proxy.trajectories.trajectory(s.id).turns).toHaveLength(0);
          }
        });
      }
    }
  }

  it('a k over the engine limit is refused when the session opens, naming the option, the value and the fix', async () => {
    const { proxy } = await start(script('Hello.'), 'vllm');
    expect(() => proxy.openSession('big', { sampling: { ...SAMPLING, topLogprobs: 128 } })).toThrow(
      /sampling\.topLogprobs 128 is above the limit of the engine http:\/\/127\.0\.0\.1:\d+ \(20\); lower topLogprobs to at most 20, or raise the engine's limit \(vLLM: start it with --max-logprobs 128 and pass maxLogprobs: 128 to vllmEngine\)/,
    );
    expect(() => proxy.openSession('zero', { sampling: { ...SAMPLING, topLogprobs: 1.5 } })).toThrow(
      /sampling\.topLogprobs must be a positive integer .* found 1\.5/,
    );
    const sg = await start(script('Hello.'), 'sglang');
    const vocab = sg.tokenizer.vocabSize;
    expect(() =>
      sg.proxy.openSession('past-vocab', { sampling: { ...SAMPLING, topLogprobs: vocab + 1 } }),
    ).toThrow(
      `sampling.topLogprobs ${vocab + 1} is above the limit of the vocabulary (its size) (${vocab}); lower topLogprobs to at most ${vocab}`,
    );
  });

  it('a client that claims a higher vLLM limit than the engine serves gets the engine’s refusal (502), unrecorded', async () => {
    const { proxy } = await start(script('Hello.'), 'vllm', { maxLogprobs: 128 });
    const s = proxy.openSession('claimed', { sampling: { ...SAMPLING, topLogprobs: 64 } });
    const res = await new DialectConversation('openai', s.baseURL, s.apiKey, false, 'hi').turn();
    expect(res.status).toBe(502);
    expect(res.text).toContain('Requested sample logprobs of 64, which is greater than max allowed: 20');
    expect(proxy.trajectories.trajectory(s.id).turns).toHaveLength(0);
  });
});
