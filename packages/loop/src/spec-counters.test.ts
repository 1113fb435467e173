/**
 * vLLM's speculative-decoding counters read at every hand-off: a loopback HTTP server answers `/metrics`
 * with recorded-shape counter readings (`vllm:spec_decode_*_total`), and each step gets their increase.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { SpecCounters } from './spec-counters.js';

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

/** vLLM's `/metrics` with the three counters at the given readings. */
const metricsText = ([drafts, draftTokens, accepted]: [number, number, number]) =>
  [
    '# TYPE vllm:spec_decode_num_drafts_total counter',
    `vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} ${drafts}`,
    '# TYPE vllm:spec_decode_num_draft_tokens_total counter',
    `vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} ${draftTokens}`,
    '# TYPE vllm:spec_decode_num_accepted_tokens_total counter',
    `vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} ${accepted}`,
    '',
  ].join('\n');

/** An engine whose n-th `/metrics` read gets `readings[n]` (a 500 where it is null). */
async function engine(readings: Array<[number, number, number] | null>): Promise<string> {
  let n = 0;
  const server = createServer((req, res) => {
    const reading = readings[Math.min(n++, readings.length - 1)];
    if (req.url !== '/metrics' || !reading) return res.writeHead(500).end('down');
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(metricsText(reading));
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('SpecCounters', () => {
  it("each step gets the counters' increase since the last hand-off, summed over engines", async () => {
    const a = await engine([
      [100, 300, 150],
      [160, 480, 270],
      [200, 600, 330],
    ]);
    const b = await engine([
      [0, 0, 0],
      [40, 120, 60],
      [40, 120, 60],
    ]);
    const counters = new SpecCounters([a, b]);
    expect(await counters.step()).toEqual({
      verifyPasses: 100,
      acceptedTokens: 180,
      acceptLength: 2.8,
      source: 'engine metrics',
      draftTokens: 300,
      acceptRate: 0.6,
    });
    expect(await counters.step()).toMatchObject({ verifyPasses: 40, acceptedTokens: 60, draftTokens: 120 });
  });

  it('a failed read makes that engine unknown for the step, and the one after (never a count from 0)', async () => {
    const a = await engine([[100, 300, 150], null, [160, 480, 270], [170, 510, 280]]);
    const counters = new SpecCounters([a]);
    expect(await counters.step()).toBeUndefined();
    expect(await counters.step()).toBeUndefined();
    expect(await counters.step()).toMatchObject({ verifyPasses: 10, acceptedTokens: 10 });
  });
});
