import { ValidationError } from '@vime/core';
import { type PyObject, type PyValue, pyGlobal, unpickle } from './pickle.js';
import { readZip } from './zip.js';

/** A tensor's element type, as torch names it. */
export type TorchDtype =
  | 'float32'
  | 'float64'
  | 'float16'
  | 'bfloat16'
  | 'int64'
  | 'int32'
  | 'int16'
  | 'int8'
  | 'uint8'
  | 'bool';

/** Element arrays: bfloat16/float16 are widened exactly to float32, bool is 0/1 bytes, int64 is BigInt64Array. */
export type TensorData =
  | Float32Array
  | Float64Array
  | BigInt64Array
  | Int32Array
  | Int16Array
  | Int8Array
  | Uint8Array;

/** A tensor read from a `.pt` file: its logical values, contiguous (views are materialized). */
export interface TorchTensor extends PyObject {
  readonly pyType: 'torch.Tensor';
  dtype: TorchDtype;
  shape: number[];
  /** Row-major values, `shape` product long. */
  data: TensorData;
}

interface StorageType extends PyObject {
  readonly pyType: 'torch.storage';
  dtype: TorchDtype;
  itemsize: number;
}

interface Storage extends PyObject {
  readonly pyType: 'torch.Storage';
  dtype: TorchDtype;
  key: string;
  bytes: Uint8Array;
  /** An aligned copy of `bytes`, made once per storage (views often share one storage). */
  aligned?: ArrayBuffer | undefined;
}

const STORAGES: Record<string, [TorchDtype, number]> = {
  FloatStorage: ['float32', 4],
  DoubleStorage: ['float64', 8],
  HalfStorage: ['float16', 2],
  BFloat16Storage: ['bfloat16', 2],
  LongStorage: ['int64', 8],
  IntStorage: ['int32', 4],
  ShortStorage: ['int16', 2],
  CharStorage: ['int8', 1],
  ByteStorage: ['uint8', 1],
  BoolStorage: ['bool', 1],
};

/** Whether `value` is a tensor read from a `.pt` file. */
export function isTensor(value: unknown): value is TorchTensor {
  return typeof value === 'object' && value !== null && (value as PyObject).pyType === 'torch.Tensor';
}

/** A `.pt` file read: its unpickled object. */
export interface TorchFile {
  /** The unpickled object (dicts, lists, numbers, strings, tensors). */
  value: PyValue;
  /** The archive's root folder (torch uses the file stem; it is not always `archive`). */
  root: string;
  /** Names of the archive entries. */
  entries: string[];
}

/**
 * Read a `torch.save` file (zip + pickle) without Python: dicts, lists, tuples, scalars, strings and
 * tensors of the listed dtypes, including views with offsets and strides into shared storages. Any
 * other pickle global (arbitrary classes, functions) is refused: nothing in the file is executed.
 */
export function loadTorchFile(bytes: Uint8Array, what = 'file'): TorchFile {
  const entries = readZip(bytes, what);
  const pickleName = [...entries.keys()].find((n) => n.endsWith('/data.pkl') && n.split('/').length === 2);
  if (!pickleName) {
    throw new ValidationError(what, 'zip archive has no <root>/data.pkl: not a torch.save file', {
      code: 'decode_error',
    });
  }
  const root = pickleName.slice(0, -'/data.pkl'.length);
  const order = entries.get(`${root}/byteorder`);
  if (order && new TextDecoder().decode(order.data).trim() !== 'little') {
    throw new ValidationError(what, 'big-endian tensor storages are not supported', { code: 'decode_error' });
  }
  const storages = new Map<string, Storage>();
  const orderedDict = pyGlobal({
    call: (args: PyValue[], offset: number) => {
      if (args.length !== 0)
        failAt(what, 'collections.OrderedDict with contents is not used by tensor dumps', offset);
      return {};
    },
  });
  const rebuildTensor = pyGlobal({
    call: (args: PyValue[], offset: number) => rebuildTensor_v2(args, what, offset),
  });
  const value = unpickle(
    entries.get(pickleName)!.data,
    {
      resolveGlobal(module, name) {
        if (module === 'torch._utils' && name === '_rebuild_tensor_v2') return rebuildTensor;
        if (module === 'collections' && name === 'OrderedDict') return orderedDict;
        if (module === 'torch' && name in STORAGES) {
          const [dtype, itemsize] = STORAGES[name]!;
          return { pyType: 'torch.storage', dtype, itemsize } satisfies StorageType;
        }
        return undefined;
      },
      persistentLoad(pid, offset) {
        if (!Array.isArray(pid) || pid[0] !== 'storage' || pid.length < 5) {
          failAt(what, 'persistent id is not a torch storage reference', offset);
        }
        const [, type, key, , numel] = pid as [string, StorageType, string, string, number];
        if (typeof type !== 'object' || type?.pyType !== 'torch.storage' || typeof key !== 'string') {
          failAt(what, 'malformed storage reference', offset);
        }
        const cached = storages.get(key);
        if (cached) return cached;
        const entry = entries.get(`${root}/data/${key}`);
        if (!entry) failAt(what, `storage ${root}/data/${key} is missing from the archive`, offset);
        if (typeof numel !== 'number' || entry!.data.byteLength < numel * type.itemsize) {
          failAt(
            what,
            `storage ${key} holds ${entry!.data.byteLength} bytes, fewer than ${numel} × ${type.itemsize}`,
            offset,
          );
        }
        const storage: Storage = { pyType: 'torch.Storage', dtype: type.dtype, key, bytes: entry!.data };
        storages.set(key, storage);
        return storage;
      },
    },
    `${what}: ${pickleName}`,
  );
  return { value, root, entries: [...entries.keys()] };
}

