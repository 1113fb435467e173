/**
 * The engine clients' top-k log probs on SGLang's and vLLM's wires, against the stand-in engine
 * (labelled: it serves the wires, not a real model's heads), and the wire readers' refusals.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { EngineError } from '../errors.js';
import { startStandInEngine } from '../standin/engine.js';
import { sglangEngine } from './sglang.js';
import { readSglangTopLogprobs, readVllmTopLogprobs, type TopLogprobs, topLogprobsProblem } from './topk.js';
import type { Engine, GenerateResult } from './types.js';
import { vllmEngine } from './vllm.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

const TEXT = 'Top-k heads for score centering, one per sampled token.';

async function engines(incremental = false) {
  const tokenizer = await qwen3();
  const standIn = await startStandInEngine({
    tokenizer,
    policy: () => TEXT,
    incrementalStreamingOutput: incremental,
  });
  closers.push(() => standIn.close());
  const sg = sglangEngine(standIn.url);
  const vl = vllmEngine(standIn.url, { model: 'vime-standin' });
  closers.push(
    () => sg.close(),
    () => vl.close(),
  );
  return { tokenizer, sg, vl };
}

function rows(top: TopLogprobs): number[][] {
  return Array.from({ length: top.ids.length / top.k }, (_, i) =>
    Array.from(top.ids.subarray(i * top.k, (i + 1) * top.k)),
  );
}

async function both(engine: Engine, k: number): Promise<[GenerateResult, GenerateResult]> {
  const request = { inputIds: [1, 2, 3, 4], sampling: { temperature: 1, maxTokens: 64, topLogprobs: k } };
  const whole = await engine.generate(request);
  const chunks: number[] = [];
  const streamed = await engine.generateStream!(request, {
    onTokens: (c) => chunks.push(c.outputIds.length),
  });
  expect(chunks.length).toBeGreaterThan(0);
  return [whole, streamed];
}

describe('engine clients: top-k log probs', () => {
  for (const incremental of [false, true]) {
    it(`SGLang (${incremental ? 'incremental' : 'cumulative'} streaming) and vLLM return one head of k per output token, streamed or not`, async () => {
      const { tokenizer, sg, vl } = await engines(incremental);
      for (const [engine, k] of [
        [sg, 7],
        [vl, 20],
      ] as const) {
        const [whole, streamed] = await both(engine, k);
        expect(whole.outputIds.length).toBeGreaterThan(5);
        const top = whole.topK!;
        expect(top.k).toBe(k);
        expect(
          topLogprobsProblem(top, {
            outputLength: whole.outputIds.length,
            k,
            vocabSize: tokenizer.vocabSize,
          }),
        ).toBeUndefined();
        expect(rows(streamed.topK!)).toEqual(rows(top));
        expect(Array.from(streamed.topK!.logprobs)).toEqual(Array.from(top.logprobs));
        // Most likely first.
        for (let i = 0; i < whole.outputIds.length; i++) {
          const lps = Array.from(top.logprobs.subarray(i * k, (i + 1) * k));
          expect(lps).toEqual([...lps].sort((a, b) => b - a));
        }
      }
    });
  }

  it('SGLang and vLLM heads of the same generation agree (the vLLM map drops the sampled id when it is outside the head)', async () => {
    const { sg, vl } = await engines();
    const [a] = await both(sg, 5);
    const [b] = await both(vl, 5);
    expect(Array.from(b.outputIds)).toEqual(Array.from(a.outputIds));
    expect(rows(b.topK!)).toEqual(rows(a.topK!));
    // Both cases occur: the sampled id inside its head, and outside it (vLLM's map then has k + 1 entries).
    const inside = rows(a.topK!).map((r, i) => r.includes(a.outputIds[i]!));
    expect(inside).toContain(true);
    expect(inside).toContain(false);
  });

  it('no topLogprobs: no head asked for or returned', async () => {
    const { sg, vl } = await engines();
    for (const e of [sg, vl])
      expect((await e.generate({ inputIds: [1, 2], sampling: { maxTokens: 8 } })).topK).toBeUndefined();
  });

  it('vLLM refuses a k over its --max-logprobs before sending, naming the option, the value and the fix', async () => {
    const { vl } = await engines();
    await expect(vl.generate({ inputIds: [1], sampling: { maxTokens: 4, topLogprobs: 21 } })).rejects.toThrow(
      /sampling\.topLogprobs 21 is above the limit of vLLM \(its --max-logprobs\) \(20\); lower topLogprobs to at most 20, or raise the engine's limit \(vLLM: start it with --max-logprobs 21/,
    );
  });
});

describe('top-k wire readers fail closed', () => {
  const url = 'http://engine';
  it('SGLang: a missing, short or malformed output_top_logprobs is an EngineError naming the field', () => {
    const row = [
      [-0.1, 5, 'a'],
      [-2.5, 9, 'b'],
    ];
    expect(readSglangTopLogprobs([row], 1, 2, url)).toEqual({
      k: 2,
      ids: Int32Array.from([5, 9]),
      logprobs: Float32Array.from([-0.1, -2.5]),
    });
    const cases: Array<[unknown, number, RegExp]> = [
      [
        undefined,
        1,
        /needs meta_info\.output_top_logprobs, found undefined; serve with an SGLang that honours top_logprobs_num/,
      ],
      [[row], 2, /expected 2 rows \(one per output token\), found 1/],
      [[[row[0]]], 1, /output_top_logprobs\[0\]: expected 2 entries/],
      [[[row[0], [null, 9, 'b']]], 1, /output_top_logprobs\[0\]\[1\]: expected \[logprob, token_id, text\]/],
    ];
    for (const [entries, n, message] of cases) {
      const error = (() => {
        try {
          readSglangTopLogprobs(entries, n, 2, url);
        } catch (e) {
          return e;
        }
      })();
      expect(error).toBeInstanceOf(EngineError);
      expect((error as EngineError).isRetryable).toBe(false);
      expect((error as Error).message).toMatch(message);
    }
    // A generation aborted before its first token reports no rows.
    expect(readSglangTopLogprobs(undefined, 0, 2, url).ids).toHaveLength(0);
  });

  it('vLLM: text keys (no return_tokens_as_token_ids), too few entries or no maps are refused', () => {
    expect(
      rows(readVllmTopLogprobs([{ 'token_id:3': -3, 'token_id:1': -0.5, 'token_id:2': -1 }], 1, 2, url)),
    ).toEqual([[1, 2]]);
    expect(() => readVllmTopLogprobs([{ hello: -0.5, 'token_id:2': -1 }], 1, 2, url)).toThrow(
      /expected "token_id:<id>": logprob entries \(request return_tokens_as_token_ids\), found "hello"/,
    );
    expect(() => readVllmTopLogprobs([{ 'token_id:2': -1 }], 1, 2, url)).toThrow(
      /expected at least 2 entries, found 1/,
    );
    expect(() => readVllmTopLogprobs(null, 1, 2, url)).toThrow(
      /needs logprobs\.top_logprobs with one map per output token/,
    );
    expect(() => readVllmTopLogprobs([null], 1, 2, url)).toThrow(/top_logprobs\[0\]: expected a map/);
  });

  it('the shape check: ids in the vocabulary, log probs finite and at most 0', () => {
    const top = { k: 2, ids: Int32Array.from([1, 99]), logprobs: Float32Array.from([-1, -2]) };
    expect(topLogprobsProblem(top, { outputLength: 1, k: 2, vocabSize: 50 })).toBe(
      'row 0: id 99 is outside the vocabulary [0, 50)',
    );
    top.ids[1] = 2;
    top.logprobs[1] = 0.5;
    expect(topLogprobsProblem(top, { outputLength: 1, k: 2, vocabSize: 50 })).toBe(
      'row 0: expected a finite log prob <= 0, found 0.5',
    );
  });
});
