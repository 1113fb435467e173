/**
 * Top-k log probs (score centering) through the capture proxy, against the stand-in engine (labelled: it
 * serves SGLang's `output_top_logprobs` and vLLM's `top_logprobs` wires, not a real model's heads).
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  anthropicMessage,
  anthropicTools,
  type Call,
  closeAll,
  closers,
  OBSERVATIONS,
  openaiMessage,
  post,
  recording,
  script,
  sse,
  TOOL_LOOP,
  tools,
} from '../__fixtures__/proxy-harness.js';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { TemplateMessage } from '../engine/tokenizer/template.js';
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
type Dialect = 'openai' | 'anthropic' | 'responses';

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

const responsesTools = [{ type: 'function', ...tools[0]!.function }];

/** Drive the three-turn tool loop in one dialect; the HTTP statuses. */
async function toolLoop(
  dialect: Dialect,
  baseURL: string,
  apiKey: string,
  stream: boolean,
): Promise<number[]> {
  const auth = { authorization: `Bearer ${apiKey}` };
  const statuses: number[] = [];
  const openai: TemplateMessage[] = [{ role: 'user', content: 'Fix the failing test.' }];
  const anthropic: Array<{ role: string; content: unknown }> = [
    { role: 'user', content: 'Fix the failing test.' },
  ];
  const input: Array<Record<string, unknown>> = [
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Fix the failing test.' }] },
  ];
  for (let k = 0; k < 3; k++) {
    if (dialect === 'openai') {
      const res = await post(`${baseURL}/chat/completions`, { messages: openai, tools, stream }, auth);
      statuses.push(res.status);
      if (res.status !== 200) return statuses;
      const { message } = openaiMessage(res.text, stream);
      openai.push(message as unknown as TemplateMessage);
      const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
      if (call) openai.push({ role: 'tool', tool_call_id: call.id, content: OBSERVATIONS[k]! });
    } else if (dialect === 'anthropic') {
      const body = { max_tokens: 512, messages: anthropic, tools: anthropicTools, stream };
      const res = await post(`${baseURL}/messages`, body, auth);
      statuses.push(res.status);
      if (res.status !== 200) return statuses;
      const { content } = anthropicMessage(res.text, stream);
      anthropic.push({ role: 'assistant', content });
      const use = content.find((b) => b.type === 'tool_use');
      if (use) {
        const result = { type: 'tool_result', tool_use_id: use.id, content: OBSERVATIONS[k]! };
        anthropic.push({ role: 'user', content: [result] });
      }
    } else {
      const body = { model: 'policy', input, tools: responsesTools, store: false, stream };
      const res = await post(`${baseURL}/responses`, body, auth);
      statuses.push(res.status);
      if (res.status !== 200) return statuses;
      const response = stream
        ? sse(res.text)
            .map(({ data }) => JSON.parse(data))
            .at(-1).response
        : JSON.parse(res.text);
      const output = response.output as Array<Record<string, unknown>>;
      input.push(...output.map(({ id: _id, status: _status, ...rest }) => rest));
      const call = output.find((o) => o.type === 'function_call');
      if (call) input.push({ type: 'function_call_output', call_id: call.call_id, output: OBSERVATIONS[k] });
    }
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
    for (const dialect of ['openai', 'anthropic', 'responses'] as const) {
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
    for (const stream of [false, true]) {
      it(`${wire} / ${stream ? 'streamed' : 'JSON'}: a fork and a compaction-like fresh prompt start new rows, each with its heads`, async () => {
        const { proxy, turns } = await start(script(...TOOL_LOOP, ...TOOL_LOOP), wire);
        const s = proxy.openSession(`fork-${wire}-${stream}`, { sampling: SAMPLING });
        const auth = { authorization: `Bearer ${s.apiKey}` };
        const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix the failing test.' }];
        for (let k = 0; k < 2; k++) {
          const res = await post(`${s.baseURL}/chat/completions`, { messages, tools, stream }, auth);
          expect(res.status).toBe(200);
          const { message } = openaiMessage(res.text, stream);
          messages.push(message as unknown as TemplateMessage);
          const call = (message.tool_calls as Array<{ id: string }>)[0]!;
          messages.push({ role: 'tool', tool_call_id: call.id, content: OBSERVATIONS[k]! });
        }
        // A fork: the client rewrote an earlier observation, so the prompt no longer extends the row.
        const forked = messages.map((m, i) => (i === 2 ? { ...m, content: 'a.py\nb.py\nc.py' } : m));
        const fork = await post(`${s.baseURL}/chat/completions`, { messages: forked, tools, stream }, auth);
        expect(fork.status).toBe(200);
        // Compaction: the history replaced by a summary.
        const summary = [{ role: 'user', content: 'Summary so far: a.py returns 1. Finish the fix.' }];
        const compact = await post(
          `${s.baseURL}/chat/completions`,
          { messages: summary, tools, stream },
          auth,
        );
        expect(compact.status).toBe(200);
        // Each thread (the compacted conversation is one of its own) has its own turns.
        const threads = new Map<string, readonly Turn[]>();
        for (const key of [s.id, `${s.id}/1`])
          threads.set(key, [...proxy.trajectories.trajectory(key).turns]);
        expect([...threads.values()].flat()).toHaveLength(turns.length);
        const samples = proxy.finishSession(s.id, { reward: 1 });
        // The tool loop, its fork, and the compacted thread: three rows.
        expect(samples).toHaveLength(3);
        expect(samples.map((x) => [x.session_id, x.metadata.trajectory_turns])).toEqual([
          [s.id, [0, 1]],
          [s.id, [2]],
          [`${s.id}/1`, [0]],
        ]);
        for (const sample of samples) expectTopKRow(sample, threads.get(sample.session_id!)!);
      });
    }
  }

  for (const stream of [false, true]) {
    it(`SGLang / ${stream ? 'streamed' : 'JSON'}: a weight update inside a turn keeps one head per token across both versions`, async () => {
      const text = `Across a weight update: ${'token after token, '.repeat(12)}done.`;
      const { proxy, turns, calls, tokenizer } = await start(() => text, 'sglang', { tokensPerSecond: 100 });
      const s = proxy.openSession(`update-${stream}`, { sampling: SAMPLING });
      const pending = post(`${s.baseURL}/chat/completions`, {
        messages: [{ role: 'user', content: 'go' }],
        stream,
      });
      const deadline = performance.now() + 30_000;
      // The update lands once the engine has produced some tokens of the turn.
      while (proxy.router.status()[0]!.inFlight === 0) {
        if (performance.now() > deadline)
          throw new Error('timed out waiting for the turn to reach the engine');
        await new Promise((r) => setTimeout(r, 5));
      }
      await new Promise((r) => setTimeout(r, 150));
      await proxy.router.updateWeights({ modelPath: '/ckpt/step-2', weightVersion: '2' });
      expect((await pending).status).toBe(200);
      const [turn] = turns;
      expect(turn!.versionRuns!.map((r) => r.version)).toEqual(['1', '2']);
      expect(calls.length).toBe(2);
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
});

describe('capture proxy: top-k across an engine-side abort on vLLM’s wire', () => {
  for (const stream of [false, true]) {
    it(`vLLM / ${stream ? 'streamed' : 'JSON'}: a turn cut by an abort (a weight update) and continued keeps one head per token`, async () => {
      const text = `Across an abort: ${'token after token, '.repeat(12)}done.`;
      const { proxy, turns, calls, tokenizer, standIn } = await start(() => text, 'vllm', {
        tokensPerSecond: 100,
      });
      const s = proxy.openSession(`abort-${stream}`, { sampling: SAMPLING });
      const pending = post(`${s.baseURL}/chat/completions`, {
        messages: [{ role: 'user', content: 'go' }],
        stream,
      });
      const deadline = performance.now() + 30_000;
      while (proxy.router.status()[0]!.inFlight === 0) {
        if (performance.now() > deadline)
          throw new Error('timed out waiting for the turn to reach the engine');
        await new Promise((r) => setTimeout(r, 5));
      }
      await new Promise((r) => setTimeout(r, 150));
      // vLLM's client has no weight controls: the update (and its abort) goes to the stand-in directly.
      const update = { model_path: '/ckpt/step-2', weight_version: '2', abort_all_requests: true };
      expect((await post(`${standIn.url}/update_weights_from_disk`, update)).status).toBe(200);
      expect((await pending).status).toBe(200);
      const [turn] = turns;
      expect(calls.length).toBe(2);
      expect(calls[0]!.result.finishReason).toBe('abort');
      expect(Array.from(turn!.outputIds)).toEqual([...tokenizer.encode(text), tokenizer.eosTokenId]);
      expect(Array.from(turn!.topK!.ids)).toEqual([
        ...calls[0]!.result.topK!.ids,
        ...calls[1]!.result.topK!.ids,
      ]);
      const [sample] = proxy.finishSession(s.id, { reward: 1 });
      expectTopKRow(sample!, turns);
    });
  }
});

describe('capture proxy: top-k fails closed', () => {
  const call = (baseURL: string, apiKey: string) =>
    post(
      `${baseURL}/chat/completions`,
      { messages: [{ role: 'user', content: 'hi' }] },
      { authorization: `Bearer ${apiKey}` },
    );

  for (const wire of ['sglang', 'vllm'] as const) {
    it(`${wire}: an engine answer with no heads, or heads of the wrong shape, fails the turn (502), unrecorded`, async () => {
      const damage: Array<[string, (c: Call['result']) => void, RegExp]> = [
        [
          'none',
          (r) => delete r.topK,
          /needs the top-k log probs of every output token, but the engine returned none/,
        ],
        ['short', (r) => (r.topK = { ...r.topK!, ids: r.topK!.ids.subarray(K) }), /expected \d+ rows of 5/],
        ['k', (r) => (r.topK = { ...r.topK!, k: K - 1 }), /expected k = 5, found 4/],
        ['dup', (r) => (r.topK!.ids[1] = r.topK!.ids[0]!), /row 0: ids must be distinct/],
        [
          'nan',
          (r) => (r.topK!.logprobs[2] = Number.NaN),
          /row 0: expected a finite log prob <= 0, found NaN/,
        ],
      ];
      for (const [name, hurt, message] of damage) {
        const lying = (e: Engine): Engine => ({
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
        const { proxy } = await start(script('Hello.'), wire, { engine: lying });
        const errors: string[] = [];
        proxy.events.on('turn:error', (e) => errors.push(e.error.message));
        const s = proxy.openSession(`bad-${name}`, { sampling: SAMPLING });
        const res = await call(s.baseURL, s.apiKey);
        expect(res.status, name).toBe(502);
        expect(res.text).toMatch(message);
        expect(errors).toEqual([expect.stringMatching(message)]);
        expect(proxy.trajectories.trajectory(s.id).turns).toHaveLength(0);
      }
    });
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
    const res = await call(s.baseURL, s.apiKey);
    expect(res.status).toBe(502);
    expect(res.text).toContain('Requested sample logprobs of 64, which is greater than max allowed: 20');
    expect(proxy.trajectories.trajectory(s.id).turns).toHaveLength(0);
  });
});
