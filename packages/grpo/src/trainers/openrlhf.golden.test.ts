/** Every golden file of OpenRLHF's advantage estimators (computed by the pinned upstream code). */
import { describe, expect, it } from 'vitest';
import {
  allGoldenFiles,
  expectClose,
  expectExact,
  flat,
  type GoldenCase,
  loadGolden,
} from '../__fixtures__/golden.js';
import { grpoAdvantages } from '../estimators/advantages.js';
import { type OpenrlhfEstimator, openrlhfAdvantages, openrlhfApproxKl } from './openrlhf.js';

const rows = (x: unknown) => x as number[][];
const num = (x: unknown) => x as number;

function each(prefix: string, run: (g: GoldenCase) => void, keep: (g: GoldenCase) => boolean = () => true) {
  for (const g of loadGolden(prefix, 'openrlhf').filter(keep)) it(g.case, () => run(g));
}

describe('golden: OpenRLHF estimators on the shared reward sets (one action token each)', () => {
  const sequenceLevel = (g: GoldenCase) =>
    !g.case.includes('__tokens__') && !g.case.includes('compute_approx_kl');
  each(
    'openrlhf__',
    (g) => {
      const rewards = flat(g.inputs.rewards);
      const estimator = g.params.estimator as OpenrlhfEstimator;
      const n = num(g.params.n_samples_per_prompt);
      const out = openrlhfAdvantages(
        { rewards, responseLengths: rewards.map(() => 1), actionMasks: rewards.map(() => [1]) },
        { estimator, nSamplesPerPrompt: n },
      );
      expectExact(out.advantages, flat(g.expected.advantages), g.case);
      expectExact(out.returns, flat(g.expected.returns), `${g.case}: returns`);
      if (estimator === 'group_norm') {
        expectExact(
          grpoAdvantages(rewards, { groupSize: n, preset: 'openrlhf' }),
          flat(g.expected.advantages),
          'preset openrlhf',
        );
      }
    },
    sequenceLevel,
  );
});

describe('golden: OpenRLHF estimators on the token batch (KL shaping, GAE, whitening, experiences)', () => {
  each(
    'openrlhf__',
    (g) => {
      const p = g.params;
      const i = g.inputs;
      const out = openrlhfAdvantages(
        {
          rewards: flat(i.rewards),
          responseLengths: flat(i.response_lengths),
          actionMasks: rows(i.action_masks),
          ...(i.kl ? { kl: flat(i.kl) } : {}),
          ...(i.values ? { values: flat(i.values) } : {}),
          ...(p.order ? { order: flat(p.order) } : {}),
          ...(p.experiences ? { experiences: flat(p.experiences) } : {}),
          ...(p.pads ? { paddedLengths: flat(p.pads) } : {}),
        },
        {
          estimator: p.estimator as OpenrlhfEstimator,
          nSamplesPerPrompt: num(p.n_samples_per_prompt),
          gamma: num(p.gamma),
          lambd: num(p.lambd),
          klCoef: num(p.kl_coef),
          noStdNorm: p.no_std_norm as boolean,
          rewardClipRange: (p.reward_clip_range as [number, number] | null) ?? null,
        },
      );
      expectExact(out.advantages, flat(g.expected.advantages), `${g.case}: advantages`);
      expectExact(out.returns, flat(g.expected.returns), `${g.case}: returns`);
    },
    (g) => g.case.includes('__tokens__'),
  );
});

describe('golden: OpenRLHF compute_approx_kl', () => {
  each('openrlhf__compute_approx_kl__', (g) => {
    const out = openrlhfApproxKl(flat(g.inputs.log_probs), flat(g.inputs.log_probs_base), {
      estimator: g.params.kl_estimator as 'k1',
    });
    const check = g.params.kl_estimator === 'k3' ? expectClose : expectExact;
    check(out, flat(g.expected.kl), g.case);
  });
});

it('covers every OpenRLHF golden file', () => {
  const files = allGoldenFiles('openrlhf');
  expect(files.length).toBeGreaterThan(50);
  expect(files.every((f) => f.startsWith('openrlhf__'))).toBe(true);
});
