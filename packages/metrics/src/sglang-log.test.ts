import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseSglangDecodeLog, SglangDecodeLogParser } from './sglang-log.js';

// Real shapes of SGLang's log_decode_stats output (0.4.x "Decode batch." and 0.5.x "Decode batch [N],"),
// with the scheduler's logger prefix, interleaved with the other lines an engine log holds.
const LOG = [
  '[2026-08-21 10:00:00] INFO:     Started server process [4242]',
  '[2026-08-21 10:00:01 TP0] Prefill batch. #new-seq: 4, #new-token: 8192, #cached-token: 512, token usage: 0.05, #running-req: 0, #queue-req: 12, ',
  '[2026-08-21 10:00:02 TP0] Decode batch. #running-req: 233, #token: 370959, token usage: 0.82, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317, ',
  '[2026-08-21 10:00:03 DP0 TP0] Decode batch [1234], #running-req: 40, #token: 81234, token usage: 0.41, accept len: 2.31, accept rate: 0.77, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: False, gen throughput (token/s): 812.50, #queue-req: 0, ',
  '[2026-08-21 10:00:04 TP0] Decode batch. #running-req: 12, #full token: 5000, full token usage: 0.30, #swa token: 1200, swa token usage: 0.10, cuda graph: True, gen throughput (token/s): 300.25, #queue-req: 3, ',
  '[2026-08-21 10:00:05 TP0] Decode batch. #running-req: 7, #full token: 900, full token usage: 0.12, mamba num: 7, mamba usage: 0.05, cpu graph: False, gen throughput (token/s): 42.00, #queue-req: 1, ',
  '[2026-08-21 10:00:06 TP1] Decode batch. #running-req: 5, #token: 100, token usage: 0.01, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0, timestamp: 2026-08-21T10:00:06.250000',
  'INFO:     127.0.0.1:51234 - "POST /generate HTTP/1.1" 200 OK',
  '[2026-08-21 10:00:07 TP0] Decode batch. #running-req: 233, #token: 370959, token usa',
  '[2026-08-21 10:00:08 TP0] Decode batch. #running-req: 9, #tok[2026-08-21 10:00:08 TP3] Decode batch. #running-req: 10, #token: 2000, token usage: 0.20, cuda graph: True, gen throughput (token/s): 99.00, #queue-req: 4, ',
  '',
  '[2026-08-21 10:00:09 TP0] Decode batch. #running-req: abc, #token: 1, token usage: 0.1, cuda graph: True, gen throughput (token/s): 1.0, #queue-req: 0, ',
].join('\n');

// The tolerant regex of the reference notes, used as an independent check of the values read.
const REFERENCE =
  /Decode batch(?: \[\d+\])?[.,] #running-req: (?<running>\d+), (?:#token: (?<tokens>\d+), token usage: (?<usage>[\d.]+)|#full token: (?<tokens2>\d+), full token usage: (?<usage2>[\d.]+)).*?(?:cuda|cpu) graph: (?<graph>True|False), gen throughput \(token\/s\): (?<tput>[\d.]+), #queue-req: (?<queue>\d+)/;

