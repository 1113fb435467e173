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
  acceptLen: number | null;
  /** Data-parallel and tensor-parallel rank from the log prefix, when present. */
  dpRank: number | null;
  tpRank: number | null;
  /** 1-based line number in the input. */
  line: number;
}

/**
 * Decode-batch readings stored column-wise (typed arrays, one entry per reading, in log order): a
 * million readings take 60 MB instead of a million objects. Absent values are `NaN` (t, acceptLen) or
 * -1 (ranks).
 */
export interface DecodeColumns {
  t: Float64Array;
  running: Float64Array;
  queued: Float64Array;
  tokens: Float64Array;
  kvUsage: Float64Array;
  genThroughput: Float64Array;
  acceptLen: Float64Array;
  graph: Uint8Array;
  dpRank: Int32Array;
  tpRank: Int32Array;
  line: Int32Array;
}

/** What parsing an SGLang decode log found. */
export interface DecodeLogResult {
  /** Readings parsed. */
  count: number;
  columns: DecodeColumns;
  /** The readings as objects (built on first access). */
  readonly samples: DecodeBatchSample[];
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

/** Growable column store. */
class ColumnBuilder {
  length = 0;
  cols: DecodeColumns = ColumnBuilder.allocate(1024);

  static allocate(n: number): DecodeColumns {
    return {
      t: new Float64Array(n),
      running: new Float64Array(n),
      queued: new Float64Array(n),
      tokens: new Float64Array(n),
      kvUsage: new Float64Array(n),
      genThroughput: new Float64Array(n),
      acceptLen: new Float64Array(n),
      graph: new Uint8Array(n),
      dpRank: new Int32Array(n),
      tpRank: new Int32Array(n),
      line: new Int32Array(n),
    };
  }

  /** Make room for one more row and return its index. */
  next(): number {
    if (this.length === this.cols.t.length) {
      const bigger = ColumnBuilder.allocate(this.length * 2);
      for (const key of Object.keys(bigger) as Array<keyof DecodeColumns>) {
        (bigger[key] as Float64Array).set(this.cols[key] as Float64Array);
      }
      this.cols = bigger;
    }
    return this.length++;
  }

  finish(): DecodeColumns {
    const out = {} as Record<keyof DecodeColumns, unknown>;
    for (const key of Object.keys(this.cols) as Array<keyof DecodeColumns>)
      out[key] = this.cols[key].slice(0, this.length);
    return out as DecodeColumns;
  }
}

class DecodeLog implements DecodeLogResult {
  #samples: DecodeBatchSample[] | undefined;
  constructor(
    readonly count: number,
    readonly columns: DecodeColumns,
    readonly lines: number,
    readonly ignored: number,
    readonly malformed: number,
    readonly malformedLines: number[],
  ) {}

  get samples(): DecodeBatchSample[] {
    if (!this.#samples) {
      const c = this.columns;
      const orNull = (v: number) => (Number.isNaN(v) || v < 0 ? null : v);
      this.#samples = Array.from({ length: this.count }, (_, i) => ({
        t: orNull(c.t[i]!),
        running: c.running[i]!,
        queued: c.queued[i]!,
        tokens: c.tokens[i]!,
        kvUsage: c.kvUsage[i]!,
        genThroughput: c.genThroughput[i]!,
        graph: c.graph[i] === 1,
        acceptLen: orNull(c.acceptLen[i]!),
        dpRank: orNull(c.dpRank[i]!),
        tpRank: orNull(c.tpRank[i]!),
        line: c.line[i]!,
      }));
    }
    return this.#samples;
  }
}

interface ScanState {
  rows: ColumnBuilder;
  lines: number;
  ignored: number;
  malformed: number;
  malformedLines: number[];
  lastMinute: string;
  lastMinuteMs: number;
}

function newState(): ScanState {
  return {
    rows: new ColumnBuilder(),
    lines: 0,
    ignored: 0,
    malformed: 0,
    malformedLines: [],
    lastMinute: '',
    lastMinuteMs: 0,
  };
}

