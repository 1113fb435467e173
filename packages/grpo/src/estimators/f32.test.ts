import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { grpoAdvantages, normalizeGroups } from './advantages.js';
import { torchSumF32 } from './f32.js';
import { resolveGroups } from './groups.js';
import { resolveConventions } from './presets.js';

/** Recorded with torch 1.13 on CPU by __fixtures__/make_fixtures.py. */
const recorded = JSON.parse(
  readFileSync(new URL('../__fixtures__/torch_sums.json', import.meta.url), 'utf8'),
) as {
  sums: Array<{ values: number[]; sum: number; mean: number }>;
  uniform_groups: Array<{ value: number; n: number; advantage: number }>;
  groups: Array<{ rewards: number[]; advantages: number[] }>;
};

describe('float32 emulation of torch CPU reductions', () => {
  for (const { values, sum, mean } of recorded.sums) {
    it(`sum and mean of ${values.length} values are bit-exact`, () => {
      const x = Float32Array.from(values);
      expect(torchSumF32(x)).toBe(sum);
      expect(Math.fround(torchSumF32(x) / x.length)).toBe(mean);
    });
  }

  it('group normalization of 120 recorded random groups (sizes 2–64) is bit-exact', () => {
    for (const [i, { rewards, advantages }] of recorded.groups.entries()) {
      const actual = grpoAdvantages(rewards, { groupSize: rewards.length, preset: 'slime' });
      expect(Array.from(actual), `group ${i} (${rewards.length} rewards)`).toEqual(advantages);
    }
  });

  it("reproduces slime's non-zero advantages for uniform groups (trainer residual) and avoids them by default", () => {
    for (const { value, n, advantage } of recorded.uniform_groups) {
      const c = resolveConventions({ preset: 'slime' });
      const rewards = Array(n).fill(value);
      const emulated = normalizeGroups(rewards, resolveGroups(n, { groupSize: n }), c, {
        trainerResidual: true,
      });
      expect(emulated[0], `${n} × ${value}`).toBe(advantage);
      expect(Array.from(grpoAdvantages(rewards, { groupSize: n }))).toEqual(Array(n).fill(0));
    }
  });
});
