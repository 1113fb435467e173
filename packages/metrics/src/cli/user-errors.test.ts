// `vime-metrics` refuses what it cannot measure: bad flags, logs that cannot be read or hold no data, and
// scrape targets that never answer all fail at once with the flag named, exit 2 (input) or 1 (a target
// down), no stack trace and no report written. Driven through `main`, which the bin calls.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LoadState, sglangMetrics } from '../__fixtures__/metrics-text.js';
import { sglangEngineLog, slimeTrainerLog } from '../__fixtures__/run-logs.js';
import { main } from './main.js';

const dir = mkdtempSync(join(tmpdir(), 'vime-metrics-errors-'));
const STACK = /^\s+at .+[:(]/m;
const load: LoadState = {
  running: 12,
  queued: 3,
  kvUsage: 0.4,
  promptTokens: 100,
  generationTokens: 10,
  ttft: [1, 2, 3, 4, 5, 6],
  ttftSum: 1,
};

async function metrics(args: string[]) {
  let stdout = '';
  let stderr = '';
  const out = join(dir, `out-${Math.random().toString(36).slice(2)}`);
  const code = await main([...args, '--json', join(out, 'r.json'), '--html', join(out, 'r.html')], {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
    env: {},
    cwd: dir,
  });
  return { code, stdout, stderr, wrote: existsSync(join(out, 'r.json')) || existsSync(join(out, 'r.html')) };
}

function expectRefused(r: Awaited<ReturnType<typeof metrics>>, code: 1 | 2, message: RegExp | string) {
  expect(r.code, r.stderr).toBe(code);
  expect(r.stderr).not.toMatch(STACK);
  if (typeof message === 'string') expect(r.stderr).toContain(message);
  else expect(r.stderr).toMatch(message);
  expect(r.wrote).toBe(false);
}

/** A loopback server answering with `answer(n)` for the n-th request; counts requests. */
async function serve(answer: (n: number) => [number, string]) {
  let n = 0;
  const server: Server = createServer((_req, res) => {
    const [status, body] = answer(++n);
    res.writeHead(status).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`,
    requests: () => n,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

beforeAll(() => {
  writeFileSync(join(dir, 'train.log'), slimeTrainerLog());
  writeFileSync(join(dir, 'sglang.log'), sglangEngineLog());
  writeFileSync(join(dir, 'notes.txt'), 'this is not a log\nat all\n');
  writeFileSync(join(dir, 'empty.log'), '');
  mkdirSync(join(dir, 'a-dir'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('vime-metrics: flags', () => {
  it.each(['fast', 'SYNC', '', 'async,sync'])('rejects --mode %j', async (mode) => {
    expectRefused(
      await metrics(['--trainer-log', 'train.log', '--mode', mode]),
      2,
      `--mode must be sync or async, got ${JSON.stringify(mode)}`,
    );
  });

  it.each(['0', '0s', '0ms', '50ms', '0.01'])(
    'rejects --interval %s without scraping at all',
    async (interval) => {
      const engine = await serve(() => [200, sglangMetrics(load)]);
      try {
        const r = await metrics(['--scrape', engine.url, '--duration', '2s', '--interval', interval]);
        expectRefused(
          r,
          2,
          `--interval ${interval}: scrapes must be at least 100ms apart; write e.g. --interval 5s`,
        );
        expect(engine.requests()).toBe(0);
      } finally {
        await engine.close();
      }
    },
  );

  it.each([
    [['--scrape', 'notaurl'], '--scrape "notaurl" is not an http(s) URL'],
    [['--scrape', 'localhost:30000/metrics'], '--scrape "localhost:30000/metrics" is not an http(s) URL'],
    [
      ['--scrape', 'http://127.0.0.1:9/metrics', '--duration', 'soon'],
      '--duration: "soon" is not a duration',
    ],
    [['--trainer-log', 'train.log', '--bogus'], "Unknown option '--bogus'; see `vime-metrics --help`"],
    [['--trainer-log', '--quiet'], '--trainer-log needs a value'],
    [['positional'], 'unexpected argument "positional"'],
    // The did-you-mean of every Vime bin: a misspelled flag, a flag typed without its dashes.
    [
      ['--trainer-log', 'train.log', '--trainer_log', 'x'],
      `Unknown option '--trainer_log' (did you mean "--trainer-log"?)`,
    ],
    [
      ['--trainer-log', 'train.log', 'scrape', 'x'],
      'unexpected argument "scrape" (did you mean "--scrape"?)',
    ],
    [
      ['--trainer-log', 'train.log', '--mode', 'asnyc'],
      '--mode must be sync or async, got "asnyc" (did you mean "async"?)',
    ],
  ])('%j', async (args, message) => {
    const r = await metrics(args);
    expectRefused(r, 2, message);
    expect(r.stderr.trimEnd().split('\n'), 'one line').toHaveLength(1);
  });

  it('answers --help whatever else is on the line', async () => {
    for (const args of [['--help'], ['--bogus', '-h'], ['--interval', '0', '--help']]) {
      const r = await metrics(args);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^Usage: vime-metrics/);
    }
  });
});

describe('vime-metrics: logs that cannot be read or hold no data', () => {
  it.each([
    [['--trainer-log', 'missing.log'], '--trainer-log missing.log: cannot read it: ENOENT'],
    [['--trainer-log', 'a-dir'], '--trainer-log a-dir: cannot read it: EISDIR'],
    [
      ['--trainer-log', 'notes.txt'],
      /--trainer-log notes\.txt: no "perf N:" step lines and no rollout lines among \d+ lines; is this a slime trainer log/,
    ],
    [['--trainer-log', 'empty.log'], /--trainer-log empty\.log: no "perf N:" step lines/],
    [['--engine-log', 'missing.log'], '--engine-log missing.log: cannot read it: ENOENT'],
    [['--engine-log', 'eng0=a-dir'], '--engine-log a-dir: cannot read it: EISDIR'],
    [['--engine-log', 'train.log'], /--engine-log train\.log: no "Decode batch" lines/],
    [['--engine-log', 'sglang.log', '--trainer-log', 'notes.txt'], '--trainer-log notes.txt: no "perf N:"'],
  ])('%j', async (args, message) => {
    expectRefused(await metrics(args), 2, message);
  });

  it('checks the logs before a long scrape starts', async () => {
    const engine = await serve(() => [200, sglangMetrics(load)]);
    try {
      const r = await metrics(['--trainer-log', 'notes.txt', '--scrape', engine.url, '--duration', '1h']);
      expectRefused(r, 2, '--trainer-log notes.txt: no "perf N:"');
      expect(engine.requests()).toBe(0);
    } finally {
      await engine.close();
    }
  });
});

describe('vime-metrics: scrape targets that never answer', () => {
  it('a closed port, an unresolvable host, a 404 and a 503 fail at once, naming the target', async () => {
    const missing = await serve(() => [404, 'Not Found']);
    const busy = await serve(() => [503, 'loading']);
    try {
      for (const url of [
        'http://127.0.0.1:9/metrics',
        'http://engine.invalid:30000/metrics',
        missing.url,
        busy.url,
      ]) {
        const started = performance.now();
        const r = await metrics(['--scrape', `e0=${url}`, '--duration', '1h', '--interval', '1s']);
        expectRefused(r, 1, `--scrape ${url}: `);
        // The probe fails it, not the end of an hour of failed scrapes.
        expect(performance.now() - started).toBeLessThan(30_000);
      }
    } finally {
      await Promise.all([missing.close(), busy.close()]);
    }
  });

  it('one dead target among live ones fails the run; an endpoint without engine gauges is refused', async () => {
    const live = await serve(() => [200, sglangMetrics(load)]);
    const other = await serve(() => [
      200,
      '# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n',
    ]);
    try {
      const dead = await metrics([
        '--scrape',
        live.url,
        '--scrape',
        'http://127.0.0.1:9/metrics',
        '--duration',
        '1h',
      ]);
      expectRefused(dead, 1, '--scrape http://127.0.0.1:9/metrics: ');
      const wrong = await metrics(['--scrape', other.url, '--duration', '1h']);
      expectRefused(wrong, 2, `--scrape ${other.url}: answered without engine gauges`);
    } finally {
      await Promise.all([live.close(), other.close()]);
    }
  });

  it('a target that answers the first scrape and then never again writes no report', async () => {
    const flaky = await serve((n) => (n === 1 ? [200, sglangMetrics(load)] : [500, 'engine crashed']));
    try {
      const r = await metrics(['--scrape', flaky.url, '--duration', '600ms', '--interval', '200ms']);
      expectRefused(
        r,
        1,
        /--scrape .*: answered the first scrape, then none of the \d+ after it \(first error: .*500/,
      );
    } finally {
      await flaky.close();
    }
  });
});

describe('vime-metrics: outputs', () => {
  it.each(['/proc/nope/r.json', '/proc/self/nope/r.json'])('--json %s fails at once', async (json) => {
    let stderr = '';
    const code = await main(['--trainer-log', 'train.log', '--json', json, '--html', join(dir, 'x.html')], {
      stdout: () => {},
      stderr: (t) => {
        stderr += t;
      },
      env: {},
      cwd: dir,
    });
    expect(code).toBe(2);
    // The folder the report would go in is named with the flag.
    expect(stderr).toMatch(new RegExp(`^vime-metrics: --json ${dirname(json)}: cannot create /proc/`, 'm'));
    expect(existsSync(join(dir, 'x.html'))).toBe(false);
  });

  it('--html below a file is a usage error', async () => {
    let stderr = '';
    const code = await main(
      ['--trainer-log', 'train.log', '--html', 'notes.txt/r.html', '--json', 'ok.json'],
      {
        stdout: () => {},
        stderr: (t) => {
          stderr += t;
        },
        env: {},
        cwd: dir,
      },
    );
    expect(code).toBe(2);
    expect(stderr).toContain(`--html notes.txt: ${join(dir, 'notes.txt')} is a file, not a directory`);
  });
});
