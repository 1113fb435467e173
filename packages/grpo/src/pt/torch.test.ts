import { readFileSync } from 'node:fs';
import { VimeError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { dumpsGolden } from '../__fixtures__/golden.js';
import { isTensor, loadTorchFile, type TorchTensor, tensorNumbers } from './torch.js';

const fixture = (name: string) =>
  new Uint8Array(readFileSync(new URL(`../__fixtures__/${name}`, import.meta.url)));
const manifest = (dir: string) =>
  (
    JSON.parse(readFileSync(`${dumpsGolden}${dir}manifest.json`, 'utf8')) as {
      files: Array<{ path: string; sidecar: string }>;
    }
  ).files;

/** Convert a loaded value the way the sidecar's `content` was written (tensor → {dtype, shape, data}). */
function toSidecar(value: unknown): unknown {
  if (isTensor(value)) {
    const numbers = Array.from(tensorNumbers(value));
    const nest = (offset: number, dims: number[]): unknown => {
      if (dims.length === 0) return numbers[offset];
      const [d, ...rest] = dims;
      const step = rest.reduce((a, b) => a * b, 1);
      return Array.from({ length: d! }, (_, i) => nest(offset + i * step, rest));
    };
    return { dtype: value.dtype, shape: value.shape, data: nest(0, value.shape) };
  }
  if (Array.isArray(value)) return value.map(toSidecar);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toSidecar(v)]));
  }
  return value;
}

describe('golden: slime trainer dumps decode to the sidecar content', () => {
  for (const dir of ['', 'cuda/']) {
    for (const file of manifest(dir)) {
      it(`${dir}${file.path}`, () => {
        const loaded = loadTorchFile(
          new Uint8Array(readFileSync(`${dumpsGolden}${dir}${file.path}`)),
          file.path,
        );
        const sidecar = JSON.parse(readFileSync(`${dumpsGolden}${dir}${file.sidecar}`, 'utf8')) as {
          content: unknown;
          archive: { zip_root: string };
        };
        expect(loaded.root, `${dir}${file.path}: zip root`).toBe(sidecar.archive.zip_root);
        expect(toSidecar(loaded.value), `${dir}${file.path}: content`).toEqual(sidecar.content);
      });
    }
  }

  it('keeps key order of the trainer columns', () => {
    const loaded = loadTorchFile(new Uint8Array(readFileSync(`${dumpsGolden}grpo_binary/train_data/3.pt`)));
    const sample = (loaded.value as { samples: Array<Record<string, unknown>> }).samples[0]!;
    expect(Object.keys(sample).slice(0, 3)).toEqual([
      'data_parallel_rank',
      'sample_index',
      'rollout_position',
    ]);
  });
});

