/**
 * SGLang scheduler "Decode batch" log lines (`scheduler_metrics_mixin.py log_decode_stats`), one per
 * `--decode-log-interval` decode steps. Both historical shapes are read:
 *
 *   [2026-08-21 10:00:00 TP0] Decode batch. #running-req: 233, #token: 370959, token usage: 0.82, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317,
 *   [2026-08-21 10:00:00 DP0 TP0] Decode batch [1234], #running-req: 233, #token: 370959, token usage: 0.82, accept len: 2.31, …, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317,
 *
 * plus hybrid-attention models (`#full token: N, full token usage: F, #swa token: …`), mamba fields,
 * `cpu graph`, and an optional `timestamp: ISO` field. Other lines are counted as ignored; a decode line
 * that cannot be read (cut off, or two processes' output interleaved on one line) is counted as
 * malformed. Nothing throws on bad input.
 */

export interface DecodeBatchSample {
  /** Milliseconds since the epoch (the log prefix is read as UTC), or `null` when the line has no time. */
  t: number | null;
  running: number;
  queued: number;
  /** Tokens held in the KV cache (the full-attention pool for hybrid models). */
  tokens: number;
  /** KV-cache usage, 0..1. */
  kvUsage: number;
  /** Generation throughput, tokens/s. */
  genThroughput: number;
  /** CUDA (or CPU) graph in use. */
  graph: boolean;
  /** Speculative decoding: mean accepted length, when logged. */
  acceptLen?: number;
  dpRank?: number;
  tpRank?: number;
  /** 1-based line number in the input. */
  line: number;
}

export interface DecodeLogResult {
  samples: DecodeBatchSample[];
  /** Lines read. */
  lines: number;
  /** Lines that were not decode-batch lines (other log output). */
  ignored: number;
  /** Decode-batch entries that could not be read. */
  malformed: number;
  /** Line numbers of the first malformed entries (at most 20), for error messages. */
  malformedLines: number[];
}

const MARK = 'Decode batch';
const MAX_REPORTED = 20;

interface ScanState extends DecodeLogResult {
  lastStamp: string;
  lastStampMs: number;
}

function newState(): ScanState {
  return {
    samples: [],
    lines: 0,
    ignored: 0,
    malformed: 0,
    malformedLines: [],
    lastStamp: '',
    lastStampMs: 0,
  };
}

/** Parse an unsigned decimal number starting at `i`; returns [value, end] or null when no digit is there. */
function numberAt(text: string, i: number, end: number): [number, number] | null {
  let mantissa = 0;
  let scale = 1;
  let digits = 0;
  let dot = false;
  let j = i;
  for (; j < end; j++) {
    const ch = text.charCodeAt(j);
    if (ch >= 48 && ch <= 57) {
      mantissa = mantissa * 10 + (ch - 48);
      if (dot) scale *= 10;
      digits++;
    } else if (ch === 46 && !dot) dot = true;
    else break;
  }
  if (digits === 0) return null;
  // Up to 15 significant digits the integer/power-of-ten division is correctly rounded, like parseFloat.
  return [digits <= 15 ? mantissa / scale : Number.parseFloat(text.slice(i, j)), j];
}

/** Find `key` in [from, end) and read the number after it. */
function field(text: string, key: string, from: number, end: number): [number, number] | null {
  const at = text.indexOf(key, from);
  if (at === -1 || at >= end) return null;
  return numberAt(text, at + key.length, end);
}

function digitsAt(text: string, i: number, n: number): number {
  let v = 0;
  for (let j = i; j < i + n; j++) {
    const d = text.charCodeAt(j) - 48;
    if (d < 0 || d > 9) return Number.NaN;
    v = v * 10 + d;
  }
  return v;
}

/** Read the `[YYYY-MM-DD HH:MM:SS DP0 TP0]` prefix that ends before `hit`, searching back to `from`. */
function readPrefix(
  text: string,
  from: number,
  hit: number,
  state: ScanState,
  sample: { t: number | null; dpRank?: number; tpRank?: number },
): void {
  const open = text.lastIndexOf('[', hit);
  if (open < from) return;
  const close = text.indexOf(']', open);
  if (close === -1 || close > hit) return;
  if (close - open >= 20 && text.charCodeAt(open + 5) === 45 && text.charCodeAt(open + 14) === 58) {
    const stamp = text.slice(open + 1, open + 20);
    if (stamp === state.lastStamp) sample.t = state.lastStampMs;
    else {
      const ms = Date.UTC(
        digitsAt(text, open + 1, 4),
        digitsAt(text, open + 6, 2) - 1,
        digitsAt(text, open + 9, 2),
        digitsAt(text, open + 12, 2),
        digitsAt(text, open + 15, 2),
        digitsAt(text, open + 18, 2),
      );
      if (!Number.isNaN(ms)) {
        state.lastStamp = stamp;
        state.lastStampMs = ms;
        sample.t = ms;
      }
    }
  }
  const tp = text.indexOf('TP', open);
  if (tp !== -1 && tp < close) {
    const v = numberAt(text, tp + 2, close);
    if (v) sample.tpRank = v[0];
  }
  const dp = text.indexOf('DP', open);
  if (dp !== -1 && dp < close) {
    const v = numberAt(text, dp + 2, close);
    if (v) sample.dpRank = v[0];
  }
}

