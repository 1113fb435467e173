/**
 * `pnpm bench metrics`: log and metrics parsing throughput of @vime/metrics against a plain
 * `split('\n')` + regex parser measured in the same run on the same text, both producing the same values.
 */
import { engineSnapshot, parsePrometheusText, parseSglangDecodeLog } from '@vime/metrics';
import { type Bench, fmt, type Table } from './harness.js';

const DECODE_LINES = 1_000_000;
const SCRAPES = 10_000;

const pad = (n: number) => String(n).padStart(2, '0');

/** SGLang decode-batch lines in both historical formats (plus speculative-decoding fields). */
function decodeLog(lines: number): string {
  const out: string[] = [];
  const t0 = Date.UTC(2026, 7, 21, 10, 0, 0);
  for (let i = 0; i < lines; i++) {
    const d = new Date(t0 + Math.floor(i / 4) * 1000);
    const stamp = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
    const running = (i * 7) % 240;
    const queue = (i * 13) % 130;
    const usage = ((i % 100) / 100).toFixed(2);
    const tput = ((i % 9000) + 0.25).toFixed(2);
    switch (i % 3) {
      case 0:
        out.push(
          `[${stamp} TP0] Decode batch. #running-req: ${running}, #token: ${running * 1500}, token usage: ${usage}, cuda graph: True, gen throughput (token/s): ${tput}, #queue-req: ${queue}, `,
        );
        break;
      case 1:
        out.push(
          `[${stamp} DP0 TP0] Decode batch [${i * 40}], #running-req: ${running}, #token: ${running * 1500}, token usage: ${usage}, cuda graph: True, gen throughput (token/s): ${tput}, #queue-req: ${queue}, `,
        );
        break;
      default:
        out.push(
          `[${stamp} TP0] Decode batch [${i * 40}], #running-req: ${running}, #token: ${running * 1500}, token usage: ${usage}, accept len: 2.31, accept rate: 0.77, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: False, gen throughput (token/s): ${tput}, #queue-req: ${queue}, `,
        );
    }
  }
  return `${out.join('\n')}\n`;
}

// The reference notes' tolerant regex, with the logger prefix for the timestamp.
const DECODE_RE =
  /^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]]*\] Decode batch(?: \[\d+\])?[.,] #running-req: (\d+), (?:#token: (\d+), token usage: ([\d.]+)|#full token: (\d+), full token usage: ([\d.]+)).*?(?:cuda|cpu) graph: (True|False), gen throughput \(token\/s\): ([\d.]+), #queue-req: (\d+)/;

function baselineDecode(text: string) {
  const samples = [];
  for (const line of text.split('\n')) {
    const m = DECODE_RE.exec(line);
    if (!m) continue;
    samples.push({
      t: Date.parse(`${m[1]!.replace(' ', 'T')}Z`),
      running: Number(m[2]),
      tokens: Number(m[3] ?? m[5]),
      kvUsage: Number.parseFloat(m[4] ?? m[6]!),
      graph: m[7] === 'True',
      genThroughput: Number.parseFloat(m[8]!),
      queued: Number(m[9]),
    });
  }
  return samples;
}

/** A vLLM V1 `/metrics` body of realistic size: gauges, counters and histograms for two engine cores. */
function vllmBody(seed: number): string {
  const lines: string[] = [];
  const model = 'Qwen/Qwen3-14B';
  const gauge = (name: string, v: (e: number) => number) => {
    lines.push(`# HELP ${name} ${name} help text.`, `# TYPE ${name} gauge`);
    for (const e of [0, 1]) lines.push(`${name}{engine="${e}",model_name="${model}"} ${v(e)}`);
  };
  const counter = (name: string, v: (e: number) => number) => {
    lines.push(`# HELP ${name} ${name} help text.`, `# TYPE ${name} counter`);
    for (const e of [0, 1])
      lines.push(`${name}_total{engine="${e}",model_name="${model}"} ${v(e).toFixed(1)}`);
    lines.push(`# TYPE ${name}_created gauge`);
    for (const e of [0, 1]) lines.push(`${name}_created{engine="${e}",model_name="${model}"} 1.7592e+09`);
  };
  const histogram = (name: string, bounds: number[]) => {
    lines.push(`# HELP ${name} ${name} help text.`, `# TYPE ${name} histogram`);
    for (const e of [0, 1]) {
      let c = 0;
      for (const le of [...bounds.map(String), '+Inf']) {
        c += (seed + le.length) % 7;
        lines.push(`${name}_bucket{engine="${e}",le="${le}",model_name="${model}"} ${c.toFixed(1)}`);
      }
      lines.push(`${name}_count{engine="${e}",model_name="${model}"} ${c.toFixed(1)}`);
      lines.push(`${name}_sum{engine="${e}",model_name="${model}"} ${(c * 0.37).toFixed(3)}`);
    }
  };
  gauge('vllm:num_requests_running', (e) => (seed + e) % 64);
  gauge('vllm:num_requests_waiting', (e) => (seed * 3 + e) % 20);
  gauge('vllm:kv_cache_usage_perc', (e) => ((seed + e) % 100) / 100);
  counter('vllm:prefix_cache_queries', (e) => 1000 * seed + e);
  counter('vllm:prefix_cache_hits', (e) => 400 * seed + e);
  counter('vllm:num_preemptions', () => 2);
  counter('vllm:prompt_tokens', (e) => 5000 * seed + e);
  counter('vllm:generation_tokens', (e) => 900 * seed + e);
  const latency = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
  ];
  histogram('vllm:time_to_first_token_seconds', latency);
  histogram('vllm:inter_token_latency_seconds', latency);
  histogram('vllm:e2e_request_latency_seconds', latency);
  histogram('vllm:request_queue_time_seconds', latency);
  histogram(
    'vllm:request_prompt_tokens',
    [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 32768],
  );
  return `${lines.join('\n')}\n`;
}

