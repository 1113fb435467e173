import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { broadcastSimd } from './broadcast.js';

/** value × mask per token, as float32 bits: the value, or ±0 with its sign. */
function reference(values: Float32Array, lengths: number[], mask: Uint8Array | null): Int32Array {
  const bits = new Int32Array(values.buffer);
  const out = new Int32Array(lengths.reduce((a, b) => a + b, 0));
  let t = 0;
  lengths.forEach((len, i) => {
    for (let k = 0; k < len; k++, t++) out[t] = mask && mask[t] === 0 ? bits[i]! & 0x80000000 : bits[i]!;
  });
  return out;
}

/** The first token where the two differ, or -1 (`toEqual` on 100,000-element arrays is slow). */
function firstDifference(a: Int32Array, b: Int32Array): number {
  if (a.length !== b.length) return Math.min(a.length, b.length);
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
}

describe('broadcastSimd', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
    vi.resetModules();
  });

  it('writes every token bit for bit across chunk boundaries: empty, 1-token and 10,000-token responses, any mask bytes', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.constantFrom(0, 1, 15, 16, 17, 4095, 4096, 4097), fc.nat(10_000)), {
          minLength: 1,
          maxLength: 12,
        }),
        fc.boolean(),
        fc.integer(),
        (lengths, masked, seed) => {
          const total = lengths.reduce((a, b) => a + b, 0);
          const values = Float32Array.from(lengths, (_, i) => (i % 2 ? -1 : 1) * (i + 0.25) * 1e-3);
          let s = seed >>> 0;
          const mask = masked
            ? Uint8Array.from({ length: total }, () => {
                s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
                return [0, 1, 1, 1, 2, 255][s % 6]!;
              })
            : null;
          // an output view at a 4-byte offset: the kernel's memory is copied out, so any alignment works
          const out = new Float32Array(total + 1).subarray(1);
          expect(broadcastSimd(new Int32Array(values.buffer), lengths, mask, out)).toBe(true);
          expect(
            firstDifference(new Int32Array(out.buffer, 4, total), reference(values, lengths, mask)),
          ).toBe(-1);
        },
      ),
      { numRuns: 100 },
    );
  });

  it('keeps what an earlier, larger batch grew the memory to, and stays exact for a smaller one', () => {
    for (const n of [50_000, 3, 20_000]) {
      const lengths = Array.from({ length: n }, (_, i) => (i * 7) % 40);
      const values = Float32Array.from(lengths, (_, i) => i - n / 2);
      const total = lengths.reduce((a, b) => a + b, 0);
      const mask = Uint8Array.from({ length: total }, (_, t) => (t % 97 < 87 ? 1 : 0));
      const out = new Float32Array(total);
      expect(broadcastSimd(new Int32Array(values.buffer), lengths, mask, out)).toBe(true);
      expect(firstDifference(new Int32Array(out.buffer), reference(values, lengths, mask))).toBe(-1);
    }
  });

  it('without WebAssembly (node --jitless) it declines, and broadcastToTokens takes the scalar path', async () => {
    vi.resetModules();
    const simd = await import('./broadcast.js');
    const { broadcastToTokens } = await import('../tokens/tokens.js');
    // Hidden only while the fresh module first looks for it (synchronously: nothing else runs meanwhile).
    vi.stubGlobal('WebAssembly', undefined);
    const declined = simd.broadcastSimd(new Int32Array(2), [2, 3], null, new Float32Array(5));
    vi.unstubAllGlobals();
    expect(declined).toBe(false);
    const masked = broadcastToTokens([0.5, -2], [2, 3], Uint8Array.from([1, 0, 1, 0, 1]), {
      mode: 'maskedTokens',
    });
    expect(Array.from(masked)).toEqual([0.5, 0, -2, -0, -2]);
  });
});