describe('parseSglangDecodeLog', () => {
  it('reads both historical formats, hybrid and mamba pools, cpu graphs and the timestamp field', () => {
    const r = parseSglangDecodeLog(LOG);
    expect(r.lines).toBe(12);
    expect(
      r.samples.map((s) => [s.line, s.running, s.queued, s.tokens, s.kvUsage, s.genThroughput, s.graph]),
    ).toEqual([
      [3, 233, 317, 370959, 0.82, 4594.01, true],
      [4, 40, 0, 81234, 0.41, 812.5, false],
      [5, 12, 3, 5000, 0.3, 300.25, true],
      [6, 7, 1, 900, 0.12, 42, false],
      [7, 5, 0, 100, 0.01, 10, true],
      [10, 10, 4, 2000, 0.2, 99, true],
    ]);
    expect(r.samples[0]!.t).toBe(Date.UTC(2026, 7, 21, 10, 0, 2));
    expect(r.samples[1]).toMatchObject({ dpRank: 0, tpRank: 0, acceptLen: 2.31 });
    expect(r.samples[4]).toMatchObject({ tpRank: 1, t: Date.UTC(2026, 7, 21, 10, 0, 6, 250) });
    // The second half of an interleaved line keeps its own prefix.
    expect(r.samples[5]).toMatchObject({ tpRank: 3, t: Date.UTC(2026, 7, 21, 10, 0, 8) });
  });

  it('counts cut-off, interleaved and garbled entries as malformed and other lines as ignored', () => {
    const r = parseSglangDecodeLog(LOG);
    expect(r.malformed).toBe(3);
    expect(r.malformedLines).toEqual([9, 10, 12]);
    expect(r.ignored).toBe(4);
    expect(r.lines).toBe(r.ignored + 8);
  });

  it('agrees with the reference regex on generated lines of every shape', () => {
    const line = fc
      .record({
        running: fc.nat(5000),
        tokens: fc.nat(2_000_000),
        usage: fc.integer({ min: 0, max: 100 }),
        tput: fc.integer({ min: 0, max: 10_000_000 }),
        queue: fc.nat(5000),
        graph: fc.boolean(),
        device: fc.constantFrom('cuda', 'cpu'),
        shape: fc.constantFrom('old', 'new', 'hybrid', 'spec'),
        batch: fc.nat(1_000_000),
      })
      .map((v) => {
        const usage = (v.usage / 100).toFixed(2);
        const tput = (v.tput / 100).toFixed(2);
        const head = v.shape === 'old' ? 'Decode batch.' : `Decode batch [${v.batch}],`;
        const pool =
          v.shape === 'hybrid'
            ? `#full token: ${v.tokens}, full token usage: ${usage}, #swa token: 7, swa token usage: 0.01`
            : `#token: ${v.tokens}, token usage: ${usage}`;
        const spec = v.shape === 'spec' ? 'accept len: 1.75, accept rate: 0.44, ' : '';
        return `[2026-01-02 03:04:05 TP0] ${head} #running-req: ${v.running}, ${pool}, ${spec}${v.device} graph: ${v.graph ? 'True' : 'False'}, gen throughput (token/s): ${tput}, #queue-req: ${v.queue}, `;
      });
    fc.assert(
      fc.property(fc.array(line, { minLength: 1, maxLength: 30 }), (lines) => {
        const r = parseSglangDecodeLog(lines.join('\n'));
        expect(r.malformed).toBe(0);
        expect(r.samples).toHaveLength(lines.length);
        lines.forEach((l, i) => {
          const g = REFERENCE.exec(l)!.groups!;
          const s = r.samples[i]!;
          expect([s.running, s.tokens, s.kvUsage, s.graph, s.genThroughput, s.queued]).toEqual([
            Number(g.running),
            Number(g.tokens ?? g.tokens2),
            Number.parseFloat(g.usage ?? g.usage2!),
            g.graph === 'True',
            Number.parseFloat(g.tput!),
            Number(g.queue),
          ]);
        });
      }),
    );
  });

  it('gives the same result however a stream is chunked, and accepts an iterable of lines', () => {
    const whole = parseSglangDecodeLog(LOG);
    fc.assert(
      fc.property(fc.array(fc.nat(LOG.length), { maxLength: 12 }), (cuts) => {
        const points = [...new Set(cuts)].sort((a, b) => a - b);
        const parser = new SglangDecodeLogParser();
        let from = 0;
        for (const p of [...points, LOG.length]) {
          parser.push(LOG.slice(from, p));
          from = p;
        }
        expect(parser.end()).toEqual(whole);
      }),
    );
    expect(parseSglangDecodeLog(LOG.split('\n'))).toEqual(whole);
    expect(parseSglangDecodeLog(`${LOG}\n`)).toEqual(whole);
  });

  it('stays linear on long logs whose lines lack optional fields', () => {
    // Searching the whole remaining text for a field a line does not have would make this quadratic
    // (hours); linear takes well under a second.
    const line = (i: number) =>
      i % 2
        ? `Decode batch. #running-req: ${i % 50}, #full token: 10, full token usage: 0.5, cpu graph: True, gen throughput (token/s): 1.0, #queue-req: 0, `
        : `INFO: request ${i} done`;
    const text = Array.from({ length: 100_000 }, (_, i) => line(i)).join('\n');
    const t0 = performance.now();
    const r = parseSglangDecodeLog(text);
    expect(r.count).toBe(50_000);
    expect(r.columns.t[0]).toBeNaN();
    expect(r.columns.tpRank[0]).toBe(-1);
    expect(performance.now() - t0).toBeLessThan(15_000);
  });

  it('never throws on arbitrary input', () => {
    fc.assert(
      fc.property(
        fc.string({
          unit: fc.constantFrom(
            'Decode batch',
            '[',
            ']',
            '.',
            ',',
            ' ',
            '#running-req: ',
            '1',
            '\n',
            'x',
            'graph: ',
            'True',
          ),
        }),
        (text) => {
          const r = parseSglangDecodeLog(text);
          expect(r.samples.length + r.malformed).toBeGreaterThanOrEqual(0);
          expect(r.lines).toBe(text.length === 0 ? 0 : text.replace(/\n$/, '').split('\n').length);
        },
      ),
    );
  });
});
