import { execFileSync } from 'node:child_process';
import { getEventListeners } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError, EngineError } from '../errors.js';
import { parseDuration } from './duration.js';
import { HttpClient, jsonWithIds } from './http.js';
import { backoffDelay, retry } from './retry.js';
import { shellJoin, shellQuote } from './shell.js';
import { sleep } from './sleep.js';

describe('parseDuration', () => {
  it('reads every unit, decimals, either case, and bare seconds', () => {
    expect(parseDuration('500ms')).toBe(500);
    expect(parseDuration('90s')).toBe(90_000);
    expect(parseDuration('90S')).toBe(90_000);
    expect(parseDuration('1.5h')).toBe(5_400_000);
    expect(parseDuration('2d')).toBe(172_800_000);
    expect(parseDuration('1w')).toBe(604_800_000);
    expect(parseDuration(' 30 ')).toBe(30_000);
    expect(parseDuration(12)).toBe(12_000);
  });

  it('names the field and the fix for anything else', () => {
    for (const bad of ['', 'soon', '-5s', '5 minutes', '1e3', 's', '5sec']) {
      expect(() => parseDuration(bad, '--older-than')).toThrow(ConfigError);
      expect(() => parseDuration(bad, '--older-than')).toThrow(/--older-than: .* is not a duration; write/);
    }
  });
});

describe('shellQuote', () => {
  it('survives sh for any string', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (value) => {
        const clean = value.replaceAll('\0', '');
        const echoed = execFileSync('sh', ['-c', `printf %s ${shellQuote(clean)}`], { encoding: 'utf8' });
        expect(echoed).toBe(clean);
      }),
      { numRuns: 60 },
    );
  });

  it('keeps plain words bare and variables expandable only when asked', () => {
    expect(shellJoin(['python3', 'a b', "it's", '', '--x=1'])).toBe(`python3 'a b' 'it'\\''s' '' --x=1`);
    expect(shellQuote('$HOST:1')).toBe(`'$HOST:1'`);
    expect(shellQuote('$HOST-$PORT', { expandVariables: true })).toBe('"$HOST-$PORT"');
  });
});

describe('sleep', () => {
  it('rejects with the reason at once and leaves no listener behind', async () => {
    const controller = new AbortController();
    const reason = new Error('stop');
    const pending = sleep(10_000, controller.signal);
    controller.abort(reason);
    await expect(pending).rejects.toBe(reason);
    const signal = new AbortController().signal;
    for (let i = 0; i < 50; i++) await sleep(0, signal);
    expect(getEventListeners(signal, 'abort')).toHaveLength(0);
  });
});

