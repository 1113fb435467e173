import { createSample, VimeError } from '@vime/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { normalizeThenSum, sumThenNormalize } from '../trainers/trl.js';
import { grpoAdvantages } from './advantages.js';
import {
  drGrpoAdvantages,
  gpgAdvantages,
  grpoPassKAdvantages,
  opoAdvantages,
  reinforceBaselineAdvantages,
  rlooAdvantages,
} from './estimators.js';
import { PRESETS } from './presets.js';
import { collapseSessions, fanoutRowsOf, sessionAdvantages } from './sessions.js';

const f = Math.fround;
const list = (x: ArrayLike<number>) => Array.from(x);

describe('uniform groups', () => {
  it('give exactly 0, where torch float32 leaves a residual', () => {
    // slime: torch.tensor([0.7] * 12).mean() != 0.7 in float32, so every sample gets +0.1192.
    expect(list(grpoAdvantages(Array(12).fill(0.7), { groupSize: 12 }))).toEqual(Array(12).fill(0));
  });
});

describe('sequence-level estimators', () => {
  it('RLOO: r minus the mean of the others; a singleton keeps its reward (loop) or gets 0 (vectorized)', () => {
    const a = rlooAdvantages([1, 0, 0, 1, 5], {
      groups: [0, 0, 0, 0, 1],
      allowUnevenGroups: true,
      dtype: 'float64',
    });
    expect(
      list(a)
        .slice(0, 4)
        .map((x) => +x.toFixed(12)),
    ).toEqual([1 - 1 / 3, -2 / 3, -2 / 3, 1 - 1 / 3].map((x) => +x.toFixed(12)));
    expect(a[4]).toBe(5);
    expect(rlooAdvantages([5], { groupSize: 1, vectorized: true })[0]).toBe(0);
  });

  it('REINFORCE++-baseline and Dr.GRPO: mean-centring only', () => {
    expect(list(reinforceBaselineAdvantages([1, 0, 0, 0, 2, 2, 2, 6], { groupSize: 4 }))).toEqual([
      0.75, -0.25, -0.25, -0.25, -1, -1, -1, 3,
    ]);
    expect(list(drGrpoAdvantages([0.9, 0.1, 0.4, 0.6], { groupSize: 4 }))).toEqual(
      list(grpoAdvantages([0.9, 0.1, 0.4, 0.6], { groupSize: 4, stdNormalization: false })),
    );
  });

  it('GRPO pass@k: only the best sample gets r_max − r_second', () => {
    const a = grpoPassKAdvantages([0.2, 0.9, 0.5, 0.9, 1, 0, 0, 0], {
      groupSize: 4,
      stdNormalization: false,
      dtype: 'float64',
    });
    expect(list(a)).toEqual([0, 0, 0, 0, 1, 0, 0, 0]);
    const b = grpoPassKAdvantages([0, 1, 0, 0], { groupSize: 4 });
    expect(b[1]).toBe(f(1 / f(f(0.5) + f(1e-6))));
    expect(() => grpoPassKAdvantages([1], { groupSize: 1 })).toThrow(/at least 2/);
  });

  it('OPO: length-weighted baseline', () => {
    const a = opoAdvantages([1, 0], [3, 1], { groupSize: 2, dtype: 'float64' });
    expect(list(a)).toEqual([0.25, -0.75]);
    expect(() => opoAdvantages([1, 0], [3], { groupSize: 2 })).toThrow(/lengths.*1 entries/);
  });

  it('GPG: α = B / #non-zero rewards', () => {
    const a = gpgAdvantages([1, 0, 0, 0, 0, 0, 0, 0], { groupSize: 4, dtype: 'float64' });
    expect(list(a)).toEqual([6, -2, -2, -2, 0, 0, 0, 0]);
  });

  it('multi-reward: sum then normalize, normalize then sum', () => {
    const acc = [1, 0, 0, 1];
    const fmt = [0.5, 0.5, Number.NaN, 0.5];
    const summed = sumThenNormalize([acc, fmt], { groupSize: 4, weights: [1, 2] });
    expect(list(summed)).toEqual(list(grpoAdvantages([2, 1, 0, 2], { groupSize: 4, preset: 'trl' })));
    // A sample no function scored: advantage 0 (TRL), not an error.
    expect(list(sumThenNormalize([[null, 1, 0, 1]], { groupSize: 4 }))[0]).toBe(0);
    const gdpo = normalizeThenSum([acc, [0.2, 0.4, 0.6, 0.8]], { groupSize: 4 });
    const mean = list(gdpo).reduce((a, b) => a + b) / 4;
    expect(Math.abs(mean)).toBeLessThan(1e-6);
    expect(() => sumThenNormalize([acc, [1, 2]], { groupSize: 4 })).toThrow(/rewardsPerFunc\[1\]/);
    expect(() => sumThenNormalize([['x' as unknown as number]], { groupSize: 1 })).toThrow(
      /rewardsPerFunc\[0\]\[0\]/,
    );
  });
});

