/** One sample line of the Prometheus text exposition format (0.0.4). */
export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
  timestampMs?: number | undefined;
}

/** Prometheus text parsed: its samples and type declarations. */
export interface PromParse {
  samples: PromSample[];
  /** `# TYPE` declarations by family name. */
  types: Record<string, string>;
  lines: number;
  malformed: number;
  /** Line numbers of the first malformed lines (at most 20). */
  malformedLines: number[];
}

const isNameStart = (c: number) => (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 58;
const isNameChar = (c: number) => isNameStart(c) || (c >= 48 && c <= 57);

function parseValue(token: string): number {
  switch (token) {
    case 'NaN':
      return Number.NaN;
    case '+Inf':
    case 'Inf':
      return Number.POSITIVE_INFINITY;
    case '-Inf':
      return Number.NEGATIVE_INFINITY;
    default: {
      const v = Number(token);
      return token.length > 0 && !Number.isNaN(v) ? v : Number.NaN;
    }
  }
}

/** Parse one sample line; returns null when it is not well-formed. */
function parseSampleLine(line: string): PromSample | null {
  const n = line.length;
  let i = 0;
  if (!isNameStart(line.charCodeAt(0))) return null;
  while (i < n && isNameChar(line.charCodeAt(i))) i++;
  const name = line.slice(0, i);
  const labels: Record<string, string> = {};
  if (line.charCodeAt(i) === 123 /* { */) {
    i++;
    for (;;) {
      while (line.charCodeAt(i) === 32) i++;
      if (line.charCodeAt(i) === 125 /* } */) {
        i++;
        break;
      }
      const start = i;
      while (i < n && isNameChar(line.charCodeAt(i))) i++;
      if (i === start || line.charCodeAt(i) !== 61 /* = */ || line.charCodeAt(i + 1) !== 34 /* " */)
        return null;
      const key = line.slice(start, i);
      i += 2;
      let value = '';
      let from = i;
      for (;;) {
        if (i >= n) return null;
        const c = line.charCodeAt(i);
        if (c === 34) break;
        if (c === 92 /* \ */) {
          value += line.slice(from, i);
          const e = line[i + 1];
          value += e === 'n' ? '\n' : (e ?? '');
          i += 2;
          from = i;
        } else i++;
      }
      labels[key] = value + line.slice(from, i);
      i++;
      while (line.charCodeAt(i) === 32) i++;
      if (line.charCodeAt(i) === 44 /* , */) i++;
      else if (line.charCodeAt(i) !== 125) return null;
    }
  }
  if (line.charCodeAt(i) !== 32 && line.charCodeAt(i) !== 9) return null;
  while (line.charCodeAt(i) === 32 || line.charCodeAt(i) === 9) i++;
  let end = i;
  while (end < n && line.charCodeAt(end) !== 32 && line.charCodeAt(end) !== 9) end++;
  const token = line.slice(i, end);
  const value = parseValue(token);
  if (Number.isNaN(value) && token !== 'NaN') return null;
  const sample: PromSample = { name, labels, value };
  const rest = line.slice(end).trim();
  if (rest.length > 0) {
    const ts = Number(rest);
    if (!Number.isFinite(ts)) return null;
    sample.timestampMs = ts;
  }
  return sample;
}

/**
 * Parse Prometheus text exposition (what SGLang and vLLM serve on `/metrics`). Malformed lines are
 * counted and skipped, never thrown.
 */
export function parsePrometheusText(text: string): PromParse {
  const out: PromParse = { samples: [], types: {}, lines: 0, malformed: 0, malformedLines: [] };
  let pos = 0;
  const n = text.length;
  while (pos < n) {
    let nl = text.indexOf('\n', pos);
    if (nl === -1) nl = n;
    let line = text.slice(pos, nl);
    pos = nl + 1;
    out.lines++;
    if (line.charCodeAt(line.length - 1) === 13) line = line.slice(0, -1);
    if (line.length === 0) continue;
    if (line.charCodeAt(0) === 35 /* # */) {
      if (line.startsWith('# TYPE ')) {
        const [family, type] = line.slice(7).trim().split(/\s+/);
        if (family && type) out.types[family] = type;
      }
      continue;
    }
    const sample = parseSampleLine(line.trimStart());
    if (sample) out.samples.push(sample);
    else {
      out.malformed++;
      if (out.malformedLines.length < 20) out.malformedLines.push(out.lines);
    }
  }
  return out;
}

/** Cumulative histogram buckets `[upperBound, count]`, ascending, the last one `+Inf`. */
export interface PromHistogram {
  buckets: Array<[number, number]>;
  count: number;
  sum: number;
}

/** Engine state read from one scrape. Values from several label sets (ranks, models) are combined. */
export interface EngineSnapshot {
  engine: 'sglang' | 'vllm' | 'unknown';
  /** Requests running (summed over ranks). */
  running: number | null;
  /** Requests queued / waiting (summed over ranks). */
  queued: number | null;
  /** KV-cache usage 0..1 (the highest rank). */
  kvUsage: number | null;
  /** Prefix-cache hit rate 0..1: SGLang's gauge, or vLLM's hits / queries counters. */
  prefixCacheHitRate: number | null;
  counters: {
    promptTokens: number | null;
    generationTokens: number | null;
    preemptions: number | null;
    prefixCacheQueries: number | null;
    prefixCacheHits: number | null;
    requestSuccess: number | null;
  };
  histograms: {
    /** Time to first token, seconds. */
    ttft: PromHistogram | null;
    /** Inter-token latency (time per output token), seconds. */
    itl: PromHistogram | null;
    /** End-to-end request latency, seconds. */
    e2e: PromHistogram | null;
  };
}

/** Metric names per engine, first match wins (newer names first). */
const NAMES = {
  sglang: {
    running: ['sglang:num_running_reqs'],
    queued: ['sglang:num_queue_reqs'],
    kvUsage: ['sglang:token_usage'],
    hitRate: ['sglang:cache_hit_rate'],
    promptTokens: ['sglang:prompt_tokens_total'],
    generationTokens: ['sglang:generation_tokens_total'],
    preemptions: [] as string[],
    prefixCacheQueries: [] as string[],
    prefixCacheHits: [] as string[],
    requestSuccess: [] as string[],
    ttft: ['sglang:time_to_first_token_seconds'],
    itl: ['sglang:inter_token_latency_seconds', 'sglang:time_per_output_token_seconds'],
    e2e: ['sglang:e2e_request_latency_seconds'],
  },
  vllm: {
    running: ['vllm:num_requests_running'],
    queued: ['vllm:num_requests_waiting'],
    kvUsage: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
    hitRate: ['vllm:gpu_prefix_cache_hit_rate'],
    promptTokens: ['vllm:prompt_tokens_total'],
    generationTokens: ['vllm:generation_tokens_total'],
    preemptions: ['vllm:num_preemptions_total'],
    prefixCacheQueries: ['vllm:prefix_cache_queries_total'],
    prefixCacheHits: ['vllm:prefix_cache_hits_total'],
    requestSuccess: ['vllm:request_success_total'],
    ttft: ['vllm:time_to_first_token_seconds'],
    itl: ['vllm:inter_token_latency_seconds', 'vllm:time_per_output_token_seconds'],
    e2e: ['vllm:e2e_request_latency_seconds'],
  },
};

function byName(samples: PromSample[]): Map<string, PromSample[]> {
  const map = new Map<string, PromSample[]>();
  for (const s of samples) {
    const list = map.get(s.name);
    if (list) list.push(s);
    else map.set(s.name, [s]);
  }
  return map;
}

function pick(map: Map<string, PromSample[]>, names: string[]): PromSample[] | undefined {
  for (const name of names) {
    const list = map.get(name);
    if (list) return list;
  }
  return undefined;
}

const sumOf = (list: PromSample[] | undefined) =>
  list ? list.reduce((s, x) => s + (Number.isNaN(x.value) ? 0 : x.value), 0) : null;
const maxOf = (list: PromSample[] | undefined) =>
  list
    ? list.reduce((m, x) => (Number.isNaN(x.value) ? m : Math.max(m, x.value)), Number.NEGATIVE_INFINITY)
    : null;

function histogram(map: Map<string, PromSample[]>, names: string[]): PromHistogram | null {
  for (const name of names) {
    const bucketSamples = map.get(`${name}_bucket`);
    if (!bucketSamples) continue;
    const byLe = new Map<number, number>();
    for (const s of bucketSamples) {
      const le = parseValue(s.labels.le ?? '');
      if (Number.isNaN(le)) continue;
      byLe.set(le, (byLe.get(le) ?? 0) + s.value);
    }
    const buckets = [...byLe.entries()].sort((a, b) => a[0] - b[0]);
    const last = buckets[buckets.length - 1];
    return {
      buckets,
      count: sumOf(map.get(`${name}_count`)) ?? (last ? last[1] : 0),
      sum: sumOf(map.get(`${name}_sum`)) ?? 0,
    };
  }
  return null;
}

/** Read running/queued requests, KV usage, prefix-cache hits, token counters and latency histograms. */
export function engineSnapshot(parsed: Pick<PromParse, 'samples'>): EngineSnapshot {
  const map = byName(parsed.samples);
  const engine =
    map.has('sglang:num_running_reqs') || map.has('sglang:token_usage')
      ? 'sglang'
      : map.has('vllm:num_requests_running') ||
          map.has('vllm:kv_cache_usage_perc') ||
          map.has('vllm:gpu_cache_usage_perc')
        ? 'vllm'
        : 'unknown';
  const names = engine === 'sglang' ? NAMES.sglang : NAMES.vllm;
  const queries = sumOf(pick(map, names.prefixCacheQueries));
  const hits = sumOf(pick(map, names.prefixCacheHits));
  const gaugeRate = maxOf(pick(map, names.hitRate));
  return {
    engine,
    running: sumOf(pick(map, names.running)),
    queued: sumOf(pick(map, names.queued)),
    kvUsage: maxOf(pick(map, names.kvUsage)),
    prefixCacheHitRate: queries !== null && hits !== null ? (queries > 0 ? hits / queries : null) : gaugeRate,
    counters: {
      promptTokens: sumOf(pick(map, names.promptTokens)),
      generationTokens: sumOf(pick(map, names.generationTokens)),
      preemptions: sumOf(pick(map, names.preemptions)),
      prefixCacheQueries: queries,
      prefixCacheHits: hits,
      requestSuccess: sumOf(pick(map, names.requestSuccess)),
    },
    histograms: {
      ttft: histogram(map, names.ttft),
      itl: histogram(map, names.itl),
      e2e: histogram(map, names.e2e),
    },
  };
}

/**
 * Quantile `q` (0..1) of a cumulative histogram, as Prometheus' `histogram_quantile` computes it: find
 * the bucket holding rank `q · count` and interpolate linearly inside it (the first bucket starts at 0;
 * a rank in the `+Inf` bucket returns the largest finite bound). `null` for an empty histogram.
 */
export function histogramQuantile(h: PromHistogram, q: number): number | null {
  const total = h.buckets.length ? h.buckets[h.buckets.length - 1]![1] : 0;
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevLe = 0;
  let prevCount = 0;
  for (const [le, count] of h.buckets) {
    if (count >= rank && count > prevCount) {
      if (le === Number.POSITIVE_INFINITY) return prevLe;
      return prevLe + ((le - prevLe) * (rank - prevCount)) / (count - prevCount);
    }
    if (le !== Number.POSITIVE_INFINITY) prevLe = le;
    prevCount = count;
  }
  return prevLe;
}

/**
 * Total increase of a counter over successive readings, handling resets (an engine restart makes the
 * counter start again from 0: a drop means the new reading is all new increase), like Prometheus'
 * `increase()` without extrapolation. `null` readings (metric absent) are skipped.
 */
export function counterIncrease(values: ReadonlyArray<number | null>): number {
  let total = 0;
  let prev: number | null = null;
  for (const v of values) {
    if (v === null || Number.isNaN(v)) continue;
    if (prev !== null) total += v >= prev ? v - prev : v;
    prev = v;
  }
  return total;
}

/** Bucket-wise increase between successive histogram readings (reset when the total count drops). */
export function histogramIncrease(readings: ReadonlyArray<PromHistogram | null>): PromHistogram | null {
  const present = readings.filter((h): h is PromHistogram => h !== null);
  if (present.length === 0) return null;
  if (present.length === 1) return present[0]!;
  const acc = new Map<number, number>();
  let count = 0;
  let sum = 0;
  for (let i = 1; i < present.length; i++) {
    const prev = present[i - 1]!;
    const cur = present[i]!;
    const reset = cur.count < prev.count;
    const before = new Map(prev.buckets);
    for (const [le, c] of cur.buckets) {
      const d = reset ? c : c - (before.get(le) ?? 0);
      acc.set(le, (acc.get(le) ?? 0) + Math.max(0, d));
    }
    count += reset ? cur.count : cur.count - prev.count;
    sum += reset ? cur.sum : cur.sum - prev.sum;
  }
  return { buckets: [...acc.entries()].sort((a, b) => a[0] - b[0]), count, sum };
}

/** One engine's readings over time. */
export interface ScrapeSeries {
  url: string;
  scrapes: Array<{ t: number; snapshot: EngineSnapshot }>;
  /** Failed attempts (the series keeps going). */
  errors: Array<{ t: number; message: string }>;
}

/** An engine's load over a scrape series, as the report draws it: scrapes that read a running count. */
export function loadPointsOf(
  scrapes: ScrapeSeries['scrapes'],
): Array<{ t: number; running: number; queued: number; kvUsage: number }> {
  return scrapes
    .filter((x) => x.snapshot.running !== null)
    .map((x) => ({
      t: x.t,
      running: x.snapshot.running ?? 0,
      queued: x.snapshot.queued ?? 0,
      kvUsage: x.snapshot.kvUsage ?? 0,
    }));
}

export interface LatencyQuantiles {
  p50: number | null;
  p90: number | null;
  p99: number | null;
  /** Requests observed in the window. */
  count: number;
}

/** What an engine did between its first and last scrape (counter resets handled). */
export interface EngineWindow {
  scrapes: number;
  /** Seconds between the first and last scrape. */
  seconds: number;
  promptTokens: number;
  generationTokens: number;
  preemptions: number;
  /** Prefix-cache hits / queries over the window (vLLM counters), else the mean of SGLang's gauge. */
  prefixCacheHitRate: number | null;
  /** Seconds, from the histogram buckets filled during the window. */
  ttft: LatencyQuantiles | null;
  itl: LatencyQuantiles | null;
  e2e: LatencyQuantiles | null;
}

function quantiles(h: PromHistogram | null): LatencyQuantiles | null {
  if (!h || h.count <= 0) return null;
  return {
    p50: histogramQuantile(h, 0.5),
    p90: histogramQuantile(h, 0.9),
    p99: histogramQuantile(h, 0.99),
    count: h.count,
  };
}

/** Token throughput, preemptions, prefix-cache hit rate and latency quantiles over a scrape series. */
export function engineWindow(scrapes: ReadonlyArray<{ t: number; snapshot: EngineSnapshot }>): EngineWindow {
  const snaps = scrapes.map((s) => s.snapshot);
  const counter = (pick: (c: EngineSnapshot['counters']) => number | null) =>
    counterIncrease(snaps.map((s) => pick(s.counters)));
  const queries = counter((c) => c.prefixCacheQueries);
  const hits = counter((c) => c.prefixCacheHits);
  const gauges = snaps.map((s) => s.prefixCacheHitRate).filter((v): v is number => v !== null);
  const first = scrapes[0];
  const last = scrapes[scrapes.length - 1];
  return {
    scrapes: scrapes.length,
    seconds: first && last ? (last.t - first.t) / 1000 : 0,
    promptTokens: counter((c) => c.promptTokens),
    generationTokens: counter((c) => c.generationTokens),
    preemptions: counter((c) => c.preemptions),
    prefixCacheHitRate:
      queries > 0 ? hits / queries : gauges.length ? gauges.reduce((a, b) => a + b, 0) / gauges.length : null,
    ttft: quantiles(histogramIncrease(snaps.map((s) => s.histograms.ttft))),
    itl: quantiles(histogramIncrease(snaps.map((s) => s.histograms.itl))),
    e2e: quantiles(histogramIncrease(snaps.map((s) => s.histograms.e2e))),
  };
}
