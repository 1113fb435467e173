/** Every remaining golden family of slime's token-level, loss and reporting math. */
import { describe, expect, it } from 'vitest';
import { allGoldenFiles, expectClose, flat, type GoldenCase, loadGolden } from '../__fixtures__/golden.js';
import { gae } from '../estimators/gae.js';
import { discountedReturns, maskedWhiten } from '../estimators/returns.js';
import { approxKl, cispoLoss, gspoSequenceKl, type KlType, policyLoss, sumOfSampleMean } from './loss.js';
import { type SlimeEstimator, slimeAdvantagesAndReturns, slimePolicyLoss } from './slime.js';

const rows = (x: unknown) => x as number[][];
const lengthsOf = (x: unknown) => rows(x).map((r) => r.length);
const num = (x: unknown) => x as number;

function each(prefix: string, run: (g: GoldenCase) => void) {
  for (const g of loadGolden(prefix)) it(g.case, () => run(g));
}

describe('golden: discounting and GAE primitives', () => {
  each('slime__chunked_discounted_returns__', (g) => {
    const rewards = rows(g.inputs.rewards);
    const out = discountedReturns(flat(rewards), lengthsOf(rewards), num(g.params.discount));
    expectClose(out, flat(g.expected.returns), g.case);
  });
  for (const prefix of ['slime__chunked_gae__', 'slime__vanilla_gae__']) {
    each(prefix, (g) => {
      const rewards = rows(g.inputs.rewards);
      const out = gae({
        tokenRewards: flat(rewards),
        values: flat(g.inputs.values),
        responseLengths: lengthsOf(rewards),
        gamma: num(g.params.gamma),
        lambda: num(g.params.lambd),
      });
      expectClose(out.advantages, flat(g.expected.advantages), `${g.case}: advantages`);
      expectClose(out.returns, flat(g.expected.returns), `${g.case}: returns`);
    });
  }
});

describe('golden: compute_advantages_and_returns', () => {
  each('slime__compute_advantages_and_returns__', (g) => {
    const p = g.params;
    const i = g.inputs;
    const out = slimeAdvantagesAndReturns({
      estimator: p.advantage_estimator as SlimeEstimator,
      rewards: flat(i.rewards),
      responseLengths: flat(i.response_lengths),
      lossMasks: rows(i.loss_masks),
      logProbs: rows(i.log_probs),
      refLogProbs: rows(i.ref_log_probs),
      ...(i.values ? { values: rows(i.values) } : {}),
      ...(p.use_opd ? { teacherLogProbs: rows(i.teacher_log_probs), opdKlCoef: num(p.opd_kl_coef) } : {}),
      klCoef: num(p.kl_coef),
      klType: p.kl_loss_type as KlType,
      gamma: num(p.gamma),
      lambda: num(p.lambd),
      normalizeAdvantages: p.normalize_advantages as boolean,
    });
    expectClose(out.advantages, flat(g.expected.advantages), `${g.case}: advantages`);
    expectClose(out.returns, flat(g.expected.returns), `${g.case}: returns`);
    expectClose(out.kl, flat(g.expected.kl), `${g.case}: kl`);
    if (g.expected.opd_reverse_kl)
      expectClose(out.opdReverseKl!, flat(g.expected.opd_reverse_kl), `${g.case}: opd`);
  });
});

describe('golden: KL estimators and policy losses', () => {
  each('slime__compute_approx_kl__', (g) => {
    const ratio = g.inputs.importance_ratio;
    const kl = approxKl(flat(g.inputs.log_probs), flat(g.inputs.log_probs_base), {
      type: g.params.kl_loss_type as KlType,
      ...(ratio ? { importanceRatio: flat(ratio) } : {}),
    });
    expectClose(kl, flat(g.expected.kl), g.case);
  });
  each('slime__compute_policy_loss__', (g) => {
    const out = policyLoss(flat(g.inputs.ppo_kl), flat(g.inputs.advantages), {
      epsClip: num(g.params.eps_clip),
      epsClipHigh: num(g.params.eps_clip_high),
      dualClipC: g.params.eps_clip_c as number | null,
    });
    expectClose(out.losses, flat(g.expected.pg_losses), `${g.case}: pg_losses`);
    expectClose(out.clipfrac, flat(g.expected.clipfrac), `${g.case}: clipfrac`);
  });
  each('slime__compute_cispo_loss__', (g) => {
    const out = cispoLoss(flat(g.inputs.ppo_kl), flat(g.inputs.log_probs), flat(g.inputs.advantages), {
      epsClip: num(g.params.eps_clip),
      epsClipHigh: num(g.params.eps_clip_high),
    });
    expectClose(out.losses, flat(g.expected.pg_losses), `${g.case}: pg_losses`);
    expectClose(out.clipfrac, flat(g.expected.clipfrac), `${g.case}: clipfrac`);
  });
  each('slime__compute_gspo_kl', (g) => {
    const masks = rows(g.inputs.loss_masks);
    const out = gspoSequenceKl(
      flat(g.inputs.log_probs),
      flat(g.inputs.old_log_probs),
      lengthsOf(masks),
      masks,
    );
    expectClose(out, flat(g.expected.ppo_kl), g.case);
  });
});

