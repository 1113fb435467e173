/**
 * Contract test: the real Python policy server with the tiny Qwen3 model on loopback, driven by the
 * project's own SGLang client and capture proxy, as the loop drives an SGLang engine.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Sample } from '@vime/core';
import { type ChatTokenizer, type Engine, loadTokenizer, sglangEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { torchPythonOrSkip } from '@vime/core/testing';
import { seededRandom } from '@vime/core/utils';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bundledTokenizerDir,
  exampleDir,
  pythonEnv,
  type RunningPolicyServer,
  startPolicyServer,
} from '../src/index.js';

type LogprobEntry = [number | null, number, string | null];
/** What the tests read of SGLang's answers (the client's own schema checks the rest). */
interface Answer {
  text: string;
  output_ids: number[];
  meta_info: {
    finish_reason: { type: string; length?: number } | null;
    input_token_logprobs: LogprobEntry[];
    output_token_logprobs: LogprobEntry[];
  };
  success?: boolean;
}
interface ServerInfo {
  tp_size: number;
  internal_states: [{ peak_running: number; decode_steps: number; num_running_reqs: number }];
}

async function post<T = Answer>(
  url: string,
  path: string,
  body: unknown,
): Promise<{ status: number; json: T }> {
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: (text ? JSON.parse(text) : null) as T };
}

async function get<T = ServerInfo>(url: string, path: string): Promise<T> {
  return (await fetch(url + path)).json() as Promise<T>;
}