describe('session-level rewards (fan-out rows)', () => {
  // Prompt 0: session a (3 rows, solved), session b (1 row, failed); prompt 1: c and d.
  const rows = {
    sessionIds: ['a', 'a', 'a', 'b', 'c', 'd', 'd'],
    rewards: [1, 1, 1, 0, 1, 0, 0],
    groups: [0, 0, 0, 0, 1, 1, 1],
  };

  it('counts each session once in its group', () => {
    const collapsed = collapseSessions(rows);
    expect(collapsed.sessions).toEqual(['a', 'b', 'c', 'd']);
    expect(list(collapsed.rewards)).toEqual([1, 0, 1, 0]);
    const perRow = sessionAdvantages(rows, {});
    const perSession = grpoAdvantages([1, 0, 1, 0], { groupSize: 2 });
    expect(list(perRow)).toEqual([0, 0, 0, 1, 2, 3, 3].map((s) => perSession[s]!));
    // Row-level normalization would weigh session a three times: its advantage shrinks.
    const naive = grpoAdvantages(rows.rewards, { groups: rows.groups, allowUnevenGroups: true });
    expect(naive[0]!).toBeLessThan(perRow[0]!);
  });

  it('refuses a session whose rows disagree', () => {
    expect(() => collapseSessions({ ...rows, rewards: [1, 0.5, 1, 0, 1, 0, 0] })).toThrow(
      /rewards\[1\].*one scalar per session/,
    );
    expect(() => collapseSessions({ ...rows, groups: [0, 1, 0, 0, 1, 1, 1] })).toThrow(/groups\[1\]/);
  });

  it('reads session_id / rollout_id from samples', () => {
    const samples = rows.sessionIds.map((id, i) =>
      createSample({
        session_id: id,
        reward: rows.rewards[i]!,
        group_index: rows.groups[i]!,
        status: 'completed',
      }),
    );
    expect(fanoutRowsOf(samples).sessionIds).toEqual(rows.sessionIds);
    let error: unknown;
    try {
      fanoutRowsOf([createSample({ group_index: 0, reward: 1 })]);
    } catch (e) {
      error = e;
    }
    expect(VimeError.isInstance(error)).toBe(true);
  });
});

