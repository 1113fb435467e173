import { VimeError } from '@vime/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { broadcastToTokens, splitTokens } from './tokens.js';

const list = (x: ArrayLike<number>) => Array.from(x);

function throwsVime(run: () => unknown, message: RegExp) {
  let error: unknown;
  try {
    run();
  } catch (e) {
    error = e;
  }
  expect(VimeError.isInstance(error), `expected a VimeError matching ${message}`).toBe(true);
  expect((error as Error).message).toMatch(message);
}

describe('broadcastToTokens', () => {
  const adv = [0.5, -1.5];
  const lengths = [3, 4];
  const masks = [
    [1, 0, 1],
    [1, 1, 0, 0],
  ];

  it('slime keeps values on masked tokens, verl zeroes them', () => {
    expect(list(broadcastToTokens(adv, lengths, masks, { mode: 'allTokens' }))).toEqual([
      0.5, 0.5, 0.5, -1.5, -1.5, -1.5, -1.5,
    ]);
    // verl's `advantage × mask`: a negative advantage leaves −0.
    expect(list(broadcastToTokens(adv, lengths, masks, { mode: 'maskedTokens' }))).toEqual([
      0.5, 0, 0.5, -1.5, -1.5, -0, -0,
    ]);
    expect(list(broadcastToTokens(adv, lengths, null))).toEqual([0.5, 0.5, 0.5, -1.5, -1.5, -1.5, -1.5]);
    const split = splitTokens(broadcastToTokens(adv, lengths, masks, { mode: 'maskedTokens' }), lengths);
    expect(split.map(list)).toEqual([
      [0.5, 0, 0.5],
      [-1.5, -1.5, -0, -0],
    ]);
  });

  it('long responses (native fill, fill-then-zero) match a per-token reference in both modes', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            len: fc.integer({ min: 0, max: 1200 }),
            zeros: fc.array(fc.nat(1199), { maxLength: 30 }),
          }),
          {
            minLength: 1,
            maxLength: 5,
          },
        ),
        fc.nat(7),
        fc.constantFrom('allTokens', 'maskedTokens') as fc.Arbitrary<'allTokens' | 'maskedTokens'>,
        (samples, shift, mode) => {
          const lens = samples.map((s) => s.len);
          const backing = new Uint8Array(shift + lens.reduce((x, y) => x + y, 0));
          const mask = backing.subarray(shift).fill(1);
          let at = 0;
          for (const s of samples) {
            for (const z of s.zeros) if (z < s.len) mask[at + z] = 0;
            at += s.len;
          }
          const a = samples.map((_, i) => i + 0.5);
          const out = broadcastToTokens(a, lens, mask, { mode });
          let t = 0;
          for (let i = 0; i < samples.length; i++) {
            for (let k = 0; k < lens[i]!; k++, t++) {
              if (out[t] !== (mode === 'allTokens' || mask[t] ? a[i] : 0)) return false;
            }
          }
          return true;
        },
      ),
      { numRuns: 200 },
    );
  });

  it('a flat mask at any byte offset gives the same result as per-sample masks', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            a: fc.double({ min: -5, max: 5, noNaN: true }),
            mask: fc.array(fc.constantFrom(0, 1, 1, 1), { maxLength: 40 }),
          }),
          {
            minLength: 1,
            maxLength: 12,
          },
        ),
        fc.nat(7),
        (samples, shift) => {
          const lens = samples.map((s) => s.mask.length);
          const backing = new Uint8Array(shift + lens.reduce((x, y) => x + y, 0));
          const flatMask = backing.subarray(shift);
          flatMask.set(samples.flatMap((s) => s.mask));
          const a = samples.map((s) => s.a);
          const fromFlat = broadcastToTokens(a, lens, flatMask, { mode: 'maskedTokens' });
          const expected = samples.flatMap((s) => s.mask.map((m) => (m ? Math.fround(s.a) : 0)));
          return list(fromFlat).every((v, i) => Object.is(v, expected[i]) || (v === 0 && expected[i] === 0));
        },
      ),
    );
  });

  it('matches value × mask bit for bit: any value (±0, NaN, ±Infinity, subnormal), length, mask, and output alignment', () => {
    const value = fc.oneof(
      fc.double({ noNaN: false }),
      fc.constantFrom(0, -0, Number.NaN, Infinity, -Infinity, 1e-45, -1e-40, 3.4e38),
    );
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            a: value,
            mask: fc.array(fc.constantFrom(0, 1, 1, 1, 1, 2, 3, 255), { maxLength: 70 }),
          }),
          {
            minLength: 1,
            maxLength: 10,
          },
        ),
        fc.nat(3),
        fc.constantFrom('allTokens', 'maskedTokens') as fc.Arbitrary<'allTokens' | 'maskedTokens'>,
        (samples, shift, mode) => {
          const lens = samples.map((s) => s.mask.length);
          const total = lens.reduce((x, y) => x + y, 0);
          const mask = Uint8Array.from(samples.flatMap((s) => s.mask));
          // An output view at a 4-byte (not 8-byte) offset takes the 4-byte store path.
          const out = new Float32Array(total + shift).subarray(shift);
          const a = samples.map((s) => s.a);
          broadcastToTokens(a, lens, mask, { mode, out });
          const fresh = broadcastToTokens(a, lens, mask, { mode });
          let t = 0;
          for (let i = 0; i < samples.length; i++) {
            const v = Math.fround(a[i]!);
            for (let k = 0; k < lens[i]!; k++, t++) {
              const expected = mode === 'allTokens' || mask[t] ? v : v * 0;
              if (!Object.is(out[t], expected) || !Object.is(fresh[t], expected)) return false;
            }
          }
          return true;
        },
      ),
      { numRuns: 300 },
    );
  });

  it('writes into a reused array', () => {
    const out = new Float32Array(7).fill(9);
    expect(broadcastToTokens(adv, lengths, masks, { mode: 'maskedTokens', out })).toBe(out);
    expect(list(out)).toEqual([0.5, 0, 0.5, -1.5, -1.5, -0, -0]);
    throwsVime(
      () => broadcastToTokens(adv, lengths, masks, { out: new Float32Array(3) }),
      /out.*3 elements.*7 tokens/,
    );
  });

  it('bad input names the field', () => {
    throwsVime(() => broadcastToTokens(adv, [3], masks), /responseLengths.*1 entries.*2 samples/);
    throwsVime(() => broadcastToTokens(adv, [3, -1], masks), /responseLengths\[1\].*non-negative/);
    throwsVime(
      () => broadcastToTokens(adv, lengths, [[1, 1, 1], [1]], { mode: 'maskedTokens' }),
      /lossMasks\[1\].*4 tokens/,
    );
    throwsVime(
      () => broadcastToTokens(adv, lengths, new Uint8Array(5), { mode: 'maskedTokens' }),
      /flat mask has 5.*7 tokens/,
    );
    throwsVime(() => broadcastToTokens(adv, lengths, null, { mode: 'maskedTokens' }), /needs the loss masks/);
    throwsVime(() => broadcastToTokens(adv, lengths, masks, { mode: 'some' as 'allTokens' }), /mode/);
  });
});
