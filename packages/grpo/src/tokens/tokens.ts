import { describeValue, ValidationError } from '@vime/core';
import { allocate, type Dtype, type FloatArray } from '../estimators/f32.js';
import type { BroadcastMode } from '../estimators/presets.js';
import { broadcastSimd } from '../simd/broadcast.js';

/** Loss masks: one array per sample, or one flat array over all response tokens (concatenated). */
export type LossMasks = ReadonlyArray<ArrayLike<number>> | Uint8Array;

/** Validate response lengths and return the token offset of every sample (`offsets[n]` = total). */
export function tokenOffsets(
  responseLengths: ArrayLike<number>,
  count?: number,
  what = 'responseLengths',
): Int32Array {
  if (responseLengths == null || typeof responseLengths.length !== 'number') {
    throw new ValidationError(
      what,
      `expected one length per sample, found ${describeValue(responseLengths)}`,
    );
  }
  if (count !== undefined && responseLengths.length !== count) {
    throw new ValidationError(
      what,
      `has ${responseLengths.length} entries but there are ${count} samples; pass one response length per sample`,
    );
  }
  const offsets = new Int32Array(responseLengths.length + 1);
  let total = 0;
  for (let i = 0; i < responseLengths.length; i++) {
    const len = responseLengths[i]!;
    if (!(len >= 0 && len === Math.floor(len))) {
      throw new ValidationError(
        `${what}[${i}]`,
        `must be a non-negative integer, found ${describeValue(len)}`,
      );
    }
    total += len;
    offsets[i + 1] = total;
  }
  if (total > 0x7fffffff) {
    throw new ValidationError(
      what,
      `sum to ${total} tokens, more than one typed array can index; split the batch`,
    );
  }
  return offsets;
}

/** Flatten masks to one Uint8Array over all tokens, checking each sample's mask length. */
export function flattenMasks(masks: LossMasks, offsets: Int32Array, what = 'lossMasks'): Uint8Array {
  const n = offsets.length - 1;
  const total = offsets[n]!;
  if (masks instanceof Uint8Array) {
    if (masks.length !== total) {
      throw new ValidationError(
        what,
        `flat mask has ${masks.length} entries but the responses hold ${total} tokens; pass one mask value per response token`,
      );
    }
    return masks;
  }
  if (!Array.isArray(masks) || masks.length !== n) {
    throw new ValidationError(
      what,
      `expected ${n} per-sample masks (or one flat Uint8Array), found ${describeValue(masks)}`,
    );
  }
  const flat = new Uint8Array(total);
  for (let i = 0; i < n; i++) {
    const m = masks[i] as ArrayLike<number>;
    const len = offsets[i + 1]! - offsets[i]!;
    if (m == null || m.length !== len) {
      throw new ValidationError(
        `${what}[${i}]`,
        `has ${m == null ? describeValue(m) : `${m.length} entries`} but response ${i} is ${len} tokens long`,
      );
    }
    flat.set(m as ArrayLike<number>, offsets[i]!);
  }
  return flat;
}

/** Split a flat per-token array into per-sample views (no copy). */
export function splitTokens<T extends FloatArray | Uint8Array>(
  flat: T,
  responseLengths: ArrayLike<number>,
): T[] {
  const offsets = tokenOffsets(responseLengths);
  if (offsets[offsets.length - 1] !== flat.length) {
    throw new ValidationError(
      'responseLengths',
      `sum to ${offsets[offsets.length - 1]} but the array has ${flat.length} tokens`,
    );
  }
  return Array.from(
    { length: offsets.length - 1 },
    (_, i) => flat.subarray(offsets[i]!, offsets[i + 1]!) as T,
  );
}

/** Options of broadcasting per-sample values to tokens. */
export interface BroadcastOptions {
  /** `allTokens` (slime, TRL: masked tokens keep the value; the mask acts in the loss) or `maskedTokens` (verl: value × mask). */
  mode?: Exclude<BroadcastMode, 'throughLastToken'> | undefined;
  dtype?: Dtype | undefined;
  /** Write into this array (exactly `Σ responseLengths` long) instead of a new one: reuse it across steps. */
  out?: FloatArray | undefined;
}

/**
 * Spread one advantage per sample over its response tokens, concatenated: a flat array of
 * `Σ responseLengths` values. Use `splitTokens` for per-sample views.
 */