describe('retry', () => {
  const retryable = (message: string, retryAfterMs?: number) =>
    new EngineError(message, { isRetryable: true, retryAfterMs });

  it('retries retryable failures, then rethrows the last one', async () => {
    let calls = 0;
    const error = await retry(
      async () => {
        calls++;
        throw retryable(`failure ${calls}`);
      },
      { retries: 3, initialDelayMs: 1 },
    ).catch((e: unknown) => e);
    expect(calls).toBe(4);
    expect((error as Error).message).toBe('failure 4');
  });

  it('does not retry what says it is not retryable', async () => {
    let calls = 0;
    await expect(
      retry(
        async () => {
          calls++;
          throw new EngineError('bad request', { status: 400 });
        },
        { retries: 5, initialDelayMs: 1 },
      ),
    ).rejects.toThrow('bad request');
    expect(calls).toBe(1);
  });

  it("waits the server's Retry-After instead of its own backoff", async () => {
    const delays: number[] = [];
    let calls = 0;
    const value = await retry(
      async () => {
        if (++calls < 3) throw retryable('busy', 30);
        return 'done';
      },
      { retries: 5, initialDelayMs: 5_000, onRetry: ({ delayMs }) => delays.push(delayMs) },
    );
    expect(value).toBe('done');
    expect(delays).toEqual([30, 30]);
  });

  it('stops at once when aborted, mid-wait included', async () => {
    const controller = new AbortController();
    const reason = new Error('cancelled');
    const started = performance.now();
    const pending = retry(
      async () => {
        throw retryable('down');
      },
      { retries: 10, initialDelayMs: 10_000, signal: controller.signal },
    );
    setTimeout(() => controller.abort(reason), 20);
    await expect(pending).rejects.toBe(reason);
    // The 10 s wait before the next attempt was cut short.
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  it('backs off exponentially within its ceiling and jitter', () => {
    for (let attempt = 1; attempt <= 8; attempt++) {
      const d = backoffDelay(attempt, { initialDelayMs: 100, maxDelayMs: 1_000, jitter: 0.2 });
      const base = Math.min(1_000, 100 * 2 ** (attempt - 1));
      expect(d).toBeGreaterThanOrEqual(base * 0.8);
      expect(d).toBeLessThanOrEqual(base * 1.2);
    }
  });
});

describe('HttpClient (against a real server on loopback)', () => {
  let server: Server | undefined;
  afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

  const serve = async (
    handler: (req: IncomingMessage, body: string) => [number, Record<string, string>, string],
  ) => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const [status, headers, text] = handler(req, body);
        res.writeHead(status, headers);
        res.end(text);
      });
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(server!.address() as AddressInfo).port}`;
  };

  it('posts JSON, parses the answer with a schema, and keeps a base path', async () => {
    const url = await serve((req, body) => [
      200,
      { 'content-type': 'application/json' },
      JSON.stringify({ path: req.url, body: JSON.parse(body) }),
    ]);
    const client = new HttpClient(`${url}/api/`, { apiKey: 'k' });
    const answer = await client.json({
      method: 'POST',
      path: '/jobs',
      body: { a: 1 },
      schema: z.object({ path: z.string(), body: z.object({ a: z.number() }) }),
    });
    expect(answer).toEqual({ path: '/api/jobs', body: { a: 1 } });
    await client.close();
  });

  it('retries 503 with Retry-After, then succeeds; 400 is not retried', async () => {
    let calls = 0;
    const url = await serve((req) => {
      calls++;
      if (req.url === '/bad') return [400, {}, JSON.stringify({ error: { message: 'no such model' } })];
      return calls < 3 ? [503, { 'retry-after': '0' }, 'warming up'] : [200, {}, '{"ok":true}'];
    });
    // Its own backoff would wait 30 s before a retry; the server's Retry-After: 0 replaces it.
    const client = new HttpClient(url, { maxRetries: 4, backoff: { initialDelayMs: 30_000 } });
    const started = performance.now();
    expect(await client.json({ method: 'GET', path: '/x', schema: z.object({ ok: z.boolean() }) })).toEqual({
      ok: true,
    });
    expect(calls).toBe(3);
    expect(performance.now() - started).toBeLessThan(30_000);
    calls = 0;
    const error = (await client
      .text({ method: 'GET', path: '/bad' })
      .catch((e: unknown) => e)) as EngineError;
    expect(EngineError.isInstance(error)).toBe(true);
    expect(error.status).toBe(400);
    expect(error.message).toMatch(/answered 400: no such model/);
    expect(calls).toBe(1);
    await client.close();
  });

  it('names a refused connection and a timeout, both retryable', async () => {
    const refused = new HttpClient('http://127.0.0.1:9', { service: 'engine' });
    const error = (await refused
      .text({ method: 'GET', path: '/health' })
      .catch((e: unknown) => e)) as EngineError;
    expect(error.isRetryable).toBe(true);
    expect(error.message).toMatch(/ECONNREFUSED.*is the engine running\?/);
    await expect(refused.ok('/health')).rejects.toThrow(/GET .*\/health failed: .*ECONNREFUSED/);

    server = createServer(() => {}); // never answers
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const slow = new HttpClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {
      timeoutMs: 100,
    });
    const timeout = (await slow.text({ method: 'GET', path: '/' }).catch((e: unknown) => e)) as EngineError;
    expect(timeout.message).toMatch(/timed out after 100 ms/);
    expect(timeout.isRetryable).toBe(true);
    server.closeAllConnections();
    await Promise.all([refused.close(), slow.close()]);
  });

  it('sends through a caller-supplied dispatcher and leaves it open', async () => {
    const url = await serve(() => [200, {}, 'hi']);
    const agent = new Agent();
    const client = new HttpClient(url, { dispatcher: agent });
    expect((await client.text({ method: 'GET', path: '/' })).text).toBe('hi');
    await client.close();
    expect(agent.closed).toBe(false);
    await agent.close();
  });
});

describe('jsonWithIds', () => {
  it('is the JSON of the same object with the ids as an array, for any ids and members', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })),
        fc.dictionary(
          fc.string().filter((k) => k !== 'input_ids'),
          fc.jsonValue(),
        ),
        (ids, rest) => {
          const text = jsonWithIds('input_ids', Int32Array.from(ids), rest).text;
          expect(JSON.parse(text)).toEqual(JSON.parse(JSON.stringify({ input_ids: ids, ...rest })));
        },
      ),
    );
  });
});
