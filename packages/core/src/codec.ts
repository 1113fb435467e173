/**
 * The sample batch wire format: one msgpack array of maps, each map the exact dict slime's
 * `Sample.to_dict()` produces. A plain msgpack library in Python decodes it into a list of dicts that
 * `Sample.from_dict` accepts. Per-token arrays are written with fixed element encodings so they
 * round-trip bit for bit: token ids and masks as msgpack ints, log probs as float32 (an exact +0.0, the
 * placeholder on masked tokens, as the one-byte integer 0), slime's float
 * scalars (`reward`, `non_generation_time`) as float64. Everything else is written by @msgpack/msgpack.
 */
import { Decoder, Encoder } from '@msgpack/msgpack';
import { ConfigError, describeValue, ValidationError, VimeError } from './errors.js';
import { createSample, type Sample, SLIME_SAMPLE_FIELDS, SlimeSampleDictSchema } from './sample.js';
import { parseWith } from './validate.js';

const INT_FIELDS = new Set(['tokens', 'loss_mask', 'rollout_top_p_token_ids', 'rollout_top_p_token_offsets']);
const F32_FIELDS = new Set(['rollout_log_probs', 'teacher_log_probs']);
const F64_FIELDS = new Set(['reward', 'non_generation_time']);

// One encoder for every generic value: a fresh one per call allocates (and discards) a 2 KiB buffer.
const encoder = new Encoder({ ignoreUndefined: true });
const encodeValue = (value: unknown): Uint8Array => encoder.encode(value);
const keyBytes = new Map<string, Uint8Array>();
function encodedKey(key: string): Uint8Array {
  let bytes = keyBytes.get(key);
  if (!bytes) {
    bytes = encodeValue(key);
    if (keyBytes.size < 1024) keyBytes.set(key, bytes);
  }
  return bytes;
}

class Writer {
  readonly bytes: Uint8Array;
  readonly view: DataView;
  pos = 0;
  constructor(size: number) {
    this.bytes = new Uint8Array(size);
    this.view = new DataView(this.bytes.buffer);
  }
  raw(b: Uint8Array): void {
    this.bytes.set(b, this.pos);
    this.pos += b.length;
  }
  header(len: number, fix: number, fixMax: number, c16: number, c32: number): void {
    if (len <= fixMax) this.bytes[this.pos++] = fix | len;
    else if (len < 0x10000) {
      this.bytes[this.pos++] = c16;
      this.view.setUint16(this.pos, len);
      this.pos += 2;
    } else {
      this.bytes[this.pos++] = c32;
      this.view.setUint32(this.pos, len);
      this.pos += 4;
    }
  }
  int(v: number): void {
    const b = this.bytes;
    if (v >= 0) {
      if (v < 0x80) b[this.pos++] = v;
      else if (v < 0x100) {
        b[this.pos++] = 0xcc;
        b[this.pos++] = v;
      } else if (v < 0x10000) {
        b[this.pos++] = 0xcd;
        b[this.pos++] = v >>> 8;
        b[this.pos++] = v & 0xff;
      } else {
        b[this.pos++] = 0xce;
        this.view.setUint32(this.pos, v);
        this.pos += 4;
      }
    } else if (v >= -32) b[this.pos++] = v & 0xff;
    else {
      b[this.pos++] = 0xd2;
      this.view.setInt32(this.pos, v);
      this.pos += 4;
    }
  }
  intArray(a: Int32Array | Uint8Array): void {
    this.header(a.length, 0x90, 15, 0xdc, 0xdd);
    for (let i = 0; i < a.length; i++) this.int(a[i]!);
  }
  f32Array(a: Float32Array): void {
    this.header(a.length, 0x90, 15, 0xdc, 0xdd);
    const view = this.view;
    let pos = this.pos;
    for (let i = 0; i < a.length; i++) {
      const x = a[i]!;
      if (x === 0 && 1 / x > 0) {
        this.bytes[pos++] = 0; // +0.0, the masked tokens' placeholder: one byte instead of five
      } else {
        this.bytes[pos] = 0xca;
        view.setFloat32(pos + 1, x);
        pos += 5;
      }
    }
    this.pos = pos;
  }
  f64(v: number): void {
    this.bytes[this.pos++] = 0xcb;
    this.view.setFloat64(this.pos, v);
    this.pos += 8;
  }
}

type FieldValue =
  | { kind: 'int' | 'f32'; value: Int32Array | Uint8Array | Float32Array }
  | { kind: 'f64'; value: number }
  | { kind: 'raw'; value: Uint8Array };