export function broadcastToTokens(
  advantages: ArrayLike<number>,
  responseLengths: ArrayLike<number>,
  lossMasks: LossMasks | null,
  options: BroadcastOptions = {},
): FloatArray {
  const { mode = 'allTokens', dtype = 'float32' } = options;
  if (mode !== 'allTokens' && mode !== 'maskedTokens') {
    throw new ValidationError('mode', `must be 'allTokens' or 'maskedTokens', found ${describeValue(mode)}`);
  }
  const n = advantages.length;
  const f32Out = options.out ? options.out instanceof Float32Array : dtype === 'float32';
  // The float32 path with a flat mask needs no offsets array: one pass validates the lengths and
  // prepares the stored values; the fill then walks the lengths.
  const flatMask = lossMasks === null || lossMasks instanceof Uint8Array;
  const offsets = f32Out && flatMask ? null : tokenOffsets(responseLengths, n);
  const prepared = f32Out ? prepareF32(advantages, responseLengths, n) : null;
  const total = prepared ? prepared.total : offsets![n]!;
  if (options.out && options.out.length !== total) {
    throw new ValidationError(
      'out',
      `has ${options.out.length} elements but the responses hold ${total} tokens`,
    );
  }
  let mask: Uint8Array | null = null;
  if (lossMasks instanceof Uint8Array) {
    if (lossMasks.length !== total) {
      throw new ValidationError(
        'lossMasks',
        `flat mask has ${lossMasks.length} entries but the responses hold ${total} tokens; pass one mask value per response token`,
      );
    }
    mask = lossMasks;
  } else if (lossMasks) mask = flattenMasks(lossMasks, offsets!);
  if (mode === 'maskedTokens' && !mask) {
    throw new ValidationError('lossMasks', "mode 'maskedTokens' needs the loss masks");
  }
  const out = options.out ?? (dtype === 'float32' ? uninitializedF32(total) : allocate(dtype, total));
  // Hot loops are written once per array type: a loop that sees both Float32Array and Float64Array
  // runs many times slower.
  if (out instanceof Float32Array) {
    const tokenMask = mode === 'maskedTokens' ? mask! : null;
    // SIMD for finite values, unless only long spans are to be filled: one native fill each is faster.
    const simd = prepared!.finite && (tokenMask !== null || total < 256 * n);
    if (!(simd && broadcastSimd(prepared!.bits, responseLengths, tokenMask, out))) {
      fillF32(out, prepared!, responseLengths, tokenMask);
    }
  } else {
    for (let i = 0; i < n; i++) out.fill(advantages[i]!, offsets![i]!, offsets![i + 1]!);
    if (mode === 'maskedTokens') for (let t = 0; t < total; t++) if (mask![t] === 0) out[t] = out[t]! * 0;
  }
  return out;
}

/** The values as float32, their bits, and whether all are finite; `pairScratch` filled; the lengths validated. */
interface PreparedF32 {
  total: number;
  values: Float32Array;
  bits: Int32Array;
  finite: boolean;
}

/** Reused across calls: `pairScratch[i]` is the float64 whose two halves are sample i's float32 bits. */
let pairScratch = new Float64Array(1024);
let pairHalves = new Int32Array(pairScratch.buffer);

function prepareF32(values: ArrayLike<number>, lengths: ArrayLike<number>, n: number): PreparedF32 {
  if (lengths == null || typeof lengths.length !== 'number' || lengths.length !== n) {
    tokenOffsets(lengths, n); // throws the detailed error
  }
  const f32values = values instanceof Float32Array ? values : Float32Array.from(values);
  const bits = new Int32Array(f32values.buffer, f32values.byteOffset, n);
  if (pairScratch.length < n) {
    pairScratch = new Float64Array(n * 2);
    pairHalves = new Int32Array(pairScratch.buffer);
  }
  const halves = pairHalves;
  let total = 0;
  let finite = true;
  for (let i = 0; i < n; i++) {
    const len = lengths[i]!;
    if (!((len | 0) === len && len >= 0)) tokenOffsets(lengths, n); // throws, naming the entry
    total += len;
    const b = bits[i]!;
    halves[2 * i] = b;
    halves[2 * i + 1] = b;
    if ((b & 0x7f800000) === 0x7f800000) finite = false;
  }
  if (total > 0x7fffffff) tokenOffsets(lengths, n);
  return { total, values: f32values, bits, finite };
}

/**
 * A Float32Array every element of which the caller overwrites: large ones skip the zero fill
 * (`Buffer.allocUnsafe` gives them a buffer of their own; small ones would share Node's pool).
 */
function uninitializedF32(length: number): Float32Array {
  if (length < 1024) return new Float32Array(length);
  const bytes = Buffer.allocUnsafe(length * 4);
  return new Float32Array(bytes.buffer, bytes.byteOffset, length);
}

/**
 * Write each sample's value (or, with a mask, `value × mask`) over its tokens. Stores go through
 * int32 and float64 views (int32, not uint32: a float with its sign bit set stays a small integer for
 * the JIT): two equal float32 values are one 8-byte store of the float64 whose bit pattern is the
 * pair (a finite float32 always makes a finite float64, so no NaN canonicalization can alter it),
 * and the mask is read four bytes at a time.
 */
