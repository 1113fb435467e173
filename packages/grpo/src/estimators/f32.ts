/**
 * float32 arithmetic the way PyTorch's CPU kernels do it, so `dtype: 'float32'` results can match a
 * trainer bit for bit. `Math.fround` rounds each elementwise op; reductions follow ATen's summation
 * order (8-lane vector accumulators, 4-way ILP, cascade levels: `SumKernel.cpp`), because a plain
 * left-to-right float32 sum rounds differently.
 */

export const f32 = Math.fround;

/** The precision a computation runs in. */
export type Dtype = 'float32' | 'float64';
/** The array a computation returns, of its precision. */
export type FloatArray = Float32Array | Float64Array;

export function allocate(dtype: Dtype, length: number): FloatArray {
  return dtype === 'float32' ? new Float32Array(length) : new Float64Array(length);
}

/** Rounds to the dtype: `Math.fround` for float32, identity for float64. */
export function rounder(dtype: Dtype): (x: number) => number {
  return dtype === 'float32' ? f32 : (x) => x;
}

const LANES = 8;
const ILP = 4;

/** Plain scalar ILP-4 row sum (ATen `row_sum` with scalar loads), for fewer than 8 values. */
function scalarRowSum(x: ArrayLike<number>, from: number, to: number): number {
  let p0 = 0;
  let p1 = 0;
  let p2 = 0;
  let p3 = 0;
  const rowsEnd = from + ((to - from) & ~3);
  for (let i = from; i < rowsEnd; i += 4) {
    p0 = f32(p0 + x[i]!);
    p1 = f32(p1 + x[i + 1]!);
    p2 = f32(p2 + x[i + 2]!);
    p3 = f32(p3 + x[i + 3]!);
  }
  for (let i = rowsEnd; i < to; i++) p0 = f32(p0 + x[i]!);
  return f32(f32(f32(p0 + p1) + p2) + p3);
}

/** 8 to 31 values: fewer than four vectors, so each lane just accumulates its column. */
function laneSum(x: ArrayLike<number>, from: number, to: number): number {
  const vecsEnd = from + ((to - from) & ~7);
  let total = 0;
  for (let i = vecsEnd; i < to; i++) total = f32(total + x[i]!);
  for (let l = 0; l < LANES; l++) {
    let lane = 0;
    for (let i = from + l; i < vecsEnd; i += LANES) lane = f32(lane + x[i]!);
    total = f32(total + lane);
  }
  return total;
}

/** Reused accumulators: `[level][ilp][lane]`, flattened. */
const acc = new Float32Array(4 * ILP * LANES);
const at = (level: number, k: number) => (level * ILP + k) * LANES;

/**
 * Sum of `x[from..to)` in float32 with the summation order of ATen's CPU `sum` over a contiguous
 * dimension (AVX2 build): 8-lane vectors, four vector accumulators and a 4-level cascade, a scalar
 * tail added first, then the lanes. `mean` is this sum divided by the count.
 */
export function torchSumF32(x: ArrayLike<number>, from = 0, to = x.length): number {
  const n = to - from;
  if (n < LANES) return scalarRowSum(x, from, to);
  if (n < LANES * ILP) return laneSum(x, from, to);
  const vecs = Math.floor(n / LANES);
  const rows = Math.floor(vecs / ILP);
  const levels = 4;
  acc.fill(0);
  const addVec = (target: number, vecIndex: number) => {
    const base = from + vecIndex * LANES;
    for (let l = 0; l < LANES; l++) acc[target + l] = acc[target + l]! + x[base + l]!;
  };
  if (rows > 0) {
    const levelPower = Math.max(4, Math.floor(ceilLog2(rows) / levels));
    const levelStep = 1 << levelPower;
    const levelMask = levelStep - 1;
    let i = 0;
    while (i + levelStep <= rows) {
      for (let j = 0; j < levelStep; j++, i++) {
        for (let k = 0; k < ILP; k++) addVec(at(0, k), i * ILP + k);
      }
      for (let j = 1; j < levels; j++) {
        for (let k = 0; k < ILP; k++) {
          const up = at(j, k);
          const down = at(j - 1, k);
          for (let l = 0; l < LANES; l++) {
            acc[up + l] = acc[up + l]! + acc[down + l]!;
            acc[down + l] = 0;
          }
        }
        if ((i & (levelMask << (j * levelPower))) !== 0) break;
      }
    }
    for (; i < rows; i++) for (let k = 0; k < ILP; k++) addVec(at(0, k), i * ILP + k);
    for (let j = 1; j < levels; j++) {
      for (let k = 0; k < ILP; k++) {
        const a = at(0, k);
        const b = at(j, k);
        for (let l = 0; l < LANES; l++) acc[a + l] = acc[a + l]! + acc[b + l]!;
      }
    }
  }
  for (let v = rows * ILP; v < vecs; v++) addVec(0, v);
  for (let k = 1; k < ILP; k++) {
    const b = at(0, k);
    for (let l = 0; l < LANES; l++) acc[l] = acc[l]! + acc[b + l]!;
  }
  let total = 0;
  for (let i = from + vecs * LANES; i < to; i++) total = f32(total + x[i]!);
  for (let l = 0; l < LANES; l++) total = f32(total + acc[l]!);
  return total;
}

