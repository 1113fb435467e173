import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { EngineError } from '../errors.js';
import { startStandInEngine } from '../standin/engine.js';
import { sglangEngine } from './sglang.js';
import type { Engine, TokenChunk } from './types.js';
import { vllmEngine } from './vllm.js';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

const TEXT = 'Streaming, one token at a time: `ls -la` — then a tool call.';

async function standIn(
  options: { incremental?: boolean; tokensPerSecond?: number; disconnect?: boolean } = {},
) {
  const engine = await startStandInEngine({
    tokenizer: await qwen3(),
    policy: () => TEXT,
    service: { tokensPerSecond: options.tokensPerSecond ?? 300 },
    incrementalStreamingOutput: options.incremental ?? false,
    weightVersion: 'v3',
    ...(options.disconnect ? { fault: () => ({ kind: 'disconnect' as const }) } : {}),
  });
  open.push(engine);
  return engine;
}

const clients: Record<string, (url: string) => Engine> = {
  'SGLang /generate': (url) => sglangEngine(url),
  'vLLM /v1/completions': (url) => vllmEngine(url),
};

describe('engine clients stream tokens as the engine produces them', () => {
  const cases = [
    ['SGLang /generate', false],
    ['SGLang /generate', true],
    ['vLLM /v1/completions', false],
  ] as const;
  for (const [name, incremental] of cases) {
    it(`${name}${incremental ? ' (incremental chunks)' : ''}: the streamed result equals generate's, chunk by chunk`, async () => {
      const tok = await qwen3();
      const engine = await standIn({ incremental });
      const client = clients[name]!(engine.url);
      open.push(client);
      const inputIds = tok.encode('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
      const whole = await client.generate({ inputIds, sampling: { maxTokens: 64 } });
      const chunks: TokenChunk[] = [];
      const streamed = await client.generateStream!(
        { inputIds, sampling: { maxTokens: 64 } },
        { onTokens: (c) => chunks.push(c) },
      );
      expect(Array.from(streamed.outputIds)).toEqual(Array.from(whole.outputIds));
      expect(Array.from(streamed.logprobs)).toEqual(Array.from(whole.logprobs));
      expect(streamed.finishReason).toBe('stop');
      expect(streamed.text).toBe(whole.text);
      expect(streamed.promptTokens).toBe(inputIds.length);
      // at 300 tokens/s and a poll per token, the output arrives in several chunks that add up to it
      expect(chunks.length).toBeGreaterThan(3);
      expect(chunks.flatMap((c) => Array.from(c.outputIds))).toEqual(Array.from(whole.outputIds));
      expect(chunks.flatMap((c) => Array.from(c.logprobs))).toEqual(Array.from(whole.logprobs));
      if (name.startsWith('SGLang')) expect(streamed.weightVersion).toBe('v3');
    });
  }

  it('the first tokens arrive before a slow engine finishes, in several chunks', async () => {
    const tok = await qwen3();
    const engine = await standIn({ tokensPerSecond: 50 });
    const client = sglangEngine(engine.url);
    open.push(client);
    const started = performance.now();
    let first: number | undefined;
    let chunks = 0;
    const out = await client.generateStream!(
      {
        inputIds: tok.encode('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n'),
        sampling: { maxTokens: 64 },
      },
      {
        onTokens: () => {
          chunks++;
          first ??= performance.now() - started;
        },
      },
    );
    const total = performance.now() - started;
    // ~18 tokens at 50 tokens/s over about 360 ms: they come in several chunks, the first before the end
    expect(out.outputIds.length).toBeGreaterThan(10);
    expect(chunks).toBeGreaterThan(1);
    expect(first!).toBeLessThan(total);
  });

  for (const name of Object.keys(clients)) {
    it(`${name}: a stream that breaks midway is a retryable EngineError after the tokens it delivered`, async () => {
      const tok = await qwen3();
      const engine = await standIn({ disconnect: true });
      const client = clients[name]!(engine.url);
      open.push(client);
      const chunks: TokenChunk[] = [];
      const error = await client.generateStream!(
        {
          inputIds: tok.encode('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n'),
          sampling: { maxTokens: 64 },
        },
        { onTokens: (c) => chunks.push(c) },
      ).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineError);
      expect((error as EngineError).isRetryable).toBe(true);
      expect(chunks.length).toBeGreaterThan(0);
    });
  }

  it('an aborted stream stops the request on the engine', async () => {
    const tok = await qwen3();
    const engine = await standIn({ tokensPerSecond: 20 });
    const client = sglangEngine(engine.url);
    open.push(client);
    const controller = new AbortController();
    const error = await client.generateStream!(
      {
        inputIds: tok.encode('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n'),
        sampling: { maxTokens: 64 },
      },
      { signal: controller.signal, onTokens: () => controller.abort(new Error('enough')) },
    ).catch((e: unknown) => e);
    expect((error as Error).message).toBe('enough');
    const end = performance.now() + 30_000;
    while (engine.stats().running > 0 && performance.now() < end) await new Promise((r) => setTimeout(r, 5));
    expect(engine.stats()).toMatchObject({ running: 0, completed: 0 });
  });
});

describe('engine stream wire errors', () => {
  let server: Server | undefined;
  afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

  async function streaming(lines: string[], status = 200): Promise<string> {
    server = createServer((_req, res) => {
      res.writeHead(status, { 'content-type': status === 200 ? 'text/event-stream' : 'application/json' });
      res.end(lines.join(''));
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  it('a non-JSON chunk, an inconsistent token count, a missing finish and a refusal are clear EngineErrors', async () => {
    const meta = (n: number, entries: unknown[], finish: unknown = null) =>
      `data: ${JSON.stringify({ text: '', meta_info: { finish_reason: finish, prompt_tokens: 1, completion_tokens: n, output_token_logprobs: entries } })}\n\n`;
    const cases: Array<[string[], number, RegExp]> = [
      [['data: {oops\n\n'], 200, /not JSON/],
      [
        [meta(1, [[-0.1, 5, null]]), meta(4, [[-0.2, 6, null]])],
        200,
        /1 tokens read, then a chunk of 1 entries with completion_tokens 4/,
      ],
      [[meta(1, [[-0.1, 5, null]]), 'data: [DONE]\n\n'], 200, /ended before a finish_reason/],
      [[JSON.stringify({ error: { message: 'bad input_ids' } })], 400, /answered 400: bad input_ids/],
      [
        [meta(1, [[-0.1, 5, null]]), 'data: {"error": {"message": "out of memory"}}\n\n'],
        200,
        /streamed an error: out of memory/,
      ],
    ];
    for (const [lines, status, message] of cases) {
      const url = await streaming(lines, status);
      const client = sglangEngine(url);
      const error = await client.generateStream!(
        { inputIds: [1], sampling: {} },
        { onTokens: () => {} },
      ).catch((e: unknown) => e);
      await client.close();
      await new Promise<void>((r) => server!.close(() => r()));
      server = undefined;
      expect(error).toBeInstanceOf(EngineError);
      expect((error as Error).message).toMatch(message);
    }
  });
});
