import { afterEach, describe, expect, it } from 'vitest';
import {
  closeAll,
  closers,
  OBSERVATIONS,
  openaiMessage,
  post,
  script,
  setup,
  TOOL_LOOP,
  tools,
} from '../__fixtures__/proxy-harness.js';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { TemplateMessage } from '../engine/tokenizer/template.js';
import type { Engine } from '../engine/types.js';
import { vllmEngine } from '../engine/vllm.js';
import { startStandInEngine } from '../standin/engine.js';
import { startCaptureProxy } from './proxy.js';
import { capturedTurnRecord } from './trajectory/turn-log.js';

afterEach(closeAll);

const SAMPLING = { temperature: 1, topP: 0.95, maxTokens: 256 };

/** Drive a three-turn tool loop through the proxy's OpenAI endpoint; the HTTP statuses. */
async function toolLoop(baseURL: string, apiKey: string, stream = false): Promise<number[]> {
  const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix the failing test.' }];
  const statuses: number[] = [];
  for (let k = 0; k < 3; k++) {
    const res = await post(
      `${baseURL}/chat/completions`,
      { messages, tools, stream },
      { authorization: `Bearer ${apiKey}` },
    );
    statuses.push(res.status);
    if (res.status !== 200) return statuses;
    const { message } = openaiMessage(res.text, stream);
    messages.push(message as unknown as TemplateMessage);
    const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
    if (call) messages.push({ role: 'tool', tool_call_id: call.id, content: OBSERVATIONS[k]! });
  }
  return statuses;
}

describe('capture proxy: sampler replay data (top_p < 1)', () => {
  it('a streamed session captures the same nucleus as a non-streamed one', async () => {
    const { proxy } = await setup(script(...TOOL_LOOP, ...TOOL_LOOP));
    const plain = proxy.openSession('replay-plain', { sampling: SAMPLING });
    expect(await toolLoop(plain.baseURL, plain.apiKey)).toEqual([200, 200, 200]);
    const streamed = proxy.openSession('replay-streamed', { sampling: SAMPLING });
    expect(await toolLoop(streamed.baseURL, streamed.apiKey, true)).toEqual([200, 200, 200]);
    const [a] = proxy.finishSession('replay-plain', { reward: 1 });
    const [b] = proxy.finishSession('replay-streamed', { reward: 1 });
    expect(Array.from(b!.tokens)).toEqual(Array.from(a!.tokens));
    expect(b!.rollout_top_p_token_ids!.length).toBeGreaterThan(0);
    expect(Array.from(b!.rollout_top_p_token_ids!)).toEqual(Array.from(a!.rollout_top_p_token_ids!));
    expect(Array.from(b!.rollout_top_p_token_offsets!)).toEqual(Array.from(a!.rollout_top_p_token_offsets!));
    expect(b!.extra!.rollout_top_p_log_probs).toEqual(a!.extra!.rollout_top_p_log_probs);
  });

  it('records every turn’s nucleus and packs it across turns with empty spans on observations', async () => {
    const { proxy, calls } = await setup(script(...TOOL_LOOP));
    const log: unknown[] = [];
    proxy.events.on('turn', (e) => log.push(capturedTurnRecord(e.sessionId, e.turn)));
    const session = proxy.openSession('replay-1', { sampling: SAMPLING });
    expect(await toolLoop(session.baseURL, session.apiKey)).toEqual([200, 200, 200]);
    const [sample] = proxy.finishSession('replay-1', { reward: 1 });
    const ids: number[] = [];
    const lps: number[] = [];
    const offsets = [0];
    const promptLength = calls[0]!.inputIds.length;
    let at = promptLength;
    for (const [k, { inputIds, result }] of calls.entries()) {
      // Observations between the outputs: no nucleus.
      for (; at < inputIds.length; at++) offsets.push(ids.length);
      const top = result.topP!;
      for (let i = 0; i < result.outputIds.length; i++) {
        ids.push(...top.ids.subarray(top.offsets[i]!, top.offsets[i + 1]!));
        lps.push(...top.logprobs!.subarray(top.offsets[i]!, top.offsets[i + 1]!));
        offsets.push(ids.length);
      }
      at += result.outputIds.length;
      expect(log[k]).toMatchObject({
        session_id: 'replay-1',
        turn: k,
        top_p_token_ids: Array.from(top.ids),
        top_p_token_offsets: Array.from(top.offsets),
        top_p_log_probs: Array.from(top.logprobs!),
      });
    }
    expect(sample!.response_length).toBe(at - promptLength);
    expect(Array.from(sample!.rollout_top_p_token_offsets!)).toEqual(offsets);
    expect(Array.from(sample!.rollout_top_p_token_ids!)).toEqual(ids);
    expect(sample!.extra!.rollout_top_p_log_probs).toEqual(Array.from(Float32Array.from(lps)));
  });

  it('top_p 1 records no replay data', async () => {
    const { proxy } = await setup(script(...TOOL_LOOP));
    const session = proxy.openSession('plain-1', { sampling: { ...SAMPLING, topP: 1 } });
    expect(await toolLoop(session.baseURL, session.apiKey)).toEqual([200, 200, 200]);
    const [sample] = proxy.finishSession('plain-1', { reward: 1 });
    expect(sample!.rollout_top_p_token_ids).toBeNull();
    expect(sample!.rollout_top_p_token_offsets).toBeNull();
    expect(sample!.extra).toBeUndefined();
  });

  it('fails the turn, unrecorded, when the engine returns no nucleus (vLLM) or an inconsistent one', async () => {
    const tokenizer = await qwen3();
    const standIn = await startStandInEngine({ tokenizer, policy: script(...TOOL_LOOP) });
    closers.push(() => standIn.close());
    const vllm = vllmEngine(standIn.url, { model: 'vime-standin' });
    closers.push(() => vllm.close());
    const proxy = await startCaptureProxy({ engine: vllm, tokenizer });
    closers.push(() => proxy.close());
    const errors: string[] = [];
    proxy.events.on('turn:error', (e) => errors.push(e.error.message));
    const session = proxy.openSession('vllm-1', { sampling: SAMPLING });
    const res = await post(`${session.baseURL}/chat/completions`, {
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.status).toBe(502);
    expect(res.text).toMatch(/needs the nucleus of every output token, but the engine returned none/);
    expect(proxy.trajectories.trajectory('vllm-1').turns).toHaveLength(0);
    expect(errors).toEqual([expect.stringMatching(/the engine returned none/)]);

    // An engine whose nucleus names an id past the vocabulary.
    const real = sglangEngine(standIn.url);
    closers.push(() => real.close());
    const lying: Engine = {
      ...real,
      async generate(request, options) {
        const result = await real.generate(request, options);
        result.topP!.ids[0] = tokenizer.vocabSize + 3;
        return result;
      },
    };
    const p3 = await startCaptureProxy({ engine: lying, tokenizer });
    closers.push(() => p3.close());
    const s3 = p3.openSession('oov-1', { sampling: SAMPLING });
    const bad = await post(`${s3.baseURL}/chat/completions`, { messages: [{ role: 'user', content: 'hi' }] });
    expect(bad.status).toBe(502);
    expect(bad.text).toContain(
      `top_p_token_ids[0]: ${tokenizer.vocabSize + 3} is outside the vocabulary [0, ${tokenizer.vocabSize})`,
    );
    expect(p3.trajectories.trajectory('oov-1').turns).toHaveLength(0);
  });
});