/** Encode a batch of samples (see the module comment for the layout). */
export function encodeSamples(samples: ReadonlyArray<Sample>): Uint8Array {
  let size = 5;
  const planned: Array<Array<[Uint8Array, FieldValue]>> = [];
  for (let i = 0; i < samples.length; i++) {
    const sample = samples[i]!;
    const fields: Array<[Uint8Array, FieldValue]> = [];
    const add = (key: string, value: FieldValue) => {
      const k = encodedKey(key);
      size += k.length;
      if (value.kind === 'raw') size += value.value.length;
      else if (value.kind === 'f64') size += 9;
      else size += 5 + value.value.length * 5;
      fields.push([k, value]);
    };
    for (const [key, v] of Object.entries(sample.extra ?? {})) {
      if (!(SLIME_SAMPLE_FIELDS as readonly string[]).includes(key)) add(key, raw(v, i, key));
    }
    for (const key of SLIME_SAMPLE_FIELDS) {
      const v = sample[key];
      if (v === undefined)
        throw new ValidationError(`[${i}].${key}`, 'missing field; build samples with createSample()');
      if (INT_FIELDS.has(key) && v !== null) {
        if (!(v instanceof Int32Array || v instanceof Uint8Array)) {
          throw new ValidationError(
            `[${i}].${key}`,
            `expected Int32Array or Uint8Array, found ${describeValue(v)}`,
          );
        }
        add(key, { kind: 'int', value: v });
      } else if (F32_FIELDS.has(key) && v !== null) {
        if (!(v instanceof Float32Array)) {
          throw new ValidationError(`[${i}].${key}`, `expected Float32Array, found ${describeValue(v)}`);
        }
        add(key, { kind: 'f32', value: v });
      } else if (F64_FIELDS.has(key) && typeof v === 'number') add(key, { kind: 'f64', value: v });
      else add(key, raw(v, i, key));
    }
    planned.push(fields);
  }
  const w = new Writer(size + samples.length * 5);
  w.header(samples.length, 0x90, 15, 0xdc, 0xdd);
  for (const fields of planned) {
    w.header(fields.length, 0x80, 15, 0xde, 0xdf);
    for (const [key, value] of fields) {
      w.raw(key);
      if (value.kind === 'raw') w.raw(value.value);
      else if (value.kind === 'f64') w.f64(value.value);
      else if (value.kind === 'f32') w.f32Array(value.value as Float32Array);
      else w.intArray(value.value as Int32Array);
    }
  }
  return w.bytes.subarray(0, w.pos);
}

const PROTO = '__proto__';
const PROTO_FIX = `the key "${PROTO}" cannot cross the sample wire (JavaScript would read it as an object's prototype); rename it`;

/**
 * Where a value holds an own `__proto__` key (`.a[2].__proto__`), if it does: @msgpack/msgpack refuses
 * to decode one, and a plain object given one gets a new prototype instead of a field.
 */