/** Teacher-forced log-probs of `output` after `prompt`, computed by the server itself in one prefill. */
async function score(url: string, prompt: number[], output: number[]): Promise<number[]> {
  const { json } = await post(url, '/generate', {
    input_ids: [...prompt, ...output],
    sampling_params: { max_new_tokens: 0 },
    return_logprob: true,
    logprob_start_len: prompt.length - 1,
  });
  const entries = json.meta_info.input_token_logprobs;
  expect(entries[0]![0]).toBeNull();
  expect(entries.slice(1).map((e) => e[1])).toEqual(output);
  return entries.slice(1).map((e) => e[0]!);
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

describe('the policy server on SGLang’s wire (tiny Qwen3 on CPU)', () => {
  const python = torchPythonOrSkip();
  if (!python) return;
  const scratch = mkdtempSync(join(tmpdir(), 'vime-policy-'));
  const first = join(scratch, 'seed0');
  const second = join(scratch, 'seed1');
  let server: RunningPolicyServer;
  let engine: Engine;
  let tokenizer: ChatTokenizer;
  const prompt = [151644, 872, 198, 9707, 11, 1879, 0, 151645, 198, 151644, 77091, 198];

  beforeAll(async () => {
    for (const [out, seed] of [
      [first, '0'],
      [second, '1'],
    ] as const) {
      const r = spawnSync(
        python,
        ['-m', 'vime_policy.init', '--preset', 'tiny', '--seed', seed, '--out', out],
        {
          cwd: exampleDir,
          env: pythonEnv(),
          encoding: 'utf8',
        },
      );
      expect(r.status, `${r.stdout}${r.stderr}`).toBe(0);
    }
    server = await startPolicyServer({
      modelPath: first,
      python,
      device: 'cpu',
      args: ['--context-length', '8192', '--decode-log-interval', '10'],
    });
    engine = sglangEngine(server.url);
    tokenizer = await loadTokenizer(bundledTokenizerDir());
  });

  afterAll(async () => {
    await engine?.close();
    await server?.close();
    rmSync(scratch, { recursive: true, force: true });
  });

  it('answers health and model info as SGLang does', async () => {
    expect(await engine.health()).toBe(true);
    expect((await fetch(`${server.url}/health_generate`)).status).toBe(200);
    const info = await engine.modelInfo();
    expect(info.modelPath).toBe(first);
    expect(info.weightVersion).toBe('default');
    expect(info.raw.architectures).toEqual(['Qwen3ForCausalLM']);
    expect(await get<unknown>(server.url, '/weight_version')).toEqual({ weight_version: 'default' });
    const serverInfo = await get(server.url, '/server_info');
    expect(serverInfo).toMatchObject({ tp_size: 1, dp_size: 1, pp_size: 1, context_length: 8192 });
  });

  it('decodes token ids to the same text as the project’s TypeScript tokenizer', () => {
    const random = seededRandom(5);
    const pick = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo));
    // Random runs of ids: whole and split multi-byte characters, added and special tokens, unused ids.
    const cases = Array.from({ length: 3000 }, () =>
      Array.from({ length: pick(1, 24) }, () => (random() < 0.9 ? pick(0, 151936) : pick(151643, 151669))),
    );
    const script = [
      'import json, sys',
      'from vime_policy.tokenizer import Detokenizer',
      'd = Detokenizer(sys.argv[1])',
      'print(json.dumps([[d.decode(c), d.decode(c, skip_special_tokens=True)] for c in json.load(sys.stdin)]))',
    ].join('\n');
    const r = spawnSync(python, ['-c', script, bundledTokenizerDir()], {
      cwd: exampleDir,
      env: pythonEnv(),
      input: JSON.stringify(cases),
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
    });
    expect(r.status, r.stderr).toBe(0);
    const decoded = JSON.parse(r.stdout) as Array<[string, string]>;
    const mismatches = cases.filter((ids, i) => {
      const [all, skipped] = decoded[i]!;
      return (
        all !== tokenizer.decode(ids, { skipSpecialTokens: false }) ||
        skipped !== tokenizer.decode(ids, { skipSpecialTokens: true })
      );
    });
    expect(mismatches.slice(0, 3)).toEqual([]);
  });

  it('generates token ids with the log-probs of the distribution it sampled', async () => {
    const sampling = { temperature: 1, topP: 1, maxTokens: 24, seed: 11 };
    const a = await engine.generate({ inputIds: prompt, sampling });
    expect(a.outputIds.length).toBe(24);
    expect(a.finishReason).toBe('length');
    expect(a.weightVersion).toBe('default');
    expect(a.promptTokens).toBe(prompt.length);
    expect(a.text).toBe(tokenizer.decode(a.outputIds, { skipSpecialTokens: false }));
    expect(maxDiff(a.logprobs, await score(server.url, prompt, Array.from(a.outputIds)))).toBeLessThan(1e-4);
    const again = await engine.generate({ inputIds: prompt, sampling });
    expect(Array.from(again.outputIds)).toEqual(Array.from(a.outputIds));
    expect(Array.from(again.logprobs)).toEqual(Array.from(a.logprobs));
    const other = await engine.generate({ inputIds: prompt, sampling: { ...sampling, seed: 12 } });
    expect(Array.from(other.outputIds)).not.toEqual(Array.from(a.outputIds));
    // Stop on a token id the model just produced: the output ends with it and the reason is `stop`.
    const stopAt = a.outputIds[5]!;
    const cut = await engine.generate({
      inputIds: prompt,
      sampling: { ...sampling, stopTokenIds: [stopAt] },
    });
    expect(cut.finishReason).toBe('stop');
    expect(cut.outputIds.at(-1)).toBe(stopAt);
  });

  it('streams SSE chunks that add up to the non-streaming answer', async () => {
    const body = {
      input_ids: prompt,
      sampling_params: { max_new_tokens: 8, sampling_seed: 4 },
      return_logprob: true,
      stream: true,
    };
    const res = await fetch(`${server.url}/generate`, { method: 'POST', body: JSON.stringify(body) });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const events = (await res.text()).split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice('data: '.length)) as Answer);
    // Each chunk holds the whole output so far, and a chunk goes out whenever a token came since the last
    // one: on a loaded machine two tokens can come before the stream's thread wakes, so a chunk may add two.
    const lengths = chunks.map((c) => c.output_ids.length);
    expect(lengths.at(-1)).toBe(8);
    for (const [i, c] of chunks.entries()) {
      if (i > 0) expect(lengths[i]!).toBeGreaterThan(lengths[i - 1]!);
      expect(c.output_ids).toEqual(chunks.at(-1)!.output_ids.slice(0, c.output_ids.length));
    }
    expect(chunks.length).toBeGreaterThan(1);
    expect(chunks.slice(0, -1).every((c) => c.meta_info.finish_reason === null)).toBe(true);
    const { json: whole } = await post(server.url, '/generate', { ...body, stream: false });
    const last = chunks.at(-1)!;
    expect(last.output_ids).toEqual(whole.output_ids);
    expect(last.meta_info.output_token_logprobs).toEqual(whole.meta_info.output_token_logprobs);
    expect(last.meta_info.finish_reason).toEqual({ type: 'length', length: 8 });
  });

  it('batches concurrent requests, each with its own correct log-probs', { timeout: 300_000 }, async () => {
    const before = (await get(server.url, '/server_info')).internal_states[0];
    const requests = Array.from({ length: 8 }, (_, i) => ({
      inputIds: prompt.slice(0, 4 + i),
      sampling: { temperature: 1, maxTokens: 30 + 5 * i, seed: 100 + i },
    }));
    const results = await Promise.all(requests.map((r) => engine.generate(r)));
    const after = (await get(server.url, '/server_info')).internal_states[0];
    expect(after.peak_running).toBeGreaterThanOrEqual(4);
    // Fewer decode steps than tokens: the requests decoded together.
    const tokens = results.reduce((n, r) => n + r.outputIds.length, 0);
    expect(after.decode_steps - before.decode_steps).toBeLessThan(tokens / 2);
    for (const [i, r] of results.entries()) {
      expect(r.outputIds.length).toBe(30 + 5 * i);
      const want = await score(server.url, requests[i]!.inputIds, Array.from(r.outputIds));
      expect(maxDiff(r.logprobs, want)).toBeLessThan(1e-4);
    }
    expect(server.logs.some((l) => /Decode batch \[\d+\], #running-req: \d+/.test(l))).toBe(true);
  });

  it('frees an aborted request on the engine', async () => {
    const controller = new AbortController();
    const pending = engine.generate(
      { inputIds: prompt, sampling: { maxTokens: 6000, temperature: 1 }, rid: 'abort-me' },
      { signal: controller.signal },
    );
    // The caller's abort rejects with the signal's reason, as every wait in the SDK does.
    const rejected = expect(pending).rejects.toMatchObject({ name: 'AbortError' });
    // Polls below have 30 s budgets: a loaded 2-core machine runs a CPU model slowly.
    for (let i = 0; i < 1200; i++) {
      if ((await get(server.url, '/server_info')).internal_states[0].num_running_reqs > 0) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    controller.abort();
    await rejected;
    let running = 1;
    for (let i = 0; i < 1200 && running > 0; i++) {
      running = (await get(server.url, '/server_info')).internal_states[0].num_running_reqs;
      if (running > 0) await new Promise((r) => setTimeout(r, 25));
    }
    expect(running).toBe(0);
    // The raw wire: /abort_request ends a waiting client's request with what it generated.
    const steps = async () =>
      (await get(server.url, '/server_info')).internal_states[0].decode_steps as number;
    const before = await steps();
    const raw = post(server.url, '/generate', {
      input_ids: prompt,
      rid: 'abort-raw',
      sampling_params: { max_new_tokens: 6000, ignore_eos: true },
    });
    // Aborted once it has decoded a token (not after a guess of how long that takes).
    for (let i = 0; i < 1200 && (await steps()) <= before; i++) await new Promise((r) => setTimeout(r, 25));
    expect((await post(server.url, '/abort_request', { rid: 'abort-raw' })).status).toBe(200);
    const { json } = await raw;
    expect(json.meta_info.finish_reason?.type).toBe('abort');
    expect(json.output_ids.length).toBeGreaterThan(0);
  });

  it('serves the new weights and version after /update_weights_from_disk', async () => {
    const request = { inputIds: prompt, sampling: { temperature: 1, maxTokens: 12, seed: 21 } };
    const before = await engine.generate(request);
    expect(before.weightVersion).toBe('default');
    const update = await post<unknown>(server.url, '/update_weights_from_disk', {
      model_path: second,
      weight_version: 'step-1',
    });
    expect(update).toEqual({
      status: 200,
      json: {
        success: true,
        message: 'Succeeded to update model weights. Weight version updated to step-1.',
        num_paused_requests: 0,
      },
    });
    const after = await engine.generate(request);
    expect(after.weightVersion).toBe('step-1');
    expect((await engine.modelInfo()).weightVersion).toBe('step-1');
    // Same prompt, same seed, different weights: different log-probs (scored on the same tokens too).
    expect(Array.from(after.logprobs)).not.toEqual(Array.from(before.logprobs));
    const rescored = await score(server.url, prompt, Array.from(before.outputIds));
    expect(maxDiff(rescored, before.logprobs)).toBeGreaterThan(1e-3);
    const bad = await post(server.url, '/update_weights_from_disk', { model_path: join(scratch, 'nowhere') });
    expect(bad.status).toBe(400);
    expect(bad.json.success).toBe(false);
    expect((await engine.modelInfo()).weightVersion).toBe('step-1');
  });

  it('records turns through the capture proxy with the serving weight version', async () => {
    const proxy = await startCaptureProxy({ engine, tokenizer });
    try {
      const versions: Array<string | undefined> = [];
      proxy.events.on('turn', (e) => versions.push(e.turn.policyVersion));
      const session = proxy.openSession('rollout-1', {
        sampling: { temperature: 1, topP: 1, maxTokens: 10, seed: 3 },
      });
      const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session.apiKey, maxRetries: 0 });
      const messages: OpenAI.ChatCompletionMessageParam[] = [
        { role: 'user', content: 'Fix the failing test.' },
      ];
      const one = await client.chat.completions.create({ model: 'vime-policy', messages });
      const version = (await engine.modelInfo()).weightVersion!;
      await post(server.url, '/update_weights_from_disk', { model_path: first, weight_version: 'step-2' });
      messages.push({ role: 'assistant', content: one.choices[0]!.message.content ?? '' });
      messages.push({ role: 'user', content: 'Now submit.' });
      await client.chat.completions.create({ model: 'vime-policy', messages });
      const samples: Sample[] = proxy.finishSession('rollout-1', { reward: 1, status: 'completed' });
      expect(versions).toEqual([version, 'step-2']);
      expect(new Set(samples.flatMap((s) => s.weight_versions))).toEqual(new Set([version, 'step-2']));
      // The trainer-side row: response tokens with their engine log-probs; the last turn's are the new weights'.
      const last = samples.at(-1)!;
      const tokens = Array.from(last.tokens);
      const n = last.response_length;
      const mask = Array.from(last.loss_mask!);
      const lastTurn = mask.lastIndexOf(0) + 1; // the final policy turn follows the last masked token
      const turnIds = tokens.slice(tokens.length - n + lastTurn);
      const want = await score(server.url, tokens.slice(0, tokens.length - n + lastTurn), turnIds);
      expect(maxDiff(Array.from(last.rollout_log_probs!).slice(lastTurn), want)).toBeLessThan(1e-4);
    } finally {
      await proxy.close();
    }
  });
});