/** End of the last number read by `numberAt` (a module cursor instead of a tuple: no garbage per field). */
let cursor = 0;

/** Parse an unsigned decimal number starting at `i`; `NaN` when no digit is there. Sets `cursor`. */
function numberAt(text: string, i: number, end: number): number {
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
  cursor = j;
  if (digits === 0) return Number.NaN;
  // Up to 15 significant digits the integer/power-of-ten division is correctly rounded, like parseFloat.
  return digits <= 15 ? mantissa / scale : Number.parseFloat(text.slice(i, j));
}

/** Find `key` in [from, end) and read the number after it (`NaN` when absent). Sets `cursor`. */
function field(text: string, key: string, from: number, end: number): number {
  const at = text.indexOf(key, from);
  if (at === -1 || at >= end) return Number.NaN;
  return numberAt(text, at + key.length, end);
}

/**
 * The number after `key`: read at `at` when the line has the usual layout (`sep` then `key`), else
 * searched for in [at, end). Sets `cursor`.
 */
function next(text: string, sep: string, key: string, at: number, end: number): number {
  if (text.startsWith(sep, at) && text.startsWith(key, at + sep.length)) {
    return numberAt(text, at + sep.length + key.length, end);
  }
  return field(text, key, at, end);
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

/** What `readPrefix` found (module variables: no object per line). */
let prefixT = Number.NaN;
let prefixDp = -1;
let prefixTp = -1;

/** Read the `[YYYY-MM-DD HH:MM:SS DP0 TP0]` prefix that ends before `hit`, searching back to `from`. */
function readPrefix(text: string, from: number, hit: number, state: ScanState): void {
  prefixT = Number.NaN;
  prefixDp = -1;
  prefixTp = -1;
  // The last '[' before the mark: usually the first character of the line, else a few dozen back.
  let open = hit - 1;
  if (text.charCodeAt(from) === 91 && hit - from < 48) open = from;
  else while (open >= from && text.charCodeAt(open) !== 91) open--;
  if (open < from) return;
  const close = text.indexOf(']', open);
  if (close === -1 || close > hit) return;
  if (close - open >= 20 && text.charCodeAt(open + 5) === 45 && text.charCodeAt(open + 14) === 58) {
    const seconds = digitsAt(text, open + 18, 2);
    // Readings come several per second: reuse the minute's epoch value while the minute is unchanged.
    if (state.lastMinute.length === 16 && text.startsWith(state.lastMinute, open + 1)) {
      prefixT = state.lastMinuteMs + seconds * 1000;
    } else {
      const ms = Date.UTC(
        digitsAt(text, open + 1, 4),
        digitsAt(text, open + 6, 2) - 1,
        digitsAt(text, open + 9, 2),
        digitsAt(text, open + 12, 2),
        digitsAt(text, open + 15, 2),
      );
      if (!Number.isNaN(ms) && !Number.isNaN(seconds)) {
        state.lastMinute = text.slice(open + 1, open + 17);
        state.lastMinuteMs = ms;
        prefixT = ms + seconds * 1000;
      }
    }
  }
  // Rank tags after the time: " DP0 TP0", " PP0 TP1", …
  for (let j = open + 3; j + 1 < close; j++) {
    if (text.charCodeAt(j) !== 80 /* P */ || text.charCodeAt(j - 2) !== 32) continue;
    const kind = text.charCodeAt(j - 1);
    if (kind !== 84 /* T */ && kind !== 68 /* D */) continue;
    const v = numberAt(text, j + 1, close);
    if (Number.isNaN(v)) continue;
    if (kind === 84) prefixTp = v;
    else prefixDp = v;
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
  // Each field is first looked for where the usual layout puts it (right after the previous one), and
  // searched for only when the line is laid out differently.
  const running = next(text, ' ', '#running-req: ', i + 1, end);
  if (Number.isNaN(running)) return false;
  const afterRunning = cursor;
  let tokens = next(text, ', ', '#token: ', afterRunning, end);
  let kvUsage = Number.NaN;
  if (!Number.isNaN(tokens)) kvUsage = next(text, ', ', 'token usage: ', cursor, end);
  else {
    tokens = field(text, '#full token: ', afterRunning, end);
    if (!Number.isNaN(tokens)) kvUsage = field(text, 'full token usage: ', cursor, end);
  }
  if (Number.isNaN(kvUsage)) return false;
  const afterPool = cursor;
  let graphAt: number;
  let acceptLen = Number.NaN;
  if (text.startsWith(', cuda graph: ', afterPool)) graphAt = afterPool + 14;
  else {
    graphAt = text.indexOf('graph: ', afterPool);
    if (graphAt === -1 || graphAt >= end) return false;
    graphAt += 7;
    const acceptAt = text.indexOf('accept len: ', afterPool);
    if (acceptAt !== -1 && acceptAt < graphAt) acceptLen = numberAt(text, acceptAt + 12, end);
  }
  const graph = text.startsWith('True', graphAt);
  if (!graph && !text.startsWith('False', graphAt)) return false;
  const genThroughput = next(text, ', ', 'gen throughput (token/s): ', graphAt + (graph ? 4 : 5), end);
  if (Number.isNaN(genThroughput)) return false;
  const queued = next(text, ', ', '#queue-req: ', cursor, end);
  if (Number.isNaN(queued)) return false;
  const tail = cursor;
  readPrefix(text, prefixFrom, hit, state);
  let t = prefixT;
  // Releases that log a timestamp field append it after #queue-req.
  const ts = text.indexOf('timestamp: ', tail);
  if (ts !== -1 && ts < end) {
    const stop = text.indexOf(',', ts);
    const ms = isoTime(text.slice(ts + 11, stop === -1 || stop > end ? end : stop));
    if (!Number.isNaN(ms)) t = ms;
  }
  pushRow(state, t, running, queued, tokens, kvUsage, genThroughput, acceptLen, graph, line);
  return true;
}

function malformedAt(state: ScanState, line: number): void {
  state.malformed++;
  if (state.malformedLines.length < MAX_REPORTED) state.malformedLines.push(line);
}

function pushRow(
  state: ScanState,
  t: number,
  running: number,
  queued: number,
  tokens: number,
  kvUsage: number,
  genThroughput: number,
  acceptLen: number,
  graph: boolean,
  line: number,
): void {
  const rows = state.rows;
  const r = rows.next();
  const c = rows.cols;
  c.t[r] = t;
  c.running[r] = running;
  c.queued[r] = queued;
  c.tokens[r] = tokens;
  c.kvUsage[r] = kvUsage;
  c.genThroughput[r] = genThroughput;
  c.acceptLen[r] = acceptLen;
  c.graph[r] = graph ? 1 : 0;
  c.dpRank[r] = prefixDp;
  c.tpRank[r] = prefixTp;
  c.line[r] = line;
}

function isoTime(iso: string): number {
  const trimmed = iso.trim();
  return Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(trimmed) ? trimmed : `${trimmed}Z`);
}

/**
 * The usual layouts (either historical head, the plain KV pool, optional speculative fields, optional
 * trailing timestamp), checked in one sticky `test` at the mark: no captures, so nothing is allocated.
 */
const USUAL =
  /Decode batch(?: \[\d+\])?[.,] #running-req: \d+, #token: \d+, token usage: [\d.]+, (?:accept len: [\d.]+, [^[\n]*?)?(?:cuda|cpu) graph: (?:True|False), gen throughput \(token\/s\): [\d.]+, #queue-req: \d+/y;

/**
 * Read one entry in the usual layout straight from the text at `hit`: the layout is checked first, so
 * the numbers are read at known offsets without slicing or searching. False sends the line down the
 * tolerant path.
 */
function usualEntry(
  text: string,
  lineStart: number,
  hit: number,
  lineEnd: number,
  line: number,
  state: ScanState,
): boolean {
  USUAL.lastIndex = hit;
  if (!USUAL.test(text) || USUAL.lastIndex > lineEnd) return false;
  let i = text.indexOf('#running-req: ', hit + MARK.length);
  const running = numberAt(text, i + 14, lineEnd);
  const tokens = numberAt(text, cursor + 10, lineEnd); // ", #token: "
  const kvUsage = numberAt(text, cursor + 15, lineEnd); // ", token usage: "
  let acceptLen = Number.NaN;
  i = cursor + 2;
  if (text.charCodeAt(i) === 97 /* accept len */) {
    acceptLen = numberAt(text, i + 12, lineEnd);
    i = text.indexOf(' graph: ', cursor) + 8;
  } else i += text.charCodeAt(i + 1) === 117 /* cuda */ ? 12 : 11;
  const graph = text.charCodeAt(i) === 84; // True | False
  const genThroughput = numberAt(text, i + (graph ? 4 : 5) + 28, lineEnd); // ", gen throughput (token/s): "
  const queued = numberAt(text, cursor + 14, lineEnd); // ", #queue-req: "
  let t = Number.NaN;
  if (text.startsWith(', timestamp: ', cursor)) {
    const from = cursor + 13;
    const stop = text.indexOf(',', from);
    t = isoTime(text.slice(from, stop === -1 || stop > lineEnd ? lineEnd : stop));
  }
  readPrefix(text, lineStart, hit, state);
  if (Number.isNaN(t)) t = prefixT;
  pushRow(state, t, running, queued, tokens, kvUsage, genThroughput, acceptLen, graph, line);
  return true;
}

/** Scan complete lines in `text[0..limit)`; `limit` is just past a newline or the text's end. */
function scan(text: string, limit: number, state: ScanState): void {
  let pos = 0;
  let hit = text.indexOf(MARK, 0);
  while (pos < limit) {
    if (hit >= limit) hit = -1;
    // Count the ordinary lines before the line holding the next mark (or all that remain).
    let nl = text.indexOf('\n', pos);
    while (nl !== -1 && nl < limit && (hit === -1 || nl < hit)) {
      state.lines++;
      state.ignored++;
      pos = nl + 1;
      nl = text.indexOf('\n', pos);
    }
    if (hit === -1) {
      if (pos < limit) {
        state.lines++;
        state.ignored++;
      }
      return;
    }
    const lineEnd = nl === -1 || nl >= limit ? limit : nl;
    state.lines++;
    const lineNo = state.lines;
    let nextHit = text.indexOf(MARK, hit + MARK.length);
    const single = nextHit === -1 || nextHit > lineEnd;
    if (!single || !usualEntry(text, pos, hit, lineEnd, lineNo, state)) {
      // Tolerant path on the line alone, so that searches for absent fields stop at its end. Several
      // entries on one line means interleaved output: each segment runs to the next mark.
      const line = text.slice(pos, lineEnd);
      let segFrom = 0;
      let at = hit - pos;
      while (at !== -1) {
        const next = line.indexOf(MARK, at + MARK.length);
        const segEnd = next === -1 ? line.length : next;
        if (!parseSegment(line, segFrom, at, segEnd, lineNo, state)) malformedAt(state, lineNo);
        segFrom = at + MARK.length;
        at = next;
      }
      if (!single) nextHit = text.indexOf(MARK, lineEnd);
    }
    pos = lineEnd + 1;
    hit = nextHit;
  }
}

function result(state: ScanState): DecodeLogResult {
  const { rows, lines, ignored, malformed, malformedLines } = state;
  return new DecodeLog(rows.length, rows.finish(), lines, ignored, malformed, malformedLines);
}

/**
 * Incremental parser for log streams: `push` chunks as they arrive (any split), then `end()`.
 * Only complete lines are parsed before `end()`.
 */
export class SglangDecodeLogParser {
  private readonly state = newState();
  private rest = '';

  /** Parse the next chunk of the log. */
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

  /** Finish: parse what is left and return the result. */
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
