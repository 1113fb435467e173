import { ValidationError } from '@vime/core';
import { allocate, type Dtype, type FloatArray, sumF64, torchSumF32 } from '../estimators/f32.js';
import { flattenMasks, type LossMasks, tokenOffsets } from './tokens.js';

/**
 * The right-padded `[B, T]` layout verl, TRL and OpenRLHF hold per-token tensors in. Reductions over it
 * (row sums, whole-batch sums) follow torch's summation order, which depends on where the padding
 * sits, so the trainers' float32 results are reproduced bit for bit only on the same layout.
 */
export interface PaddedLayout {
  /** Number of responses (rows). */
  rows: number;
  /** Row width: the trainer's response dimension (at least the longest response). */
  width: number;
  /** Token offsets of the flat (unpadded) layout, `offsets[rows]` = total tokens. */
  offsets: Int32Array;
  /** Flat loss mask over the real tokens. */
  mask: Uint8Array;
  dtype: Dtype;
}

export function paddedLayout(
  responseLengths: ArrayLike<number>,
  lossMasks: LossMasks,
  options: { paddedLength?: number | undefined; dtype?: Dtype | undefined; count?: number | undefined } = {},
): PaddedLayout {
  const offsets = tokenOffsets(responseLengths, options.count);
  const rows = offsets.length - 1;
  let longest = 0;
  for (let i = 0; i < rows; i++) longest = Math.max(longest, offsets[i + 1]! - offsets[i]!);
  const width = options.paddedLength ?? longest;
  if (!(Number.isInteger(width) && width >= longest)) {
    throw new ValidationError(
      'paddedLength',
      `must be an integer ≥ the longest response (${longest}), found ${width}; it is the trainer's response dimension`,
    );
  }
  return { rows, width, offsets, mask: flattenMasks(lossMasks, offsets), dtype: options.dtype ?? 'float32' };
}

/** `values` (flat, one per real token) right-padded with `fill` into a row-major `[rows, width]` array. */
export function pad(layout: PaddedLayout, values: ArrayLike<number>, what: string, fill = 0): FloatArray {
  const { rows, width, offsets } = layout;
  const total = offsets[rows]!;
  if (values.length !== total) {
    throw new ValidationError(what, `has ${values.length} values but the responses hold ${total} tokens`);
  }
  const out = allocate(layout.dtype, rows * width);
  if (fill !== 0) out.fill(fill);
  for (let i = 0; i < rows; i++) {
    const from = offsets[i]!;
    for (let t = 0; t < offsets[i + 1]! - from; t++) out[i * width + t] = values[from + t]!;
  }
  return out;
}

/** The loss mask right-padded with 0 into `[rows, width]`. */
export function padMask(layout: PaddedLayout): FloatArray {
  return pad(layout, layout.mask, 'lossMasks');
}

/** The real tokens of a padded `[rows, width]` array, flat. */
export function unpad(layout: PaddedLayout, padded: ArrayLike<number>): FloatArray {
  const { rows, width, offsets } = layout;
  const out = allocate(layout.dtype, offsets[rows]!);
  for (let i = 0; i < rows; i++) {
    const from = offsets[i]!;
    for (let t = 0; t < offsets[i + 1]! - from; t++) out[from + t] = padded[i * width + t]!;
  }
  return out;
}

/** Sum of `x[from..to)` as torch sums a contiguous float32 (or float64) range. */
export function torchSum(x: ArrayLike<number>, dtype: Dtype, from = 0, to = x.length): number {
  return dtype === 'float32' ? torchSumF32(x, from, to) : sumF64(x, from, to);
}

/** `x.sum(dim=-1)` of a padded `[rows, width]` array. */
export function rowSums(layout: PaddedLayout, x: ArrayLike<number>): Float64Array {
  const out = new Float64Array(layout.rows);
  for (let i = 0; i < layout.rows; i++) {
    out[i] = torchSum(x, layout.dtype, i * layout.width, (i + 1) * layout.width);
  }
  return out;
}

/** Number of mask-1 tokens of each response. */
export function maskCounts(layout: PaddedLayout): Int32Array {
  const out = new Int32Array(layout.rows);
  for (let i = 0; i < layout.rows; i++) {
    let c = 0;
    for (let t = layout.offsets[i]!; t < layout.offsets[i + 1]!; t++) c += layout.mask[t]!;
    out[i] = c;
  }
  return out;
}
