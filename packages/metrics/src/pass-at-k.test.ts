import { readFileSync } from 'node:fs';
import { ValidationError } from '@vime/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  countCorrect,
  passAtK,
  passAtKBatch,
  passHatK,
  passHatKBatch,
  powersOfTwoUpTo,
} from './pass-at-k.js';

const golden = (name: string) =>
  JSON.parse(readFileSync(new URL(`../../../golden/grpo/${name}`, import.meta.url), 'utf8'));

// Exact reference: binomials as BigInt, the ratio converted to a double only at the end.
const binomials: bigint[][] = [[1n]];
function binom(n: number, k: number): bigint {
  if (k < 0 || k > n) return 0n;
  for (let m = binomials.length; m <= n; m++) {
    const prev = binomials[m - 1]!;
    const row = [1n];
    for (let j = 1; j < m; j++) row.push(prev[j - 1]! + prev[j]!);
    row.push(1n);
    binomials.push(row);
  }
  return binomials[n]![k]!;
}
/** num/den (≤ 1) to the nearest double: an 80-bit quotient, then one rounding. */
function ratio(num: bigint, den: bigint): number {
  if (num === 0n) return 0;
  const shift = den.toString(2).length - num.toString(2).length + 80;
  return Number((num << BigInt(shift)) / den) * 2 ** -shift;
}
const exactPassAtK = (n: number, c: number, k: number) => ratio(binom(n, k) - binom(n - c, k), binom(n, k));
const exactPassHatK = (n: number, c: number, k: number) => ratio(binom(c, k), binom(n, k));

const close = (a: number, e: number) => Math.abs(a - e) <= 1e-12 + 1e-12 * Math.abs(e);

describe('passAtK', () => {
  it('matches exact rational arithmetic over every n ≤ 200, c ≤ n and a spread of k', () => {
    let checked = 0;
    const failures: string[] = [];
    for (let n = 1; n <= 200; n++) {
      const ks =
        n <= 40 ? Array.from({ length: n }, (_, i) => i + 1) : [1, 2, 3, 5, 8, 16, 32, n >> 1, n - 1, n];
      for (let c = 0; c <= n; c++) {
        for (const k of ks) {
          const got = passAtK({ n, c, k });
          const want = exactPassAtK(n, c, k);
          if (!close(got, want)) failures.push(`n=${n} c=${c} k=${k}: ${got} vs ${want}`);
          const gotHat = passHatK({ n, c, k });
          const wantHat = exactPassHatK(n, c, k);
          // pass^k can be as small as 1/C(200,100); compare relatively.
          if (Math.abs(gotHat - wantHat) > 1e-12 * wantHat) {
            failures.push(`pass^k n=${n} c=${c} k=${k}: ${gotHat} vs ${wantHat}`);
          }
          checked++;
        }
      }
    }
    expect(failures.slice(0, 5)).toEqual([]);
    expect(checked).toBeGreaterThan(100_000);
  });

  it('is exactly 0 with no correct attempt and exactly 1 when every k-subset holds a correct one', () => {
    expect(passAtK({ n: 10, c: 0, k: 10 })).toBe(0);
    expect(passAtK({ n: 10, c: 3, k: 8 })).toBe(1);
    expect(passAtK({ n: 1, c: 1, k: 1 })).toBe(1);
    expect(passHatK({ n: 10, c: 2, k: 3 })).toBe(0);
    expect(passHatK({ n: 10, c: 10, k: 7 })).toBe(1);
  });

  it('stays accurate where the naive 1 − C(n−c,k)/C(n,k) overflows', () => {
    // C(2000, 1000) overflows a double; the product form does not.
    const v = passAtK({ n: 2000, c: 1, k: 1000 });
    expect(v).toBeCloseTo(0.5, 14);
    expect(passAtK({ n: 5000, c: 5, k: 1 })).toBeCloseTo(0.001, 15);
  });

  it('rejects k > n, c > n and non-integers with a ValidationError naming the field', () => {
    expect(() => passAtK({ n: 4, c: 1, k: 5 })).toThrow(ValidationError);
    expect(() => passAtK({ n: 4, c: 1, k: 5 })).toThrow(/k = 5 is outside 1\.\.n \(n = 4\)/);
    expect(() => passAtK({ n: 4, c: 5, k: 1 })).toThrow(/c = 5 correct exceeds n = 4/);
    expect(() => passAtK({ n: 4, c: 1.5, k: 1 })).toThrow(/^c: /);
    expect(() => passHatK({ n: 0, c: 0, k: 1 })).toThrow(/n ≥ 1/);
    expect(() => passAtK({ n: 4, c: 1, k: 0 })).toThrow(/outside 1\.\.n/);
  });

  it('is monotone in k and c, and pass^k never exceeds pass@k', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 300 }), fc.nat(), fc.nat(), (n, cSeed, kSeed) => {
        const c = cSeed % (n + 1);
        const k = (kSeed % n) + 1;
        const v = passAtK({ n, c, k });
        expect(v).toBeGreaterThanOrEqual(0);
        expect(v).toBeLessThanOrEqual(1);
        if (k < n) expect(passAtK({ n, c, k: k + 1 })).toBeGreaterThanOrEqual(v - 1e-15);
        if (c < n) expect(passAtK({ n, c: c + 1, k })).toBeGreaterThanOrEqual(v - 1e-15);
        expect(passHatK({ n, c, k })).toBeLessThanOrEqual(v + 1e-15);
        // pass@1 and pass^1 are both the success fraction.
        expect(passAtK({ n, c, k: 1 })).toBeCloseTo(c / n, 14);
        expect(passHatK({ n, c, k: 1 })).toBeCloseTo(c / n, 14);
      }),
    );
  });
});

describe('batch helpers', () => {
  for (const file of [
    'slime__compute_pass_rate__g4.json',
    'slime__compute_pass_rate__g8.json',
    'slime__compute_pass_rate__g4_nonbinary.json',
  ]) {
    it(`reproduce slime's compute_pass_rate (${file})`, () => {
      const g = golden(file);
      const counts = countCorrect(g.inputs.flat_rewards, g.params.group_size, (r) => r === 1);
      const got = passAtKBatch(counts, powersOfTwoUpTo(g.params.group_size));
      const expected = g.expected.log_dict as Record<string, number>;
      expect(got.map((e) => `pass@${e.k}`)).toEqual(Object.keys(expected));
      for (const e of got) expect(Math.abs(e.value! - expected[`pass@${e.k}`]!)).toBeLessThanOrEqual(1e-12);
    });
  }

  it('leave out problems with fewer than k attempts instead of scoring them 0', () => {
    const got = passAtKBatch(
      [
        { n: 8, c: 1 },
        { n: 2, c: 2 },
      ],
      [1, 4, 16],
    );
    expect(got[0]).toEqual({ k: 1, value: (1 / 8 + 1) / 2, problems: 2, skipped: 0 });
    expect(got[1]).toEqual({ k: 4, value: 0.5, problems: 1, skipped: 1 });
    expect(got[2]).toEqual({ k: 16, value: null, problems: 0, skipped: 2 });
    expect(passHatKBatch([{ n: 4, c: 4 }], [2])[0]!.value).toBe(1);
  });

  it('refuse a flat reward list that does not split into whole groups', () => {
    expect(() => countCorrect([1, 0, 1], 2, (r) => r === 1)).toThrow(/not a multiple of groupSize 2/);
    expect(powersOfTwoUpTo(12)).toEqual([1, 2, 4, 8]);
  });
});
