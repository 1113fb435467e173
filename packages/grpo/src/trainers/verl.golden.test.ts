/** Every golden file of volcengine/verl (computed by the pinned upstream code, see golden/verl/README.md). */
import { describe, expect, it } from 'vitest';
import {
  allGoldenFiles,
  expectClose,
  expectExact,
  flat,
  type GoldenCase,
  loadGolden,
} from '../__fixtures__/golden.js';
import type { Dtype } from '../estimators/f32.js';
import { aggregateLoss } from './loss.js';
import {
  asTorchIndex,
  type VerlEstimator,
  verlAdvantages,
  verlGroupMeanStd,
  verlMaskedWhiten,
} from './verl.js';
import { klPenalty, type VerlKlType, type VerlLossMode, verlPolicyLoss } from './verl-loss.js';

const rows = (x: unknown) => x as number[][];
const num = (x: unknown) => x as number;
const dtypeOf = (g: GoldenCase) => g.dtype as Dtype;

function each(prefix: string, run: (g: GoldenCase) => void, keep: (g: GoldenCase) => boolean = () => true) {
  for (const g of loadGolden(prefix, 'verl').filter(keep)) it(g.case, () => run(g));
}

/** The golden's per-token value when an upstream function raised instead. */
function raised(g: GoldenCase): string | null {
  return typeof g.expected.error === 'string' ? g.expected.error : null;
}

const ESTIMATOR_OF: Record<string, VerlEstimator> = {
  compute_grpo_outcome_advantage: 'grpo',
  compute_grpo_vectorized_outcome_advantage: 'grpo_vectorized',
  compute_grpo_passk_outcome_advantage: 'grpo_passk',
  compute_rloo_outcome_advantage: 'rloo',
  compute_rloo_vectorized_outcome_advantage: 'rloo_vectorized',
  compute_gpg_outcome_advantage: 'gpg',
  compute_opo_outcome_advantage: 'opo',
  compute_reinforce_plus_plus_baseline_outcome_advantage: 'reinforce_plus_plus_baseline',
  compute_reinforce_plus_plus_outcome_advantage: 'reinforce_plus_plus',
  compute_remax_outcome_advantage: 'remax',
  compute_gae_advantage_return: 'gae',
  compute_optimal_token_baseline_advantage: 'optimal_token_baseline',
  compute_multi_turn_optimal_token_baseline_advantage: 'tir_optimal_token_baseline',
};
const fnOf = (g: GoldenCase) => g.case.split('__')[1]!;
/** Estimators whose math has no exp/log: float32 results must match torch bit for bit. */
const ARITHMETIC = new Set(Object.values(ESTIMATOR_OF).filter((e) => !e.endsWith('optimal_token_baseline')));

describe('golden: verl sequence-level estimators (shared reward sets)', () => {
  for (const fn of Object.keys(ESTIMATOR_OF)) {
    const files = loadGolden(`verl__${fn}__`, 'verl').filter((g) => !g.case.includes('__tokens__'));
    for (const g of files) {
      it(g.case, () => {
        const rewards = flat(g.inputs.rewards);
        const input = {
          scores: rewards,
          responseLengths: rewards.map(() => 1),
          lossMasks: rewards.map(() => [1]),
          index: flat(g.inputs.index),
          dtype: dtypeOf(g),
        };
        const estimator = ESTIMATOR_OF[fn]!;
        const options = {
          estimator,
          call: 'function' as const,
          normAdvByStdInGrpo: (g.params.norm_adv_by_std_in_grpo as boolean | undefined) ?? true,
        };
        if (raised(g)) {
          expect(() => verlAdvantages(input, options)).toThrow(/at least 2 samples/);
          return;
        }
        const out = verlAdvantages(input, options);
        expectExact(out.advantages, flat(g.expected.advantages), g.case, dtypeOf(g));
        expectExact(out.returns, flat(g.expected.returns), `${g.case}: returns`, dtypeOf(g));
      });
    }
  }
});

function tokenInput(g: GoldenCase) {
  const i = g.inputs;
  return {
    tokenLevelRewards: flat(i.token_level_rewards),
    responseLengths: flat(i.response_lengths),
    lossMasks: rows(i.loss_masks),
    index: i.index as string[],
    paddedLength: num(i.padded_length),
    dtype: dtypeOf(g),
    ...(i.values ? { values: flat(i.values) } : {}),
    ...(i.reward_baselines ? { rewardBaselines: flat(i.reward_baselines) } : {}),
    ...(i.old_log_probs ? { oldLogProbs: flat(i.old_log_probs) } : {}),
    ...(i.sum_pi_squared ? { sumPiSquared: flat(i.sum_pi_squared) } : {}),
    ...(i.rollout_is_weights ? { rolloutIsWeights: flat(i.rollout_is_weights) } : {}),
  };
}

