import type { RolloutResult } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { renderHtmlReport } from './html.js';
import { parsePrometheusText } from './prometheus.js';
import { runReport } from './report.js';
import {
  sglangSpecAcceptLength,
  specDecodeLine,
  specDecodeRecord,
  specDecodeScalars,
  stepSpecDecode,
  sumSpecDecode,
  vllmSpecDecodeDelta,
} from './spec-decode.js';

const scored = (spec: unknown, index = 0): RolloutResult =>
  ({
    status: 'completed',
    taskId: 't',
    groupIndex: 0,
    sampleIndex: index,
    reward: 0,
    rolloutId: index,
    turns: 1,
    timings: {},
    metadata: {},
    samples: [{ metadata: spec === undefined ? {} : { spec_decode: spec } }],
  }) as unknown as RolloutResult;

const failed = {
  status: 'failed',
  taskId: 't',
  groupIndex: 0,
  sampleIndex: 9,
  error: { kind: 'infra', message: 'x' },
} as unknown as RolloutResult;

/** Two scrapes of a vLLM engine with speculation on (`/metrics`, two data-parallel engines), a step apart. */
const vllmScrape = (drafts: [number, number], draftTokens: [number, number], accepted: [number, number]) =>
  parsePrometheusText(
    [
      '# HELP vllm:num_requests_running Number of requests in model execution batches.',
      '# TYPE vllm:num_requests_running gauge',
      'vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 4.0',
      '# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.',
      '# TYPE vllm:spec_decode_num_drafts_total counter',
      `vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen3-8B"} ${drafts[0]}`,
      `vllm:spec_decode_num_drafts_total{engine="1",model_name="Qwen/Qwen3-8B"} ${drafts[1]}`,
      '# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.',
      '# TYPE vllm:spec_decode_num_draft_tokens_total counter',
      `vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} ${draftTokens[0]}`,
      `vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="Qwen/Qwen3-8B"} ${draftTokens[1]}`,
      '# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.',
      '# TYPE vllm:spec_decode_num_accepted_tokens_total counter',
      `vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} ${accepted[0]}`,
      `vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="Qwen/Qwen3-8B"} ${accepted[1]}`,
      '# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.',
      '# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter',
      `vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="0"} ${accepted[0]}`,
      '',
    ].join('\n'),
  );

describe('speculative decoding of a step from its rows', () => {
  it('sums the rollouts; acceptance length = 1 + accepted / passes; rows without counts count nowhere', () => {
    const spec = stepSpecDecode([
      scored({ verify_passes: 100, accepted_tokens: 150 }),
      scored({ verify_passes: 50, accepted_tokens: 50 }, 1),
      scored(undefined, 2),
      failed,
    ]);
    expect(spec).toEqual({
      verifyPasses: 150,
      acceptedTokens: 200,
      acceptLength: 1 + 200 / 150,
      source: 'responses',
      rollouts: 2,
    });
    expect(specDecodeScalars(spec)).toEqual({
      'spec/accepted_tokens': 200,
      'spec/verify_passes': 150,
      'spec/accept_length': 1 + 200 / 150,
    });
    expect(specDecodeLine(spec!)).toBe(
      'speculative decoding: 200 accepted draft tokens over 150 verify passes, acceptance length 2.33 (responses)',
    );
  });

  it('is absent, not zero, when no rollout carries counts (or they are not counts)', () => {
    expect(stepSpecDecode([scored(undefined), failed])).toBeUndefined();
    expect(stepSpecDecode([scored({ verify_passes: -1, accepted_tokens: 2 })])).toBeUndefined();
    expect(stepSpecDecode([scored({ verify_passes: '3', accepted_tokens: 2 })])).toBeUndefined();
    expect(specDecodeScalars(undefined)).toEqual({});
  });
});