describe('golden: whitening and reducers', () => {
  each('slime__distributed_masked_whiten__', (g) => {
    const out = maskedWhiten(flat(g.inputs.values), flat(g.inputs.mask), {
      shiftMean: g.params.shift_mean as boolean,
      epsilon: num(g.params.epsilon),
    });
    expectClose(out, flat(g.expected.whitened), g.case);
  });
  each('slime__get_sum_of_sample_mean__', (g) => {
    const denoms = g.params.sample_denoms as number[] | null;
    const value = sumOfSampleMean(
      flat(g.inputs.x),
      flat(g.inputs.response_lengths),
      rows(g.inputs.loss_masks),
      {
        perToken: g.params.calculate_per_token_loss as boolean,
        ...(denoms ? { sampleDenominators: denoms } : {}),
      },
    );
    expectClose([value], [num(g.expected.value)], g.case);
  });
});

describe('golden: end-to-end slime loss_function', () => {
  each('slime__loss_function__', (g) => {
    const p = g.params;
    const i = g.inputs;
    const out = slimePolicyLoss({
      estimator: p.advantage_estimator as SlimeEstimator,
      logits: rows(i.logits),
      vocabSize: num(i.vocab_size),
      tokens: rows(i.tokens),
      responseLengths: flat(i.response_lengths),
      lossMasks: rows(i.loss_masks),
      advantages: rows(i.advantages),
      oldLogProbs: rows(i.old_log_probs),
      refLogProbs: rows(i.ref_log_probs),
      rolloutMaskSums: flat(i.rollout_mask_sums),
      epsClip: num(p.eps_clip),
      epsClipHigh: num(p.eps_clip_high),
      epsClipC: p.eps_clip_c as number | null,
      entropyCoef: num(p.entropy_coef),
      useKlLoss: p.use_kl_loss as boolean,
      klLossType: p.kl_loss_type as KlType,
      klLossCoef: num(p.kl_loss_coef),
      useUnbiasedKl: p.use_unbiased_kl as boolean,
      calculatePerTokenLoss: p.calculate_per_token_loss as boolean,
      numMicrobatches: num(p.num_microbatches),
      stepGlobalBatchSize: num(p.step_global_batch_size),
      temperature: num(p.rollout_temperature),
    });
    const expected = g.expected as { loss: number; normalizer: number; metrics: Record<string, number> };
    expectClose([out.loss], [expected.loss], `${g.case}: loss`);
    expect(out.normalizer, `${g.case}: normalizer`).toBe(expected.normalizer);
    expect(Object.keys(out.metrics).sort(), `${g.case}: metric keys`).toEqual(
      Object.keys(expected.metrics).sort(),
    );
    for (const [key, value] of Object.entries(expected.metrics)) {
      expectClose([out.metrics[key]!], [value], `${g.case}: metrics.${key}`);
    }
  });
});

it('covers all 66 golden files', () => {
  const covered = [
    'slime__post_process_rewards__',
    'slime__grpo_normalize_by_group_index__',
    'slime__chunked_discounted_returns__',
    'slime__chunked_gae__',
    'slime__vanilla_gae__',
    'slime__compute_advantages_and_returns__',
    'slime__compute_approx_kl__',
    'slime__compute_policy_loss__',
    'slime__compute_cispo_loss__',
    'slime__compute_gspo_kl',
    'slime__distributed_masked_whiten__',
    'slime__get_sum_of_sample_mean__',
    'slime__loss_function__',
    'slime__compute_pass_rate__', // pass@k is @vime/metrics' (passAtKBatch, checked in its pass-at-k.test.ts)
  ];
  const files = allGoldenFiles();
  expect(files).toHaveLength(66);
  expect(files.filter((f) => !covered.some((p) => f.startsWith(p)))).toEqual([]);
});
