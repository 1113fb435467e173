/**
 * The token broadcast in WebAssembly SIMD (`broadcast.wat`): 4,096 tokens at a time are written into
 * the module's memory, where they stay in cache, and copied out with one native `set`. Scalar
 * JavaScript stores 8 bytes at a time at best; this stores 16 and tests 16 mask bytes at once, which
 * is what short responses and masks need. The module keeps 8 bytes per response plus 20 KiB of
 * memory between calls.
 */
import { BROADCAST_WASM } from './broadcast-wasm.js';

/** Tokens per step: their output (16 KiB) and mask bytes (4 KiB) stay in the first cache levels. */
const CHUNK = 4096;
/** Memory the kernel may take (wasm32 addresses 4 GiB); a larger batch takes the scalar path. */
const MAX_BYTES = 2 ** 30;

/** The module's exports. (WebAssembly's types ship with the DOM library, not with Node's.) */
interface Kernel {
  memory: { buffer: ArrayBuffer; grow(pages: number): number };
  fill: (...args: number[]) => number;
  off: { value: number };
}

interface WebAssemblyApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object) => { exports: unknown };
}

/** Compiled on first use; null where WebAssembly (or its SIMD) is missing, e.g. under `--jitless`. */
let kernel: Kernel | null | undefined;

function loadKernel(): Kernel | null {
  if (kernel !== undefined) return kernel;
  try {
    const api = (globalThis as { WebAssembly?: WebAssemblyApi | undefined }).WebAssembly!;
    const instance = new api.Instance(new api.Module(Buffer.from(BROADCAST_WASM, 'base64')));
    const { memory, fill, off } = instance.exports as Kernel;
    kernel = { memory, fill, off };
  } catch {
    kernel = null;
  }
  return kernel;
}

/**
 * Write each response's value (float32 `bits`) over its tokens into `out`; with `mask`, a token whose
 * mask byte is 0 gets ±0 with the value's sign (finite values only: `value × 0`). The lengths are
 * validated and sum to `out.length`. Returns false, writing nothing, where the kernel cannot run.
 */
export function broadcastSimd(
  bits: Int32Array,
  lengths: ArrayLike<number>,
  mask: Uint8Array | null,
  out: Float32Array,
): boolean {
  const k = loadKernel();
  const n = bits.length;
  const bitsAt = n * 4;
  const maskAt = (n * 8 + 15) & ~15;
  const outAt = maskAt + CHUNK;
  const needed = outAt + CHUNK * 4;
  if (!k || needed > MAX_BYTES) return false;
  if (k.memory.buffer.byteLength < needed) {
    try {
      k.memory.grow(Math.ceil((needed - k.memory.buffer.byteLength) / 65_536));
    } catch {
      return false; // no memory for it: the scalar path needs none
    }
  }
  const buffer = k.memory.buffer;
  new Int32Array(buffer, 0, n).set(lengths);
  new Int32Array(buffer, bitsAt, n).set(bits);
  const maskChunk = new Uint8Array(buffer, maskAt, CHUNK);
  const outChunk = new Float32Array(buffer, outAt, CHUNK);
  const total = out.length;
  let response = 0;
  let offset = 0;
  for (let from = 0; from < total; from += CHUNK) {
    const count = Math.min(CHUNK, total - from);
    if (mask) maskChunk.set(mask.subarray(from, from + count));
    response = k.fill(response, offset, count, mask ? 1 : 0, 0, bitsAt, maskAt, outAt);
    offset = k.off.value;
    out.set(count === CHUNK ? outChunk : outChunk.subarray(0, count), from);
  }
  return true;
}