function ceilLog2(x: number): number {
  return x <= 1 ? 0 : Math.ceil(Math.log2(x));
}

/**
 * ATen's `multi_row_sum` for one column: a float32 cascade over `n` values read by `get(i)`: level 0
 * takes blocks of `2^max(4, ⌈log2 n⌉/4)` values and the block sums climb up to four levels.
 */
function cascadeSum(get: (i: number) => number, n: number): number {
  const levelPower = Math.max(4, Math.floor(ceilLog2(n) / 4));
  const levelStep = 1 << levelPower;
  const levelMask = levelStep - 1;
  const level = [0, 0, 0, 0];
  let i = 0;
  while (i + levelStep <= n) {
    for (let j = 0; j < levelStep; j++, i++) level[0] = f32(level[0]! + get(i));
    for (let j = 1; j < 4; j++) {
      level[j] = f32(level[j]! + level[j - 1]!);
      level[j - 1] = 0;
      if ((i & (levelMask << (j * levelPower))) !== 0) break;
    }
  }
  for (; i < n; i++) level[0] = f32(level[0]! + get(i));
  for (let j = 1; j < 4; j++) level[0] = f32(level[0]! + level[j]!);
  return level[0]!;
}

/** ATen's `row_sum` over `n` values: four interleaved cascades (`i mod 4`), the tail added to the first. */
function ilp4Sum(get: (i: number) => number, n: number): number {
  const rows = Math.floor(n / 4);
  const partial = [0, 1, 2, 3].map((k) => cascadeSum((j) => get(4 * j + k), rows));
  for (let i = rows * 4; i < n; i++) partial[0] = f32(partial[0]! + get(i));
  return f32(f32(f32(partial[0]! + partial[1]!) + partial[2]!) + partial[3]!);
}

/**
 * float32 sum over a non-contiguous dimension (`x.sum(dim=0)` of a row-major `[rows, columns]` tensor, or
 * any reduced dimension whose inner dimension is contiguous), for output `column` of `columns`, in
 * ATen's order: columns in full blocks (32 when there are at least 8 columns, else 4) are summed row by
 * row in a cascade; the remaining columns take the four-way interleaved `row_sum`.
 */
export function torchOuterSumF32(
  get: (row: number) => number,
  rows: number,
  column: number,
  columns: number,
): number {
  if (columns === 1) {
    // A dimension of size 1 is dropped: the reduction becomes a contiguous one.
    const x = new Float32Array(rows);
    for (let i = 0; i < rows; i++) x[i] = get(i);
    return torchSumF32(x);
  }
  const block = columns >= LANES ? ILP * LANES : ILP;
  return column < Math.floor(columns / block) * block ? cascadeSum(get, rows) : ilp4Sum(get, rows);
}

/**
 * `torch.std` of a 1-D float32 tensor (any reduction to a single output): the float32 mean (torch
 * order), widened, then `Σ(x − mean)²` in float64, divided by `n − correction`, square root, rounded.
 */
export function torchStdAllF32(
  x: ArrayLike<number>,
  from: number,
  to: number,
  correction = 1,
  mean = f32(torchSumF32(x, from, to) / (to - from)),
): number {
  let ss = 0;
  for (let i = from; i < to; i++) {
    const d = x[i]! - mean;
    ss += d * d;
  }
  return f32(Math.sqrt(ss / Math.max(0, to - from - correction)));
}

/** `torch.std` along a dimension with several outputs: ATen's Welford recurrence in float64, rounded. */
export function torchStdWelfordF32(get: (i: number) => number, n: number, correction = 1): number {
  let mean = 0;
  let m2 = 0;
  for (let i = 0; i < n; i++) {
    const v = get(i);
    const delta = v - mean;
    mean += delta / (i + 1);
    m2 += delta * (v - mean);
  }
  return f32(Math.sqrt(m2 / (n > correction ? n - correction : 0)));
}

/** Sum in float64 (Neumaier-compensated so float64 results do not depend on the order). */
export function sumF64(x: ArrayLike<number>, from = 0, to = x.length): number {
  let sum = 0;
  let c = 0;
  for (let i = from; i < to; i++) {
    const v = x[i]!;
    const t = sum + v;
    c += Math.abs(sum) >= Math.abs(v) ? sum - t + v : v - t + sum;
    sum = t;
  }
  return sum + c;
}