function parseSegment(
  text: string,
  prefixFrom: number,
  hit: number,
  end: number,
  line: number,
  state: ScanState,
): boolean {
  // "Decode batch" then optional " [N]", then "." or ","
  let i = hit + MARK.length;
  if (text.charCodeAt(i) === 32 && text.charCodeAt(i + 1) === 91) {
    const close = text.indexOf(']', i);
    if (close === -1 || close >= end) return false;
    i = close + 1;
  }
  const sep = text.charCodeAt(i);
  if (sep !== 46 && sep !== 44) return false;
  const running = field(text, '#running-req: ', i, end);
  if (!running) return false;
  let pos = running[1];
  let tokens = field(text, '#token: ', pos, end);
  let usage: [number, number] | null = null;
  if (tokens) usage = field(text, 'token usage: ', tokens[1], end);
  else {
    tokens = field(text, '#full token: ', pos, end);
    if (tokens) usage = field(text, 'full token usage: ', tokens[1], end);
  }
  if (!tokens || !usage) return false;
  pos = usage[1];
  const accept = field(text, 'accept len: ', pos, end);
  let graphAt = text.indexOf('graph: ', pos);
  if (graphAt === -1 || graphAt >= end) return false;
  graphAt += 7;
  const graph = text.startsWith('True', graphAt);
  if (!graph && !text.startsWith('False', graphAt)) return false;
  const tput = field(text, 'gen throughput (token/s): ', graphAt, end);
  if (!tput) return false;
  const queue = field(text, '#queue-req: ', tput[1], end);
  if (!queue) return false;
  const sample: DecodeBatchSample = {
    t: null,
    running: running[0],
    queued: queue[0],
    tokens: tokens[0],
    kvUsage: usage[0],
    genThroughput: tput[0],
    graph,
    line,
  };
  if (accept) sample.acceptLen = accept[0];
  readPrefix(text, prefixFrom, hit, state, sample);
  const ts = text.indexOf('timestamp: ', i);
  if (ts !== -1 && ts < end) {
    const stop = text.indexOf(',', ts);
    const iso = text.slice(ts + 11, stop === -1 || stop > end ? end : stop).trim();
    const ms = Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(iso) ? iso : `${iso}Z`);
    if (!Number.isNaN(ms)) sample.t = ms;
  }
  state.samples.push(sample);
  return true;
}

function malformedAt(state: ScanState, line: number): void {
  state.malformed++;
  if (state.malformedLines.length < MAX_REPORTED) state.malformedLines.push(line);
}

/** Scan complete lines in `text[0..limit)`; `limit` is just past a newline or the text's end. */
function scan(text: string, limit: number, state: ScanState): void {
  let pos = 0;
  while (pos < limit) {
    const hit = text.indexOf(MARK, pos);
    const decodeLineStart = hit === -1 || hit >= limit ? limit : text.lastIndexOf('\n', hit) + 1;
    // Count the ordinary lines before the next decode line.
    while (pos < decodeLineStart) {
      const nl = text.indexOf('\n', pos);
      const next = nl === -1 || nl >= limit ? limit : nl + 1;
      state.lines++;
      state.ignored++;
      pos = next;
    }
    if (pos >= limit) break;
    const nl = text.indexOf('\n', hit);
    const lineEnd = nl === -1 || nl >= limit ? limit : nl;
    state.lines++;
    const line = state.lines;
    // Several entries on one line means interleaved output: each segment runs to the next mark.
    let segFrom = pos;
    let at = hit;
    while (at !== -1 && at < lineEnd) {
      const next = text.indexOf(MARK, at + MARK.length);
      const segEnd = next === -1 || next >= lineEnd ? lineEnd : next;
      if (!parseSegment(text, segFrom, at, segEnd, line, state)) malformedAt(state, line);
      segFrom = at + MARK.length;
      at = next === -1 || next >= lineEnd ? -1 : next;
    }
    pos = lineEnd + 1;
  }
}

function result(state: ScanState): DecodeLogResult {
  const { samples, lines, ignored, malformed, malformedLines } = state;
  return { samples, lines, ignored, malformed, malformedLines };
}

/**
 * Incremental parser for log streams: `push` chunks as they arrive (any split), then `end()`.
 * Only complete lines are parsed before `end()`.
 */
export class SglangDecodeLogParser {
  private readonly state = newState();
  private rest = '';

  push(chunk: string): this {
    const text = this.rest + chunk;
    const lastNl = text.lastIndexOf('\n');
    if (lastNl === -1) {
      this.rest = text;
      return this;
    }
    scan(text, lastNl + 1, this.state);
    this.rest = text.slice(lastNl + 1);
    return this;
  }

  end(): DecodeLogResult {
    if (this.rest.length > 0) scan(this.rest, this.rest.length, this.state);
    this.rest = '';
    return result(this.state);
  }
}

/** Parse SGLang log text (or its lines) into decode-batch samples, counting ignored and malformed lines. */
export function parseSglangDecodeLog(input: string | Iterable<string>): DecodeLogResult {
  const state = newState();
  if (typeof input === 'string') {
    scan(input, input.length, state);
    return result(state);
  }
  for (const line of input) {
    if (line.length > 0) scan(line, line.length, state);
    else {
      state.lines++;
      state.ignored++;
    }
  }
  return result(state);
}