describe('views, dtypes and nesting written by torch.save', () => {
  const { value } = loadTorchFile(fixture('views.pt'));
  const v = value as {
    [k in
      | 'transposed'
      | 'stepped'
      | 'column'
      | 'scalar_view'
      | 'empty'
      | 'bf16'
      | 'f16'
      | 'f64'
      | 'i64'
      | 'i32'
      | 'mask']: TorchTensor;
  } & { nested: Record<string, unknown> };
  const base = Array.from({ length: 24 }, (_, i) => i);

  it('materializes non-contiguous views with offsets and strides', () => {
    expect(v.transposed.shape).toEqual([6, 4]);
    expect(Array.from(v.transposed.data as Float32Array)).toEqual(
      Array.from({ length: 24 }, (_, i) => base[(i % 4) * 6 + Math.floor(i / 4)]),
    );
    expect(v.stepped.shape).toEqual([3, 3]);
    expect(Array.from(v.stepped.data as Float32Array)).toEqual([6, 8, 10, 12, 14, 16, 18, 20, 22]);
    expect(Array.from(v.column.data as Float32Array)).toEqual([3, 9, 15, 21]);
    expect(v.scalar_view.shape).toEqual([]);
    expect(Array.from(v.scalar_view.data as Float32Array)).toEqual([17]);
    expect(v.empty.shape).toEqual([0]);
  });

  it('reads a Node Buffer as given (readFileSync), whose slice() is a view', () => {
    const path = new URL('../__fixtures__/views.pt', import.meta.url);
    const fromBuffer = loadTorchFile(readFileSync(path)).value as Record<string, TorchTensor>;
    const fromCopy = loadTorchFile(new Uint8Array(readFileSync(path))).value as Record<string, TorchTensor>;
    for (const key of Object.keys(fromCopy))
      if (isTensor(fromCopy[key]))
        expect(Array.from(fromBuffer[key]!.data as Float32Array), key).toEqual(
          Array.from(fromCopy[key]!.data as Float32Array),
        );
  });

  it('reads every dtype', () => {
    expect(v.bf16.dtype).toBe('bfloat16');
    expect(Array.from(v.bf16.data as Float32Array)).toEqual([1.5, -2.25, 0.0030059814453125, 65536]);
    expect(v.f16.dtype).toBe('float16');
    expect(Array.from(v.f16.data as Float32Array)).toEqual([1.5, -2.25, 0.00006097555160522461, 65504]);
    expect(Array.from(v.f64.data as Float64Array)).toEqual([0.1, 0.2, 0.3, 0.4]);
    expect(v.i64.dtype).toBe('int64');
    expect(Array.from(tensorNumbers(v.i64))).toEqual([2 ** 40, -3, 7]);
    expect(Array.from(v.i32.data as Int32Array)).toEqual([1, -2, 3]);
    expect(v.mask.dtype).toBe('bool');
    expect(Array.from(v.mask.data as Uint8Array)).toEqual([1, 0, 1]);
  });

  it('reads nested Python values', () => {
    expect(v.nested).toEqual({
      list: [1, 2.5, null, true, 's'],
      tuple: [1, [2, 3]],
      big: 2n ** 70n,
      neg: -(2 ** 40),
    });
  });
});

describe('refuses what is not a tensor dump', () => {
  const refuse = (bytes: Uint8Array, message: RegExp) => {
    let error: unknown;
    try {
      loadTorchFile(bytes, 'input.pt');
    } catch (e) {
      error = e;
    }
    expect(VimeError.isInstance(error)).toBe(true);
    expect((error as Error).message).toMatch(message);
  };
  it('a pickle that calls os.system', () =>
    refuse(fixture('evil.pt'), /refusing pickle global posix\.system|refusing pickle global os\.system/));
  it('a file that is not a zip', () =>
    refuse(new TextEncoder().encode('{"samples": []}'), /not a zip archive/));
  it('a truncated file', () => {
    const bytes = new Uint8Array(readFileSync(`${dumpsGolden}grpo_binary/train_data/3.pt`));
    refuse(bytes.subarray(0, 4000), /not a zip archive|broken|past the end/);
  });
  const dump = () => new Uint8Array(readFileSync(`${dumpsGolden}grpo_binary/train_data/3.pt`));
  it('a central directory entry whose extra field runs past the end', () => {
    const bytes = dump();
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    let last = -1;
    for (let i = 0; i + 4 <= bytes.length; i++) if (view.getUint32(i, true) === 0x02014b50) last = i;
    view.setUint16(last + 30, 0xffff, true);
    refuse(bytes, /runs past/);
  });
  it('a pickle GLOBAL whose module name is not UTF-8', () => {
    const bytes = dump();
    const at = Buffer.from(bytes).indexOf('torch._utils\n');
    bytes[at] = 0xff;
    refuse(bytes, /not valid UTF-8/);
  });
  it('any corruption of the bytes is a decode error naming the file, never a raw exception', () => {
    const base = dump();
    let seed = 7;
    const next = () => {
      seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff;
      return seed;
    };
    for (let t = 0; t < 300; t++) {
      const bytes = base.slice();
      for (let k = 1 + (next() % 8); k > 0; k--) bytes[next() % bytes.length] = next() & 255;
      try {
        loadTorchFile(bytes, 'input.pt');
      } catch (error) {
        expect(VimeError.isInstance(error), String(error)).toBe(true);
      }
    }
  });
});