describe('golden: verl token-level estimators (padded batch, one response fully masked)', () => {
  each(
    'verl__compute_',
    (g) => {
      const estimator = ESTIMATOR_OF[fnOf(g)]!;
      const p = g.params;
      const out = verlAdvantages(tokenInput(g), {
        estimator,
        call: 'function',
        gamma: (p.gamma as number | undefined) ?? 1,
        lam: (p.lam as number | undefined) ?? 1,
        normAdvByStdInGrpo: (p.norm_adv_by_std_in_grpo as boolean | undefined) ?? true,
        handleZeroTail: (p.handle_zero_tail as boolean | undefined) ?? false,
      });
      const check = ARITHMETIC.has(estimator) ? expectExact : expectClose;
      check(out.advantages, flat(g.expected.advantages), `${g.case}: advantages`, dtypeOf(g));
      check(out.returns, flat(g.expected.returns), `${g.case}: returns`, dtypeOf(g));
    },
    (g) => g.case.includes('__tokens__'),
  );
});

describe("golden: verl's trainer dispatch (ray_trainer.compute_advantage)", () => {
  each('verl__compute_advantage__', (g) => {
    const estimator = g.params.adv_estimator as VerlEstimator;
    const input = { ...tokenInput(g), paddedLength: num(g.inputs.padded_length) };
    const options = { estimator, normAdvByStdInGrpo: g.params.norm_adv_by_std_in_grpo as boolean };
    if (raised(g)) {
      expect(g.expected.error).toBe('TypeError');
      expect(() => verlAdvantages(input, options)).toThrow(/TypeError at this verl version/);
      return;
    }
    expectExact(verlAdvantages(input, options).advantages, flat(g.expected.advantages), g.case);
  });
});

describe('golden: verl groupwise statistics', () => {
  each('verl__group_mean_std__', (g) => {
    const out = verlGroupMeanStd(flat(g.inputs.scores), flat(g.inputs.gidx), { eps: num(g.params.eps) });
    // group_mean_std casts to float32 whatever the input dtype.
    expectExact(out.mean, flat(g.expected.mean), `${g.case}: mean`);
    expectExact(out.std, flat(g.expected.std), `${g.case}: std`);
    expectExact(out.count, flat(g.expected.count), `${g.case}: count`);
  });
  each('verl__as_torch_index__', (g) => {
    const index = g.inputs.index as Array<string | number>;
    expect(Array.from(asTorchIndex(index)), g.case).toEqual(flat(g.expected.gidx));
    const out = verlGroupMeanStd(flat(g.inputs.scores), index);
    expectExact(out.mean, flat(g.expected.mean), `${g.case}: mean`);
    expectExact(out.std, flat(g.expected.std), `${g.case}: std`);
  });
});

describe('golden: verl agg_loss and masked_whiten', () => {
  each('verl__agg_loss__', (g) => {
    const p = g.params;
    const value = aggregateLoss(
      flat(g.inputs.loss_mat),
      flat(g.inputs.response_lengths),
      rows(g.inputs.loss_masks),
      {
        mode: p.loss_agg_mode as 'token-mean',
        paddedLength: num(g.inputs.padded_length),
        dtype: dtypeOf(g),
        ...(p.dp_size !== undefined ? { dpSize: num(p.dp_size) } : {}),
        ...(p.batch_num_tokens !== undefined ? { batchNumTokens: num(p.batch_num_tokens) } : {}),
        ...(p.global_batch_size !== undefined ? { globalBatchSize: num(p.global_batch_size) } : {}),
        ...(p.loss_scale_factor !== undefined ? { lossScaleFactor: num(p.loss_scale_factor) } : {}),
      },
    );
    expectExact([value], [num(g.expected.loss)], g.case, dtypeOf(g));
  });
  each('verl__masked_whiten__', (g) => {
    const lengths = flat(g.inputs.response_lengths);
    const T = num(g.inputs.padded_length);
    const pad = (x: number[][]) => x.flatMap((r) => [...r, ...Array(T - r.length).fill(0)]);
    const out = verlMaskedWhiten(pad(rows(g.inputs.values)), pad(rows(g.inputs.loss_masks)), dtypeOf(g), {
      shiftMean: g.params.shift_mean as boolean,
    });
    const real = lengths.flatMap((n, i) => Array.from(out.subarray(i * T, i * T + n)));
    expectExact(real, flat(g.expected.whitened), g.case, dtypeOf(g));
  });
});

