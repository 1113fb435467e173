import { VimeError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { exactCount, expectClose, flat, loadGolden } from '../__fixtures__/golden.js';
import { groupStatistics, grpoAdvantages } from './advantages.js';

describe('golden: slime _post_process_rewards (group normalization)', () => {
  for (const g of loadGolden('slime__post_process_rewards__')) {
    it(g.case, () => {
      const p = g.params as {
        advantage_estimator: string;
        rewards_normalization: boolean;
        grpo_std_normalization: boolean;
        n_samples_per_prompt: number;
        rollout_batch_size: number;
        reward_key: string | null;
      };
      const expected = flat(g.expected.rewards);
      const rewards = p.reward_key
        ? (g.inputs.sample_rewards as Array<Record<string, number>>).map((r) => r[p.reward_key!]!)
        : flat(g.inputs.rewards);
      if (p.reward_key)
        expectClose(rewards, flat(g.expected.raw_rewards), `${g.case}: raw_rewards`, 'float64');
      const normalizes =
        p.rewards_normalization &&
        ['grpo', 'gspo', 'cispo', 'reinforce_plus_plus_baseline'].includes(p.advantage_estimator);
      if (!normalizes) {
        // ppo, reinforce++ and --disable-rewards-normalization pass raw rewards through.
        expectClose(rewards, expected, g.case, 'float64');
        return;
      }
      const std = p.advantage_estimator !== 'reinforce_plus_plus_baseline' && p.grpo_std_normalization;
      const collapses = rewards.length !== p.n_samples_per_prompt * p.rollout_batch_size;
      if (collapses) {
        // slime silently makes ONE group of the batch; Vime refuses, and reproduces it only when asked.
        expect(() => grpoAdvantages(rewards, { groupSize: p.n_samples_per_prompt })).toThrow(/do not split/);
      }
      const groupSize = collapses ? rewards.length : p.n_samples_per_prompt;
      const actual = grpoAdvantages(rewards, { preset: std ? 'slime' : 'drGrpo', groupSize });
      expect(actual, g.case).toBeInstanceOf(Float32Array);
      expectClose(actual, expected, g.case);
      expect(exactCount(actual, expected), `${g.case}: bit-exact values`).toBe(expected.length);
    });
  }
});

describe('golden: grpo_normalize_by_group_index (uneven groups by key)', () => {
  for (const g of loadGolden('slime__grpo_normalize_by_group_index__')) {
    it(g.case, () => {
      const keys = flat(g.inputs.group_index);
      const rewards = flat(g.inputs.rewards);
      const expected = flat(g.expected.rewards);
      const std = g.params.grpo_std_normalization as boolean;
      const options = { groups: keys, preset: std ? 'slime' : 'drGrpo', allowUnevenGroups: true } as const;
      expect(() => grpoAdvantages(rewards, { ...options, allowUnevenGroups: false })).toThrow(/sizes differ/);
      const actual = grpoAdvantages(rewards, options);
      for (let i = 0; i < expected.length; i++) {
        if (Number.isNaN(expected[i])) {
          // torch.std of one element is NaN; Vime applies the singleton policy instead (slime: 0).
          expect(actual[i], `${g.case}[${i}] singleton`).toBe(0);
          expect(() => grpoAdvantages(rewards, { ...options, singleton: 'error' })).toThrow(/single sample/);
        } else {
          expectClose([actual[i]!], [expected[i]!], `${g.case}[${i}]`);
        }
      }
    });
  }
});

describe('groupStatistics', () => {
  it('reports zero-variance groups with a tolerance', () => {
    const stats = groupStatistics([1, 1, 1, 1, 0, 1, 0, 1, 0.5, 0.5 + 1e-9, 0.5, 0.5], { groupSize: 4 });
    expect(stats.zeroVarianceGroups).toEqual([0, 2]);
    expect(stats.zeroVarianceFraction).toBeCloseTo(8 / 12);
    const strict = groupStatistics([0.5, 0.5 + 1e-6, 0.5, 0.5], {
      groupSize: 4,
      dtype: 'float64',
      zeroVarianceTolerance: 0,
    });
    expect(strict.zeroVarianceGroups).toEqual([]);
  });
});

describe('bad input', () => {
  const cases: Array<[string, () => unknown, RegExp]> = [
    ['NaN reward', () => grpoAdvantages([1, Number.NaN, 0, 1], { groupSize: 4 }), /rewards\[1\].*finite/],
    ['empty batch', () => grpoAdvantages([], { groupSize: 4 }), /empty/],
    [
      'groups length mismatch',
      () => grpoAdvantages([1, 0, 1], { groups: [0, 0] }),
      /groups.*2 keys.*3 rewards/,
    ],
    ['group size not dividing', () => grpoAdvantages([1, 0, 1], { groupSize: 2 }), /do not split/],
    ['no grouping', () => grpoAdvantages([1, 0], {}), /no grouping/],
    ['both groupings', () => grpoAdvantages([1, 0], { groupSize: 2, groups: [0, 0] }), /not both/],
    [
      'bad preset',
      () => grpoAdvantages([1, 0], { groupSize: 2, preset: 'nope' as 'slime' }),
      /unknown preset/,
    ],
    ['negative epsilon', () => grpoAdvantages([1, 0], { groupSize: 2, epsilon: -1 }), /epsilon/],
  ];
  for (const [name, run, message] of cases) {
    it(name, () => {
      let error: unknown;
      try {
        run();
      } catch (e) {
        error = e;
      }
      expect(VimeError.isInstance(error), `${name} throws a VimeError`).toBe(true);
      expect((error as Error).message).toMatch(message);
    });
  }

  it('group size 1 under each singleton policy', () => {
    const rewards = [0.75, 0.25];
    expect(Array.from(grpoAdvantages(rewards, { groupSize: 1, singleton: 'zero' }))).toEqual([0, 0]);
    expect(Array.from(grpoAdvantages(rewards, { groupSize: 1, preset: 'verl' }))).toEqual([
      Math.fround(0.75 / Math.fround(1 + Math.fround(1e-6))),
      Math.fround(0.25 / Math.fround(1 + Math.fround(1e-6))),
    ]);
    expect(
      Array.from(grpoAdvantages(rewards, { groupSize: 1, singleton: 'raw', stdNormalization: false })),
    ).toEqual(rewards);
    expect(() => grpoAdvantages(rewards, { groupSize: 1, singleton: 'error' })).toThrow(
      /groups\[0\].*single sample/,
    );
    expect(() => grpoAdvantages(rewards, { groupSize: 1, preset: 'openrlhf' })).toThrow(VimeError);
  });
});