function fillF32(
  out: Float32Array,
  p: PreparedF32,
  lengths: ArrayLike<number>,
  mask: Uint8Array | null,
): void {
  const n = lengths.length;
  const { bits } = p;
  // A module-level binding read into a local: inside the loops it would be re-read (and, under a
  // CommonJS loader, hole-checked) on every use.
  const pairs = pairScratch;
  const i32 = new Int32Array(out.buffer, out.byteOffset, out.length);
  if (!p.finite || out.byteOffset % 8 !== 0) {
    // An output not 8-byte aligned, or a non-finite value: one 4-byte store per token.
    for (let i = 0, t = 0; i < n; i++) {
      const zero = zeroBits(p.values[i]!);
      for (const to = t + lengths[i]!; t < to; t++) i32[t] = mask === null || mask[t] !== 0 ? bits[i]! : zero;
    }
    return;
  }
  const f64 = new Float64Array(out.buffer, out.byteOffset, out.length >> 1);
  // The stores are written out in each loop, not in a helper: V8 does not inline a helper into a
  // function this size, and a call per response costs as much as a 32-token fill.
  if (mask === null) {
    for (let i = 0, from = 0; i < n; i++) {
      const b = bits[i]!;
      const pair = pairs[i]!;
      const to = from + lengths[i]!;
      let t = from;
      if (t < to && t & 1) i32[t++] = b;
      const end = to >> 1;
      let k = t >> 1;
      // A long span is one native fill (memset speed); below ~128 pairs the call costs more than it saves.
      if (end - k >= 128) {
        f64.fill(pair, k, end);
        k = end;
      }
      for (; k + 4 <= end; k += 4) {
        f64[k] = pair;
        f64[k + 1] = pair;
        f64[k + 2] = pair;
        f64[k + 3] = pair;
      }
      for (; k < end; k++) f64[k] = pair;
      if (to & 1 && to - 1 >= t) i32[to - 1] = b;
      from = to;
    }
    return;
  }
  // Word w of the mask holds tokens 4w..4w+3 (little-endian bytes); copy a mask that is not 4-byte aligned.
  const m = mask.byteOffset % 4 === 0 ? mask : mask.slice();
  const words = new Int32Array(m.buffer, m.byteOffset, m.length >> 2);
  for (let i = 0, from = 0; i < n; i++) {
    const b = bits[i]!;
    const pair = pairs[i]!;
    const zero = b & 0x80000000; // finite value × 0: ±0 with the value's sign, as torch gives
    const to = from + lengths[i]!;
    let t = from;
    for (; t < to && (t & 3) !== 0; t++) i32[t] = m[t] !== 0 ? b : zero;
    const wordEnd = to & ~3;
    // Sixteen tokens at a time: store the value on all of them, then zero the masked ones. Masks are
    // mostly 1, and the AND of four words is 0x01010101 only if all sixteen bytes are odd (non-zero).
    for (; t + 16 <= wordEnd; t += 16) {
      const k = t >> 1;
      f64[k] = pair;
      f64[k + 1] = pair;
      f64[k + 2] = pair;
      f64[k + 3] = pair;
      f64[k + 4] = pair;
      f64[k + 5] = pair;
      f64[k + 6] = pair;
      f64[k + 7] = pair;
      const w = t >> 2;
      const w0 = words[w]!;
      const w1 = words[w + 1]!;
      const w2 = words[w + 2]!;
      const w3 = words[w + 3]!;
      if ((w0 & w1 & w2 & w3) === 0x01010101) continue;
      if (((w0 | w1 | w2 | w3) & 0xfefefefe) === 0) {
        // Bytes are 0 or 1: bit 8j of ~word & 0x01010101 marks masked token j; visit just those.
        for (let q = 0; q < 4; q++) {
          let marks = ~words[w + q]! & 0x01010101;
          while (marks !== 0) {
            const low = marks & -marks;
            i32[t + 4 * q + ((31 - Math.clz32(low)) >> 3)] = zero;
            marks ^= low;
          }
        }
      } else {
        for (let q = t; q < t + 16; q++) if (m[q] === 0) i32[q] = zero;
      }
    }
    for (; t < wordEnd; t += 4) {
      const v = words[t >> 2]!;
      i32[t] = (v & 0xff) !== 0 ? b : zero;
      i32[t + 1] = (v & 0xff00) !== 0 ? b : zero;
      i32[t + 2] = (v & 0xff0000) !== 0 ? b : zero;
      i32[t + 3] = v >>> 24 !== 0 ? b : zero;
    }
    for (; t < to; t++) i32[t] = m[t] !== 0 ? b : zero;
    from = to;
  }
}

const scratch = new Float32Array(1);
const scratchBits = new Int32Array(scratch.buffer);

/** The int32 bits of `float32(v) × 0` (±0, or NaN for a non-finite value). */
function zeroBits(v: number): number {
  scratch[0] = v * 0;
  return scratchBits[0]!;
}