describe('speculative decoding from the engines /metrics', () => {
  it('vLLM: the counters increase between two recorded scrapes, summed over label sets', () => {
    const before = vllmScrape([100, 200], [300, 600], [150, 240]);
    const after = vllmScrape([160, 300], [480, 900], [270, 390]);
    const spec = vllmSpecDecodeDelta(before, after)!;
    // drafts +60 +100, draft tokens +180 +300, accepted +120 +150
    expect(spec).toEqual({
      verifyPasses: 160,
      acceptedTokens: 270,
      acceptLength: 1 + 270 / 160,
      source: 'engine metrics',
      draftTokens: 480,
      acceptRate: 270 / 480,
    });
    expect(specDecodeScalars(spec)).toMatchObject({
      'spec/draft_tokens': 480,
      'spec/accept_rate': 270 / 480,
    });
  });

  it('vLLM: the first scrape counts from 0; a restarted engine (counter lower) counts from its restart', () => {
    const after = vllmScrape([10, 0], [30, 0], [12, 0]);
    expect(vllmSpecDecodeDelta(undefined, after)).toMatchObject({ verifyPasses: 10, acceptedTokens: 12 });
    const before = vllmScrape([500, 0], [1500, 0], [700, 0]);
    expect(vllmSpecDecodeDelta(before, after)).toMatchObject({ verifyPasses: 10, acceptedTokens: 12 });
  });

  it('no speculation counters (speculation off, or an SGLang engine): no figure', () => {
    const plain = parsePrometheusText('vllm:num_requests_running{engine="0"} 1\n');
    expect(vllmSpecDecodeDelta(plain, plain)).toBeUndefined();
    expect(sumSpecDecode([undefined, undefined])).toBeUndefined();
  });

  it("SGLang's gauge sglang:spec_accept_length is read as it stands", () => {
    const text = [
      '# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.',
      '# TYPE sglang:spec_accept_length gauge',
      'sglang:spec_accept_length{model_name="Qwen/Qwen3-8B"} 2.75',
      '',
    ].join('\n');
    expect(sglangSpecAcceptLength(parsePrometheusText(text))).toBe(2.75);
    expect(sglangSpecAcceptLength(parsePrometheusText('sglang:num_running_reqs 1\n'))).toBeUndefined();
  });
});

describe('the run report section', () => {
  it("each step's figures and the run's, from rows or (for a step without) the engines' counters", () => {
    const results = [
      { step: 1, results: [scored({ verify_passes: 100, accepted_tokens: 200 })] },
      { step: 2, results: [scored(undefined)] },
    ];
    const engine = vllmSpecDecodeDelta(undefined, vllmScrape([40, 0], [120, 0], [60, 0]))!;
    const record = runReport({ results, specDecode: [{ ...engine, step: 2 }] });
    expect(
      record.spec_decode?.steps.map((s) => [s.step, s.acceptedTokens, s.verifyPasses, s.source]),
    ).toEqual([
      [1, 200, 100, 'responses'],
      [2, 60, 40, 'engine metrics'],
    ]);
    expect(record.spec_decode?.total).toMatchObject({
      acceptedTokens: 260,
      verifyPasses: 140,
      acceptLength: 1 + 260 / 140,
      source: 'responses and engine metrics',
      draftTokens: undefined,
    });
    const html = renderHtmlReport(record);
    expect(html).toContain(
      '<section id="spec-decode" data-section="spec-decode" data-empty="false"><h2>Speculative decoding</h2>',
    );
    expect(html).toContain('Speculation was on: 260 draft tokens accepted over 140 verification passes.');
    expect(specDecodeRecord([{ step: 1, results: [scored(undefined)] }])).toBeNull();
    expect(runReport({ results: [results[1]!] }).absent.spec_decode).toMatch(
      /no speculative-decoding counts/,
    );
  });

  it("a stand-in engine's figures are labelled as scripted", () => {
    const results = [{ step: 1, results: [scored({ verify_passes: 10, accepted_tokens: 20 })] }];
    const real = renderHtmlReport(runReport({ results, engineKind: { kind: 'sglang', standIn: false } }));
    expect(real).not.toContain('scripted figures');
    const standIn = renderHtmlReport(runReport({ results, engineKind: { kind: 'sglang', standIn: true } }));
    expect(standIn).toContain(
      'Stand-in engine: these are its scripted figures; nothing was drafted or verified.',
    );
  });
});