function protoKeyPath(value: unknown, path = ''): string | undefined {
  if (typeof value !== 'object' || value === null || ArrayBuffer.isView(value)) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = protoKeyPath(value[i], `${path}[${i}]`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (Object.hasOwn(value, PROTO)) return `${path}.${PROTO}`;
  for (const [k, v] of Object.entries(value)) {
    const found = protoKeyPath(v, `${path}.${k}`);
    if (found !== undefined) return found;
  }
  return undefined;
}

function raw(value: unknown, index: number, key: string): FieldValue {
  const proto = key === PROTO ? '' : protoKeyPath(value);
  if (proto !== undefined) throw new ValidationError(`[${index}].${key}${proto}`, PROTO_FIX);
  try {
    return { kind: 'raw', value: encodeValue(value) };
  } catch (cause) {
    throw new ValidationError(`[${index}].${key}`, `cannot encode ${describeValue(value)} as msgpack`, {
      cause,
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Decoding

const ScalarDictSchema = SlimeSampleDictSchema.omit({
  tokens: true,
  loss_mask: true,
  rollout_log_probs: true,
  rollout_top_p_token_ids: true,
  rollout_top_p_token_offsets: true,
  teacher_log_probs: true,
}).partial();

class Reader {
  pos = 0;
  /** Per-token array elements still allowed (`maxElements`). */
  elementBudget = Number.POSITIVE_INFINITY;
  readonly view: DataView;
  readonly decoder = new Decoder();
  readonly text = new TextDecoder('utf-8', { fatal: true });
  constructor(readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  fail(path: string, expected: string): never {
    throw new ValidationError(path, `expected ${expected} at byte ${this.pos}`, { code: 'decode_error' });
  }
  need(n: number, path: string): void {
    if (this.pos + n > this.bytes.length) this.fail(path, `${n} more bytes (input is truncated)`);
  }
  u8(path: string): number {
    this.need(1, path);
    return this.bytes[this.pos++]!;
  }
  /** Length of an array (`0x90`) or map (`0x80`) header, or -1 for nil. */
  container(path: string, fix: number, c16: number, c32: number, what: string): number {
    const b = this.u8(path);
    if (b === 0xc0) return -1;
    if ((b & 0xf0) === fix) return b & 0x0f;
    if (b === c16) {
      this.need(2, path);
      const n = this.view.getUint16(this.pos);
      this.pos += 2;
      return n;
    }
    if (b === c32) {
      this.need(4, path);
      const n = this.view.getUint32(this.pos);
      this.pos += 4;
      return n;
    }
    this.pos--;
    return this.fail(path, what);
  }
  string(path: string): string {
    const b = this.u8(path);
    let n: number;
    if ((b & 0xe0) === 0xa0) n = b & 0x1f;
    else if (b === 0xd9) n = this.u8(path);
    else if (b === 0xda) {
      this.need(2, path);
      n = this.view.getUint16(this.pos);
      this.pos += 2;
    } else if (b === 0xdb) {
      this.need(4, path);
      n = this.view.getUint32(this.pos);
      this.pos += 4;
    } else {
      this.pos--;
      return this.fail(path, 'a string key');
    }
    this.need(n, path);
    try {
      return this.text.decode(this.bytes.subarray(this.pos, this.pos + n));
    } catch (cause) {
      throw new ValidationError(path, 'key is not valid UTF-8', { code: 'decode_error', cause });
    } finally {
      this.pos += n;
    }
  }
  /** Any msgpack number (ints of every width, float32, float64). */
  number(path: string): number {
    const b = this.u8(path);
    if (b < 0x80) return b;
    if (b >= 0xe0) return b - 0x100;
    const v = this.view;
    let out: number;
    switch (b) {
      case 0xca:
        this.need(4, path);
        out = v.getFloat32(this.pos);
        this.pos += 4;
        return out;
      case 0xcb:
        this.need(8, path);
        out = v.getFloat64(this.pos);
        this.pos += 8;
        return out;
      case 0xcc:
        return this.u8(path);
      case 0xcd:
        this.need(2, path);
        out = v.getUint16(this.pos);
        this.pos += 2;
        return out;
      case 0xce:
        this.need(4, path);
        out = v.getUint32(this.pos);
        this.pos += 4;
        return out;
      case 0xcf:
        this.need(8, path);
        out = Number(v.getBigUint64(this.pos));
        this.pos += 8;
        return out;
      case 0xd0:
        this.need(1, path);
        return v.getInt8(this.pos++);
      case 0xd1:
        this.need(2, path);
        out = v.getInt16(this.pos);
        this.pos += 2;
        return out;
      case 0xd2:
        this.need(4, path);
        out = v.getInt32(this.pos);
        this.pos += 4;
        return out;
      case 0xd3:
        this.need(8, path);
        out = Number(v.getBigInt64(this.pos));
        this.pos += 8;
        return out;
      case 0xc2:
        return 0; // False (Python bools are ints; slime masks are sometimes written as bools)
      case 0xc3:
        return 1;
      default:
        this.pos--;
        return this.fail(path, 'a number');
    }
  }
  typedArray<T extends Int32Array | Uint8Array | Float32Array>(
    path: string,
    make: (n: number) => T,
  ): T | null {
    const n = this.container(path, 0x90, 0xdc, 0xdd, 'an array of numbers or nil');
    if (n < 0) return null;
    if (n > this.bytes.length - this.pos) this.fail(path, `${n} elements (input is truncated)`);
    this.elementBudget -= n;
    if (this.elementBudget < 0) {
      throw new ValidationError(path, `${n} elements exceed the batch's cap (options.maxElements)`, {
        code: 'decode_error',
      });
    }
    const out = make(n);
    const bytes = this.bytes;
    const end = bytes.length;
    // Fast paths for what encodeSamples writes; anything else goes through number() and is range-checked.
    if (out instanceof Float32Array) {
      for (let i = 0; i < n; i++) {
        const b = bytes[this.pos];
        if (b === 0xca && this.pos + 5 <= end) {
          out[i] = this.view.getFloat32(this.pos + 1);
          this.pos += 5;
        } else if (b === 0) {
          out[i] = 0;
          this.pos++;
        } else out[i] = this.number(`${path}[${i}]`);
      }
      return out;
    }
    const mask = out instanceof Uint8Array;
    for (let i = 0; i < n; i++) {
      const b = bytes[this.pos]!;
      if (b < (mask ? 2 : 0x80)) {
        out[i] = b;
        this.pos++;
      } else if (b === 0xcd && !mask && this.pos + 3 <= end) {
        out[i] = (bytes[this.pos + 1]! << 8) | bytes[this.pos + 2]!;
        this.pos += 3;
      } else {
        const at = `${path}[${i}]`;
        const x = this.number(at);
        const [lo, hi] = mask ? [0, 1] : [-0x80000000, 0x7fffffff];
        if (!Number.isInteger(x) || x < lo || x > hi) {
          throw new ValidationError(
            at,
            `expected ${mask ? '0 or 1' : 'an int32'}, found ${describeValue(x)}`,
            {
              code: 'decode_error',
            },
          );
        }
        out[i] = x;
      }
    }
    return out;
  }
  /** Skip one msgpack value and return it decoded by @msgpack/msgpack. */
  value(path: string): unknown {
    const start = this.pos;
    this.skip(path, 0);
    try {
      return this.decoder.decode(this.bytes.subarray(start, this.pos));
    } catch (cause) {
      if ((cause as Error).message.includes(PROTO)) {
        throw new ValidationError(path, PROTO_FIX, { code: 'decode_error', cause });
      }
      throw new ValidationError(path, `malformed msgpack value (${(cause as Error).message})`, {
        code: 'decode_error',
        cause,
      });
    }
  }
  skip(path: string, depth: number): void {
    if (depth > 256) this.fail(path, 'nesting of at most 256 levels');
    const b = this.u8(path);
    const len = (width: 1 | 2 | 4): number => {
      this.need(width, path);
      const v = this.view;
      const n =
        width === 1 ? this.bytes[this.pos]! : width === 2 ? v.getUint16(this.pos) : v.getUint32(this.pos);
      this.pos += width;
      return n;
    };
    let bytes = 0; // payload bytes to jump over
    let items = 0; // nested values to skip
    if (b < 0x80 || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) return;
    if ((b & 0xf0) === 0x80) items = (b & 0x0f) * 2;
    else if ((b & 0xf0) === 0x90) items = b & 0x0f;
    else if ((b & 0xe0) === 0xa0) bytes = b & 0x1f;
    else if (b === 0xc4 || b === 0xd9) bytes = len(1);
    else if (b === 0xc5 || b === 0xda) bytes = len(2);
    else if (b === 0xc6 || b === 0xdb) bytes = len(4);
    else if (b === 0xc7) bytes = len(1) + 1;
    else if (b === 0xc8) bytes = len(2) + 1;
    else if (b === 0xc9) bytes = len(4) + 1;
    else if (b === 0xcc || b === 0xd0) bytes = 1;
    else if (b === 0xcd || b === 0xd1 || b === 0xd4) bytes = 2;
    else if (b === 0xd5) bytes = 3;
    else if (b === 0xca || b === 0xce || b === 0xd2) bytes = 4;
    else if (b === 0xd6) bytes = 5;
    else if (b === 0xcb || b === 0xcf || b === 0xd3) bytes = 8;
    else if (b === 0xd7) bytes = 9;
    else if (b === 0xd8) bytes = 17;
    else if (b === 0xdc) items = len(2);
    else if (b === 0xdd) items = len(4);
    else if (b === 0xde) items = len(2) * 2;
    else if (b === 0xdf) items = len(4) * 2;
    else {
      this.pos--;
      this.fail(path, 'a msgpack value');
    }
    this.need(bytes, path);
    this.pos += bytes;
    if (items > this.bytes.length - this.pos) this.fail(path, `${items} nested values (input is truncated)`);
    for (let i = 0; i < items; i++) this.skip(path, depth + 1);
  }
}

/**
 * The fields every sample map must carry: a row trains on `tokens` and its `response_length` tail, and
 * slime's `Sample.from_dict` reads `status` without a default. Every writer of the wire writes them
 * (`encodeSamples`; `Sample.to_dict()` writes every field). Requiring them also bounds what a batch
 * costs: a map that holds them takes 40 bytes at least, where an empty map is one byte but a whole
 * `Sample` (about 760 bytes) in memory; a map without them is refused before its sample is built.
 */
const REQUIRED_FIELDS = ['tokens', 'response_length', 'status'] as const;

export interface DecodeSamplesOptions {
  /** Most samples the batch may hold; more is a `decode_error` before any sample is built. Default: no cap. */
  maxSamples?: number | undefined;
  /** Most per-token array elements (tokens, masks, log probs, … summed over the batch). Default: no cap. */
  maxElements?: number | undefined;
}

function limit(value: number | undefined, name: string): number {
  if (value === undefined) return Number.POSITIVE_INFINITY;
  if (!(Number.isInteger(value) && value >= 0)) {
    throw new ConfigError(
      `decodeSamples options.${name}: expected an integer ≥ 0, found ${describeValue(value)}`,
    );
  }
  return value;
}

/**
 * Decode a batch written by `encodeSamples`, or by any msgpack library from slime `Sample.to_dict()`
 * dicts. Every map carries `tokens`, `response_length` and `status`; other missing fields take slime's
 * defaults. Throws `ValidationError` (code `decode_error`) naming the field path on malformed input;
 * never anything else. A map without the required fields is refused before its sample is built, so
 * memory stays within a small multiple of the input (about 20 bytes per byte); bytes from outside the
 * process should still be decoded with `maxSamples` / `maxElements`.
 */
export function decodeSamples(bytes: Uint8Array, options: DecodeSamplesOptions = {}): Sample[] {
  if (!(bytes instanceof Uint8Array)) {
    throw new ValidationError('', `expected a Uint8Array of msgpack bytes, found ${describeValue(bytes)}`, {
      code: 'decode_error',
    });
  }
  const maxSamples = limit(options.maxSamples, 'maxSamples');
  const r = new Reader(bytes);
  r.elementBudget = limit(options.maxElements, 'maxElements');
  try {
    const count = r.container('', 0x90, 0xdc, 0xdd, 'an array of sample maps');
    if (count < 0) r.fail('', 'an array of sample maps, found nil');
    if (count > bytes.length) r.fail('', `${count} samples (input is truncated)`);
    // Checked before any sample is built: an empty map is one byte but a whole Sample in memory.
    if (count > maxSamples) {
      throw new ValidationError('', `${count} samples exceed the cap of ${maxSamples} (options.maxSamples)`, {
        code: 'decode_error',
        data: { count, maxSamples },
      });
    }
    const out: Sample[] = [];
    for (let i = 0; i < count; i++) {
      const root = `[${i}]`;
      const nFields = r.container(root, 0x80, 0xde, 0xdf, 'a map (one slime sample dict)');
      if (nFields < 0) r.fail(root, 'a map (one slime sample dict), found nil');
      const scalars: Record<string, unknown> = {};
      const arrays: Record<string, Int32Array | Uint8Array | Float32Array | null> = {};
      for (let f = 0; f < nFields; f++) {
        const key = r.string(`${root}{key ${f}}`);
        const path = `${root}.${key}`;
        if (key === PROTO) r.fail(path, 'a field name other than "__proto__"');
        if (key === 'loss_mask') arrays[key] = r.typedArray(path, (n) => new Uint8Array(n));
        else if (INT_FIELDS.has(key)) arrays[key] = r.typedArray(path, (n) => new Int32Array(n));
        else if (F32_FIELDS.has(key)) arrays[key] = r.typedArray(path, (n) => new Float32Array(n));
        else scalars[key] = r.value(path);
      }
      for (const field of REQUIRED_FIELDS) {
        if (!(Object.hasOwn(arrays, field) || Object.hasOwn(scalars, field))) {
          throw new ValidationError(
            `${root}.${field}`,
            `missing field; every sample map carries ${REQUIRED_FIELDS.join(', ')} (Sample.to_dict() and encodeSamples write them)`,
            { code: 'decode_error' },
          );
        }
      }
      const dict = parseWith(ScalarDictSchema, scalars, 'slime sample dict', { root, code: 'decode_error' });
      const known = new Set<string>(SLIME_SAMPLE_FIELDS);
      const extra: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(dict)) if (!known.has(k)) extra[k] = v;
      const sample = createSample({ ...(pickKnown(dict) as object) });
      for (const [k, v] of Object.entries(arrays)) (sample as Record<string, unknown>)[k] = v;
      if (sample.tokens === null) r.fail(`${root}.tokens`, 'an array of token ids, found nil');
      if (Object.keys(extra).length > 0) sample.extra = extra;
      out.push(sample);
    }
    if (r.pos !== bytes.length) r.fail('', `end of input, found ${bytes.length - r.pos} trailing bytes`);
    return out;
  } catch (error) {
    if (VimeError.isInstance(error)) throw error;
    throw new ValidationError('', `malformed sample batch: ${(error as Error).message}`, {
      code: 'decode_error',
      cause: error,
    });
  }
}

function pickKnown(dict: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of SLIME_SAMPLE_FIELDS) if (dict[field] !== undefined) out[field] = dict[field];
  return out;
}