describe('golden: verl kl_penalty (value and gradient)', () => {
  each('verl__kl_penalty__', (g) => {
    const type = g.params.kl_penalty as VerlKlType;
    const run = () =>
      klPenalty(flat(g.inputs.logprob), flat(g.inputs.ref_logprob), { type, dtype: dtypeOf(g) });
    if (raised(g)) {
      expect(g.expected.error).toBe('NotImplementedError');
      expect(run).toThrow(/NotImplementedError/);
      return;
    }
    const out = run();
    const check = type === 'low_var_kl' || type === 'k3' ? expectClose : expectExact;
    check(out.kl, flat(g.expected.kl), `${g.case}: kl`, dtypeOf(g));
    check(out.grad, flat(g.expected.grad_logprob), `${g.case}: grad`, dtypeOf(g));
  });
});

describe('golden: verl policy losses', () => {
  each('verl__policy_loss__', (g) => {
    const p = g.params as Record<string, unknown> & {
      config: Record<string, unknown> & { policy_loss: Record<string, unknown> };
      global_batch_info: Record<string, number>;
    };
    const c = p.config;
    const pl = c.policy_loss;
    const rc = pl.rollout_correction as Record<string, unknown> | undefined;
    const i = g.inputs;
    const perms = p.randperm as Record<string, number[]> | undefined;
    const run = (randperm?: number[]) =>
      verlPolicyLoss(
        {
          oldLogProbs: flat(i.old_log_probs),
          logProbs: flat(i.log_probs),
          advantages: flat(i.advantages),
          responseLengths: flat(i.response_lengths),
          lossMasks: rows(i.loss_masks),
          paddedLength: num(i.padded_length),
          dtype: dtypeOf(g),
          ...(i.rollout_is_weights ? { rolloutIsWeights: flat(i.rollout_is_weights) } : {}),
          ...(randperm ? { randperm } : {}),
        },
        {
          lossMode: p.loss_mode as VerlLossMode,
          lossAggMode: p.loss_agg_mode as 'token-mean',
          config: {
            clipRatio: num(c.clip_ratio),
            clipRatioLow: num(c.clip_ratio_low),
            clipRatioHigh: num(c.clip_ratio_high),
            clipRatioC: num(c.clip_ratio_c),
            tauPos: num(c.tau_pos),
            tauNeg: num(c.tau_neg),
            clipCovRatio: num(pl.clip_cov_ratio),
            clipCovLb: num(pl.clip_cov_lb),
            clipCovUb: num(pl.clip_cov_ub),
            klCovRatio: num(pl.kl_cov_ratio),
            ppoKlCoef: num(pl.ppo_kl_coef),
            ...(rc
              ? {
                  rolloutCorrection: {
                    lossType: rc.loss_type as 'reinforce',
                    rolloutIs: (rc.rollout_is as 'token' | undefined) ?? null,
                    rolloutIsThreshold: (rc.rollout_is_threshold as number | undefined) ?? 2,
                    rolloutIsBatchNormalize: (rc.rollout_is_batch_normalize as boolean | undefined) ?? false,
                    rolloutRs: (rc.rollout_rs as string | undefined) ?? null,
                    rolloutRsThreshold: (rc.rollout_rs_threshold as string | undefined) ?? null,
                  },
                }
              : {}),
          },
          globalBatchInfo: {
            ...(p.global_batch_info.dp_size !== undefined ? { dpSize: p.global_batch_info.dp_size } : {}),
            batchNumTokens: p.global_batch_info.batch_num_tokens ?? null,
            globalBatchSize: p.global_batch_info.global_batch_size ?? null,
            lossScaleFactor: p.global_batch_info.loss_scale_factor ?? null,
          },
        },
      );
    let out: ReturnType<typeof run>;
    try {
      out = run();
    } catch (error) {
      // clip_cov with more candidates than slots: supply the permutation torch drew for that count.
      const count = /torch\.randperm\((\d+)\)/.exec(String(error))?.[1];
      if (!count || !perms) throw error;
      out = run(perms[count]);
    }
    const e = g.expected as { loss: number; metrics: Record<string, number> };
    expectClose([out.loss], [e.loss], `${g.case}: loss`, dtypeOf(g));
    for (const [k, v] of Object.entries(e.metrics)) {
      if (k.startsWith('rollout_corr/')) continue;
      expectClose([out.metrics[k]!], [v], `${g.case}: ${k}`, dtypeOf(g));
    }
  });
});

it('covers every verl golden file', () => {
  const families = [
    ...Object.keys(ESTIMATOR_OF).map((fn) => `verl__${fn}__`),
    'verl__compute_advantage__',
    'verl__group_mean_std__',
    'verl__as_torch_index__',
    'verl__agg_loss__',
    'verl__masked_whiten__',
    'verl__kl_penalty__',
    'verl__policy_loss__',
  ];
  const files = allGoldenFiles('verl');
  expect(files.length).toBeGreaterThan(300);
  expect(files.filter((f) => !families.some((p) => f.startsWith(p)))).toEqual([]);
});
