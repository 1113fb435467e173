import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { EngineError } from '../errors.js';
import { startStandInEngine } from '../standin/engine.js';
import { concatNucleus, encodeBase64Array, turnNucleus } from './nucleus.js';
import { sglangEngine } from './sglang.js';

let server: Server | undefined;
afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

/** An SGLang-wire server answering every `/generate` with `meta` added to a 3-token answer; keeps the bodies. */
async function sglangAnswering(meta: Record<string, unknown>, logprobs: unknown[] = [-0.5, -0.25, -1]) {
  const bodies: Array<Record<string, unknown>> = [];
  server = createServer((req, res) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      bodies.push(JSON.parse(text));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          text: 'abc',
          meta_info: {
            finish_reason: { type: 'stop' },
            prompt_tokens: 1,
            completion_tokens: 3,
            output_token_logprobs: [7, 8, 9].map((id, i) => [logprobs[i], id, null]),
            ...meta,
          },
        }),
      );
    });
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies };
}

const b64 = (values: number[]) => encodeBase64Array(Int32Array.from(values));
/** slime's top-p patch: ids and offsets as base64 int32. */
const PATCH_META = { top_p_token_ids: b64([7, 3, 8, 9, 1, 2]), top_p_token_offsets: b64([0, 2, 3, 6]) };

async function generate(url: string, topP: number) {
  const engine = sglangEngine(url);
  try {
    return await engine.generate({ inputIds: [1], sampling: { topP, maxTokens: 3 } });
  } finally {
    await engine.close();
  }
}