const SAMPLE_RE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(\S+))?$/;
const LABEL_RE = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

function baselineProm(text: string) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = SAMPLE_RE.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[2])
      for (const l of m[2].matchAll(LABEL_RE))
        labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

/**
 * Median CPU milliseconds (user + system, this process) of `a` and `b`, measured alternately
 * (a, b, a, b, …): CPU time rather than wall time, so that other processes on a shared machine do not
 * inflate either side.
 */
function timePair(a: () => unknown, b: () => unknown, iterations: number): [number, number] {
  const ta: number[] = [];
  const tb: number[] = [];
  a();
  b();
  for (let i = 0; i < iterations; i++) {
    for (const [fn, out] of [
      [a, ta],
      [b, tb],
    ] as const) {
      const c0 = process.cpuUsage();
      fn();
      const c = process.cpuUsage(c0);
      out.push((c.user + c.system) / 1000);
    }
  }
  const median = (xs: number[]) => xs.sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  return [median(ta), median(tb)];
}

function checksum(samples: ReadonlyArray<{ running?: number; queued?: number; value?: number }>): number {
  let s = 0;
  for (const x of samples)
    s += (x.running ?? 0) + (x.queued ?? 0) + (Number.isFinite(x.value) ? (x.value ?? 0) : 0);
  return s;
}

const bench: Bench = {
  name: 'metrics',
  description: `parse ${DECODE_LINES.toLocaleString('en')} SGLang decode-batch lines and ${SCRAPES.toLocaleString('en')} Prometheus scrapes vs split + regex`,
  async run(): Promise<Table[]> {
    const log = decodeLog(DECODE_LINES);
    const ours = parseSglangDecodeLog(log);
    const base = baselineDecode(log);
    if (
      ours.samples.length !== DECODE_LINES ||
      base.length !== DECODE_LINES ||
      checksum(ours.samples) !== checksum(base)
    ) {
      throw new Error('decode parsers disagree; the comparison would be meaningless');
    }
    const [ourMs, baseMs] = timePair(
      () => parseSglangDecodeLog(log),
      () => baselineDecode(log),
      5,
    );
    const decodeRatio = baseMs / ourMs;

    const bodies = Array.from({ length: 50 }, (_, i) => vllmBody(i));
    const linesPerScrape = bodies[0]!.split('\n').length - 1;
    for (const body of bodies) {
      const a = parsePrometheusText(body);
      if (a.malformed !== 0 || checksum(a.samples) !== checksum(baselineProm(body))) {
        throw new Error('Prometheus parsers disagree; the comparison would be meaningless');
      }
    }
    const scrapeAll = (fn: (text: string) => unknown) => () => {
      for (let i = 0; i < SCRAPES; i++) fn(bodies[i % bodies.length]!);
    };
    const [promMs, promBaseMs] = timePair(scrapeAll(parsePrometheusText), scrapeAll(baselineProm), 5);
    const [fullMs, fullBaseMs] = timePair(
      scrapeAll((t) => engineSnapshot(parsePrometheusText(t))),
      scrapeAll(baselineProm),
      3,
    );
    const promRatio = promBaseMs / promMs;
    const promLines = SCRAPES * linesPerScrape;

    return [
      {
        title: `SGLang decode-batch log: ${DECODE_LINES.toLocaleString('en')} lines (${fmt.bytes(log.length)})`,
        columns: ['parser', 'CPU time', 'lines/s', 'vs baseline'],
        rows: [
          [
            'parseSglangDecodeLog',
            fmt.ms(ourMs),
            fmt.rate(DECODE_LINES / (ourMs / 1000), 'lines'),
            fmt.ratio(decodeRatio),
          ],
          [
            'split + regex (baseline)',
            fmt.ms(baseMs),
            fmt.rate(DECODE_LINES / (baseMs / 1000), 'lines'),
            fmt.ratio(1),
          ],
        ],
        checks: [
          { target: 'faster than split + regex', measured: fmt.ratio(decodeRatio), ok: decodeRatio >= 1 },
        ],
        notes: [
          'Same readings from both (checked before timing), timestamps included; ours stores them column-wise',
          '(typed arrays), the baseline as one object per line. CPU time, measured alternately, median of 5.',
        ],
      },
      {
        title: `Prometheus /metrics: ${SCRAPES.toLocaleString('en')} vLLM scrapes (${linesPerScrape} lines each)`,
        columns: ['parser', 'CPU time', 'lines/s', 'scrapes/s', 'vs baseline'],
        rows: [
          [
            'parsePrometheusText',
            fmt.ms(promMs),
            fmt.rate(promLines / (promMs / 1000), 'lines'),
            fmt.rate(SCRAPES / (promMs / 1000), 'scrapes'),
            fmt.ratio(promRatio),
          ],
          [
            'parse + engineSnapshot',
            fmt.ms(fullMs),
            fmt.rate(promLines / (fullMs / 1000), 'lines'),
            fmt.rate(SCRAPES / (fullMs / 1000), 'scrapes'),
            fmt.ratio(fullBaseMs / fullMs),
          ],
          [
            'split + regex (baseline)',
            fmt.ms(promBaseMs),
            fmt.rate(promLines / (promBaseMs / 1000), 'lines'),
            fmt.rate(SCRAPES / (promBaseMs / 1000), 'scrapes'),
            fmt.ratio(1),
          ],
        ],
        checks: [
          { target: 'parser faster than split + regex', measured: fmt.ratio(promRatio), ok: promRatio >= 1 },
        ],
        notes: [
          'Same samples from both (checked); the snapshot row adds engine extraction and histogram assembly.',
        ],
      },
    ];
  },
};

export default bench;