function failAt(what: string, message: string, offset: number): never {
  throw new ValidationError(what, `${message} (pickle byte ${offset})`, { code: 'decode_error' });
}

function isIntList(x: PyValue): x is number[] {
  return Array.isArray(x) && x.every((v) => Number.isInteger(v) && (v as number) >= 0);
}

/** `torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks[, metadata])`. */
function rebuildTensor_v2(args: PyValue[], what: string, offset: number): TorchTensor {
  const [storage, storageOffset, size, stride] = args as [Storage, number, PyValue, PyValue];
  if (typeof storage !== 'object' || (storage as PyObject | null)?.pyType !== 'torch.Storage') {
    failAt(what, '_rebuild_tensor_v2 without a storage', offset);
  }
  if (!Number.isInteger(storageOffset) || storageOffset < 0 || !isIntList(size) || !isIntList(stride)) {
    failAt(what, '_rebuild_tensor_v2 with a malformed offset, size or stride', offset);
  }
  const shape = size as number[];
  const strides = stride as number[];
  if (shape.length !== strides.length) failAt(what, 'tensor size and stride differ in rank', offset);
  const [, itemsize] = Object.values(STORAGES).find(([d]) => d === storage.dtype)!;
  const available = storage.bytes.byteLength / itemsize;
  const numel = shape.reduce((a, b) => a * b, 1);
  let last = storageOffset;
  for (let d = 0; d < shape.length; d++) last += (shape[d]! - 1) * strides[d]!;
  if (numel > 0 && last >= available) {
    failAt(what, `tensor view reaches element ${last} of a ${available}-element storage`, offset);
  }
  // Gather the view's elements in row-major order (a plain slice when it is contiguous).
  const index = new Int32Array(numel);
  let contiguous = true;
  let expect = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    if (shape[d]! > 1 && strides[d] !== expect) contiguous = false;
    expect *= shape[d]!;
  }
  if (contiguous) {
    for (let i = 0; i < numel; i++) index[i] = storageOffset + i;
  } else {
    const counter = new Array<number>(shape.length).fill(0);
    for (let i = 0; i < numel; i++) {
      let at = storageOffset;
      for (let d = 0; d < shape.length; d++) at += counter[d]! * strides[d]!;
      index[i] = at;
      for (let d = shape.length - 1; d >= 0; d--) {
        if (++counter[d]! < shape[d]!) break;
        counter[d] = 0;
      }
    }
  }
  return { pyType: 'torch.Tensor', dtype: storage.dtype, shape, data: gather(storage, index) };
}

function gather(storage: Storage, index: Int32Array): TensorData {
  const { bytes, dtype } = storage;
  // Copy the storage to an aligned buffer once, then read elements natively (little-endian host).
  // Uint8Array's slice, not the argument's own: a Node Buffer's slice() is a view, not a copy.
  storage.aligned ??= Uint8Array.prototype.slice.call(bytes).buffer;
  const aligned = new Uint8Array(storage.aligned);
  const n = index.length;
  const pick = <T extends { [i: number]: number | bigint; length: number }>(src: T, out: T): T => {
    for (let i = 0; i < n; i++) out[i] = src[index[i]!]!;
    return out;
  };
  const buf = aligned.buffer;
  switch (dtype) {
    case 'float32':
      return pick(new Float32Array(buf, 0, aligned.byteLength >> 2), new Float32Array(n));
    case 'float64':
      return pick(new Float64Array(buf, 0, aligned.byteLength >> 3), new Float64Array(n));
    case 'int64':
      return pick(new BigInt64Array(buf, 0, aligned.byteLength >> 3), new BigInt64Array(n));
    case 'int32':
      return pick(new Int32Array(buf, 0, aligned.byteLength >> 2), new Int32Array(n));
    case 'int16':
      return pick(new Int16Array(buf, 0, aligned.byteLength >> 1), new Int16Array(n));
    case 'int8':
      return pick(new Int8Array(buf), new Int8Array(n));
    case 'uint8':
    case 'bool':
      return pick(new Uint8Array(buf), new Uint8Array(n));
    case 'bfloat16': {
      const raw = new Uint16Array(buf, 0, aligned.byteLength >> 1);
      const out = new Float32Array(n);
      const bits = new Uint32Array(out.buffer);
      for (let i = 0; i < n; i++) bits[i] = raw[index[i]!]! << 16;
      return out;
    }
    case 'float16': {
      const raw = new Uint16Array(buf, 0, aligned.byteLength >> 1);
      const out = new Float32Array(n);
      for (let i = 0; i < n; i++) out[i] = halfToFloat(raw[index[i]!]!);
      return out;
    }
  }
}

function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? Number.NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** A tensor's values as plain numbers (int64 converted; values beyond 2^53 are refused). */
export function tensorNumbers(t: TorchTensor, what = 'tensor'): ArrayLike<number> {
  if (!(t.data instanceof BigInt64Array)) return t.data as ArrayLike<number>;
  const out = new Float64Array(t.data.length);
  for (let i = 0; i < out.length; i++) {
    const v = t.data[i]!;
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new ValidationError(`${what}[${i}]`, `int64 value ${v} does not fit a JavaScript number`);
    }
    out[i] = Number(v);
  }
  return out;
}
