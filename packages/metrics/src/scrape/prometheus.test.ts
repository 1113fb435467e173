import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EngineError } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LoadState, sglangMetrics, vllmMetrics } from '../__fixtures__/metrics-text.js';
import { counterIncrease, engineWindow } from '../prometheus.js';
import { scrapeEngines, scrapePrometheus } from './prometheus.js';

const load = (over: Partial<LoadState> = {}): LoadState => ({
  running: 48,
  queued: 17,
  kvUsage: 0.83,
  promptTokens: 1_000_000,
  generationTokens: 250_000,
  ttft: [10, 40, 70, 90, 99, 100],
  ttftSum: 42.5,
  ...over,
});

describe('scrapePrometheus over HTTP', () => {
  let server: Server;
  let base: string;
  const states: LoadState[] = [0, 1, 2, 3, 4, 5].map((i) =>
    load({ running: 10 * i, queued: i, promptTokens: 1000 * (i + 1) }),
  );
  let hits = 0;

  beforeAll(async () => {
    server = createServer((req, res) => {
      if (req.url === '/sglang/metrics') {
        const s = states[Math.min(hits++, states.length - 1)]!;
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
        res.end(sglangMetrics(s));
      } else if (req.url === '/vllm/metrics') {
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
        res.end(vllmMetrics(load()));
      } else if (req.url === '/slow/metrics') {
        setTimeout(() => res.end('late 1\n'), 2000);
      } else {
        res.writeHead(404).end('Not Found');
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('scrapes and parses both engines', async () => {
    const v = await scrapePrometheus(`${base}/vllm/metrics`);
    expect(v.snapshot).toMatchObject({ engine: 'vllm', running: 48, queued: 17 });
    expect(v.malformed).toBe(0);
    expect(v.t).toBeGreaterThan(Date.now() - 60_000);
  });

  it('turns HTTP errors, timeouts and refused connections into EngineErrors', async () => {
    const notFound = await scrapePrometheus(`${base}/none/metrics`).catch((e) => e);
    expect(EngineError.isInstance(notFound)).toBe(true);
    expect(notFound).toMatchObject({ status: 404, isRetryable: false });
    expect(notFound.message).toMatch(/--enable-metrics/);
    const slow = await scrapePrometheus(`${base}/slow/metrics`, { timeoutMs: 100 }).catch((e) => e);
    expect(slow).toMatchObject({ isRetryable: true });
    expect(slow.message).toMatch(/timed out after 100 ms/);
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const refused = await scrapePrometheus(`http://127.0.0.1:${port}/metrics`).catch((e) => e);
    expect(refused).toMatchObject({ isRetryable: true, url: `http://127.0.0.1:${port}/metrics` });
    const ctrl = new AbortController();
    ctrl.abort();
    await expect(scrapePrometheus(`${base}/slow/metrics`, { signal: ctrl.signal })).rejects.toMatchObject({
      code: 'aborted',
    });
  });

  it('scrapes several engines over a duration, recording failures without stopping', async () => {
    hits = 0;
    const seen: number[] = [];
    const series = await scrapeEngines([`${base}/sglang/metrics`, `${base}/none/metrics`], {
      intervalMs: 40,
      durationMs: 400,
      onScrape: (_url, s) => seen.push(s.running!),
    });
    const [sglang, broken] = series;
    expect(sglang!.scrapes.length).toBeGreaterThanOrEqual(4);
    expect(seen.slice(0, 4)).toEqual([0, 10, 20, 30]);
    expect(broken!.scrapes).toHaveLength(0);
    expect(broken!.errors.length).toBe(sglang!.scrapes.length);
    const increase = counterIncrease(sglang!.scrapes.map((s) => s.snapshot.counters.promptTokens));
    expect(increase).toBe(sglang!.scrapes.at(-1)!.snapshot.counters.promptTokens! - 1000);
    const w = engineWindow(sglang!.scrapes);
    expect(w).toMatchObject({
      scrapes: sglang!.scrapes.length,
      promptTokens: increase,
      prefixCacheHitRate: 0.625,
    });
    expect(w.seconds).toBeGreaterThan(0.1);
  });
});