describe('sampler replay on the SGLang wire (slime top-p patch)', () => {
  it('asks for the nucleus when top_p < 1 and reads base64 or list fields', async () => {
    const { url, bodies } = await sglangAnswering({
      ...PATCH_META,
      top_p_token_logprobs: encodeBase64Array(Float32Array.from([-0.5, -1, -0.25, -1, -2, -3])),
    });
    const result = await generate(url, 0.95);
    expect((bodies[0]!.sampling_params as Record<string, unknown>).custom_params).toEqual({
      return_top_p_token_ids: true,
    });
    expect(Array.from(result.topP!.ids)).toEqual([7, 3, 8, 9, 1, 2]);
    expect(Array.from(result.topP!.offsets)).toEqual([0, 2, 3, 6]);
    expect(Array.from(result.topP!.logprobs!)).toEqual([-0.5, -1, -0.25, -1, -2, -3]);

    const lists = await sglangAnswering({
      top_p_kept_token_ids: [7, 8, 9],
      top_p_kept_token_offsets: [0, 1, 2, 3],
    });
    const listed = await generate(lists.url, 0.5);
    expect(Array.from(listed.topP!.offsets)).toEqual([0, 1, 2, 3]);
    expect(listed.topP!.logprobs).toBeUndefined();
  });

  it('top_p 1 asks for nothing and records nothing', async () => {
    const { url, bodies } = await sglangAnswering(PATCH_META);
    const result = await generate(url, 1);
    expect((bodies[0]!.sampling_params as Record<string, unknown>).custom_params).toBeUndefined();
    expect(result.topP).toBeUndefined();
  });

  const broken: Array<[string, Record<string, unknown>, RegExp, unknown[]?]> = [
    ['no nucleus at all', {}, /no top_p_token_ids; serve with an SGLang that has slime's top-p patch/],
    ['ids without offsets', { top_p_token_ids: b64([7]) }, /no top_p_token_offsets/],
    [
      'offsets not from 0',
      { ...PATCH_META, top_p_token_offsets: b64([1, 2, 3, 6]) },
      /top_p_token_offsets\[0\]: expected 0, found 1/,
    ],
    [
      'offsets decreasing',
      { ...PATCH_META, top_p_token_offsets: b64([0, 3, 2, 6]) },
      /top_p_token_offsets\[2\]: 2 is below offsets\[1\] = 3/,
    ],
    [
      'offsets of the wrong length',
      { ...PATCH_META, top_p_token_offsets: b64([0, 2, 6]) },
      /expected 4 offsets \(one per output token plus one\), found 3/,
    ],
    [
      'ids and offsets disagreeing',
      { ...PATCH_META, top_p_token_ids: b64([7, 3, 8, 9, 1]) },
      /the last offset 6 must equal the 5 kept ids/,
    ],
    [
      'not base64',
      { ...PATCH_META, top_p_token_ids: 'not base64!' },
      /meta_info\.top_p_token_ids: expected base64 of int32/,
    ],
    [
      'a list of strings',
      { ...PATCH_META, top_p_token_offsets: [0, '2', 3, 6] },
      /meta_info\.top_p_token_offsets\[1\]: expected int32/,
    ],
    [
      'log probs of the wrong count',
      { ...PATCH_META, top_p_token_logprobs: [-1, -1] },
      /top_p_token_logprobs: expected one per kept id \(6\), found 2/,
    ],
    [
      'a NaN kept-id log prob',
      {
        ...PATCH_META,
        top_p_token_logprobs: encodeBase64Array(Float32Array.from([-1, Number.NaN, -1, -1, -1, -1])),
      },
      /top_p_token_logprobs\[1\]: expected a finite log prob, found NaN/,
    ],
    ['a sampled token without its log prob', PATCH_META, /output_token_logprobs\[1\]/, [-0.5, null, -1]],
  ];
  for (const [what, meta, message, logprobs] of broken) {
    it(`fails the generation on ${what}, naming the field`, async () => {
      const { url } = await sglangAnswering(meta, logprobs);
      const error = (await generate(url, 0.95).catch((e: unknown) => e)) as EngineError;
      expect(error).toBeInstanceOf(EngineError);
      expect(error.isRetryable).toBe(false);
      expect(error.message).toMatch(message);
    });
  }

  it('a turn checks ids against the vocabulary and refuses an engine that sent no nucleus', () => {
    const outputIds = Int32Array.from([7, 8]);
    const topP = { ids: Int32Array.from([7, 500, 8]), offsets: Int32Array.from([0, 2, 3]) };
    expect(() => turnNucleus({ topP: 0.9 }, { outputIds, topP, engines: ['http://e'] }, 100)).toThrow(
      /top_p_token_ids\[1\]: 500 is outside the vocabulary \[0, 100\)/,
    );
    expect(turnNucleus({ topP: 0.9 }, { outputIds, topP, engines: ['http://e'] }, 1000)).toBe(topP);
    expect(() => turnNucleus({ topP: 0.9 }, { outputIds, engines: ['http://vllm'] }, 1000)).toThrow(
      /http:\/\/vllm: top_p 0.9 needs the nucleus of every output token, but the engine returned none/,
    );
    expect(turnNucleus({ topP: 1 }, { outputIds, engines: [] }, 1000)).toBeUndefined();
  });

  it('a continued turn concatenates its generations’ nuclei', () => {
    const joined = concatNucleus([
      {
        ids: Int32Array.from([1, 2, 3]),
        offsets: Int32Array.from([0, 2, 3]),
        logprobs: Float32Array.from([-1, -2, -3]),
      },
      { ids: Int32Array.from([4]), offsets: Int32Array.from([0, 0, 1]), logprobs: Float32Array.from([-4]) },
    ]);
    expect(Array.from(joined.ids)).toEqual([1, 2, 3, 4]);
    expect(Array.from(joined.offsets)).toEqual([0, 2, 3, 3, 4]);
    expect(Array.from(joined.logprobs!)).toEqual([-1, -2, -3, -4]);
  });
});

describe('the stand-in engine returns the same replay fields', () => {
  it('a nucleus per output token holding the sampled id with its log prob, summing to 1', async () => {
    const tokenizer = await qwen3();
    const standIn = await startStandInEngine({ tokenizer, policy: () => 'The answer is 42.' });
    const engine = sglangEngine(standIn.url);
    try {
      const prompt = tokenizer.encode('Question?');
      const result = await engine.generate({ inputIds: prompt, sampling: { topP: 0.95, maxTokens: 32 } });
      const { ids, offsets, logprobs } = result.topP!;
      expect(offsets.length).toBe(result.outputIds.length + 1);
      for (let i = 0; i < result.outputIds.length; i++) {
        const kept = Array.from(ids.subarray(offsets[i]!, offsets[i + 1]!));
        expect(kept.length).toBeGreaterThanOrEqual(2);
        expect(new Set(kept).size).toBe(kept.length);
        const at = kept.indexOf(result.outputIds[i]!);
        expect(at).toBeGreaterThanOrEqual(0);
        expect(logprobs![offsets[i]! + at]).toBe(result.logprobs[i]);
        const mass = Array.from(logprobs!.subarray(offsets[i]!, offsets[i + 1]!)).reduce(
          (s, x) => s + Math.exp(x),
          0,
        );
        expect(mass).toBeCloseTo(1, 4);
      }
      // Same prompt, same output: the same nucleus (the stand-in is deterministic).
      const again = await engine.generate({ inputIds: prompt, sampling: { topP: 0.95, maxTokens: 32 } });
      expect(Array.from(again.topP!.ids)).toEqual(Array.from(ids));
      expect((await engine.generate({ inputIds: prompt, sampling: { maxTokens: 32 } })).topP).toBeUndefined();
    } finally {
      await engine.close();
      await standIn.close();
    }
  });
});
