import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { EngineError } from '../errors.js';
import { sglangEngine, toSglangSampling } from './sglang.js';
import { vllmEngine } from './vllm.js';

let server: Server | undefined;
afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

/** An HTTP server answering every request with one fixed JSON body (a misbehaving engine). */
async function answering(body: unknown, status = 200): Promise<string> {
  server = createServer((_req, res) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('engine clients reject malformed answers with a clear EngineError', () => {
  it('SGLang: a bad output_token_logprobs entry names its index', async () => {
    const url = await answering({
      text: 'x',
      meta_info: {
        finish_reason: { type: 'stop' },
        prompt_tokens: 1,
        completion_tokens: 1,
        output_token_logprobs: [
          [-0.5, 7, null],
          [-0.1, 'x'],
        ],
      },
    });
    const engine = sglangEngine(url);
    const error = (await engine
      .generate({ inputIds: [1], sampling: {} })
      .catch((e: unknown) => e)) as EngineError;
    await engine.close();
    expect(error).toBeInstanceOf(EngineError);
    expect(error.message).toMatch(/output_token_logprobs\[1\]: expected \[logprob, token_id, text\]/);
  });

  it('SGLang: a missing meta_info field is named', async () => {
    const url = await answering({ text: 'x', meta_info: { finish_reason: null, prompt_tokens: 1 } });
    const engine = sglangEngine(url);
    const error = (await engine.generate({ inputIds: [1], sampling: {} }).catch((e: unknown) => e)) as Error;
    await engine.close();
    expect(error).toBeInstanceOf(EngineError);
    expect(error.message).toMatch(/meta_info\.completion_tokens/);
  });

  it('vLLM: an answer without token_ids asks for a newer vLLM', async () => {
    const url = await answering({
      choices: [{ text: 'x', finish_reason: 'stop', logprobs: { token_logprobs: [-1] } }],
    });
    const engine = vllmEngine(url, { model: 'm' });
    const error = (await engine.generate({ inputIds: [1], sampling: {} }).catch((e: unknown) => e)) as Error;
    await engine.close();
    expect(error.message).toMatch(/return_token_ids/);
  });

  it('maps sampling to SGLang names and keeps special tokens in the text', () => {
    expect(
      toSglangSampling({ temperature: 0.7, topP: 0.9, maxTokens: 10, seed: 3, stopTokenIds: [2] }),
    ).toEqual({
      temperature: 0.7,
      top_p: 0.9,
      max_new_tokens: 10,
      sampling_seed: 3,
      stop_token_ids: [2],
      skip_special_tokens: false,
      // top_p < 1: the nucleus of every output token is asked for (slime's top-p patch).
      custom_params: { return_top_p_token_ids: true },
    });
    expect(toSglangSampling({ topP: 1 })).toEqual({ top_p: 1, skip_special_tokens: false });
  });
});