describe('properties (fast-check)', () => {
  const groupSize = fc.integer({ min: 2, max: 16 });
  const reward = fc.double({ min: -100, max: 100, noNaN: true, noDefaultInfinity: true });
  const batch = groupSize
    .chain((n) =>
      fc.record({
        n: fc.constant(n),
        rewards: fc
          .array(reward, { minLength: n, maxLength: n * 6 })
          .map((r) => r.slice(0, r.length - (r.length % n))),
      }),
    )
    .filter((b) => b.rewards.length > 0);
  const presets = fc.constantFrom(...PRESETS);

  it('uniform groups give zeros', () => {
    fc.assert(
      fc.property(
        groupSize,
        fc.array(reward, { minLength: 1, maxLength: 8 }),
        presets,
        (n, levels, preset) => {
          const rewards = levels.flatMap((v) => Array(n).fill(v));
          return grpoAdvantages(rewards, { groupSize: n, preset }).every((a) => a === 0);
        },
      ),
    );
  });

  it('group means of the advantages are zero', () => {
    // verl's vectorized statistics are float32 whatever the dtype, so its float64 means are not exact.
    const float64Presets = fc.constantFrom(...PRESETS.filter((p) => p !== 'verlVectorized'));
    fc.assert(
      fc.property(batch, float64Presets, ({ n, rewards }, preset) => {
        const a = grpoAdvantages(rewards, { groupSize: n, preset, dtype: 'float64' });
        for (let g = 0; g < a.length; g += n) {
          const group = Array.from(a.subarray(g, g + n));
          const mean = group.reduce((x, y) => x + y, 0) / n;
          // Rounding of the centred rewards (≈ n·ulp(max |r|)) is amplified by 1/(std + ε).
          const r = rewards.slice(g, g + n);
          const m = r.reduce((x, y) => x + y, 0) / n;
          const std = Math.sqrt(r.reduce((x, y) => x + (y - m) ** 2, 0) / (n - 1));
          const bound = (n * 4e-16 * Math.max(1, ...r.map(Math.abs))) / (std + 1e-9) + 1e-12;
          if (Math.abs(mean) > bound) return false;
        }
        return true;
      }),
    );
  });

  it('shift-invariant, and scale-invariant with std normalization', () => {
    fc.assert(
      fc.property(
        batch,
        fc.double({ min: -50, max: 50, noNaN: true }),
        fc.double({ min: 0.5, max: 20, noNaN: true }),
        ({ n, rewards }, shift, scale) => {
          const base = grpoAdvantages(rewards, { groupSize: n, dtype: 'float64', epsilon: 0 });
          const shifted = grpoAdvantages(
            rewards.map((r) => r + shift),
            { groupSize: n, dtype: 'float64', epsilon: 0 },
          );
          const scaled = grpoAdvantages(
            rewards.map((r) => r * scale),
            { groupSize: n, dtype: 'float64', epsilon: 0 },
          );
          const near = (a: number, b: number) =>
            (Number.isNaN(a) && Number.isNaN(b)) || Math.abs(a - b) <= 1e-6 * Math.max(1, Math.abs(b));
          const centred = grpoAdvantages(rewards, {
            groupSize: n,
            dtype: 'float64',
            stdNormalization: false,
          });
          const centredShifted = grpoAdvantages(
            rewards.map((r) => r + shift),
            { groupSize: n, dtype: 'float64', stdNormalization: false },
          );
          // A group whose spread vanishes against the shift loses its precision; skip those.
          return base.every((a, i) => {
            const g = Math.floor(i / n) * n;
            const spread = Math.max(...rewards.slice(g, g + n)) - Math.min(...rewards.slice(g, g + n));
            if (spread < 1e-6 * Math.max(1, Math.abs(shift))) return true;
            return near(shifted[i]!, a) && near(scaled[i]!, a) && near(centredShifted[i]!, centred[i]!);
          });
        },
      ),
    );
  });

  it('permuting within a group permutes the outputs', () => {
    fc.assert(
      fc.property(
        batch.chain((b) =>
          fc.record({
            b: fc.constant(b),
            seed: fc.array(fc.nat(), { minLength: b.rewards.length, maxLength: b.rewards.length }),
          }),
        ),
        // verl's vectorized statistics are one-pass float32 sums at every dtype, as verl computes them:
        // their rounding depends on the order of the samples, so they are not exactly equivariant.
        fc.constantFrom(...PRESETS.filter((p) => p !== 'verlVectorized')),
        ({ b: { n, rewards }, seed }, preset) => {
          const perm = rewards.map((_, i) => i);
          for (let g = 0; g < perm.length; g += n) {
            const block = perm.slice(g, g + n).sort((x, y) => seed[x]! - seed[y]! || x - y);
            perm.splice(g, n, ...block);
          }
          const a = grpoAdvantages(rewards, { groupSize: n, preset });
          const p = grpoAdvantages(
            perm.map((i) => rewards[i]!),
            { groupSize: n, preset, dtype: 'float64' },
          );
          const a64 = grpoAdvantages(rewards, { groupSize: n, preset, dtype: 'float64' });
          // float64 is exactly permutation-equivariant; float32 follows torch's fixed summation order.
          return (
            perm.every((src, i) => Math.abs(p[i]! - a64[src]!) <= 1e-12 * Math.max(1, Math.abs(a64[src]!))) &&
            a.length === p.length
          );
        },
      ),
    );
  });

  it('keyed groups equal positional blocks, whatever the order', () => {
    fc.assert(
      fc.property(batch, ({ n, rewards }) => {
        const order = rewards.map((_, i) => i).reverse();
        const keys = order.map((i) => `prompt-${Math.floor(i / n)}`);
        const byKey = grpoAdvantages(
          order.map((i) => rewards[i]!),
          { groups: keys },
        );
        const byBlock = grpoAdvantages(rewards, { groupSize: n });
        return order.every(
          (src, i) => Math.abs(byKey[i]! - byBlock[src]!) <= 1e-6 + 1e-5 * Math.abs(byBlock[src]!),
        );
      }),
    );
  });
});
