/** The verl / TRL / OpenRLHF entry points: their trainer-dispatch semantics and their errors on bad input. */
import { ConfigError, ValidationError, VimeError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { openrlhfAdvantages } from './openrlhf.js';
import { nanstd, sumThenNormalize, trlLoss } from './trl.js';
import { asTorchIndex, verlAdvantages } from './verl.js';
import { klPenalty, verlPolicyLoss } from './verl-loss.js';

function errorOf(run: () => unknown): Error {
  try {
    run();
  } catch (e) {
    expect(VimeError.isInstance(e), String(e)).toBe(true);
    return e as Error;
  }
  throw new Error('expected an error');
}

const batch = {
  scores: [1, 0, 0, 1, 0.5, 0.2, 0.9, 0.1],
  responseLengths: [3, 2, 4, 1, 2, 3, 2, 2],
  lossMasks: [[1, 0, 1], [1, 1], [1, 1, 1, 0], [1], [1, 1], [0, 1, 1], [1, 1], [1, 1]],
  index: ['p', 'p', 'p', 'p', 'q', 'q', 'q', 'q'],
};

describe("verl's trainer dispatch", () => {
  it('grpo_vectorized ignores norm_adv_by_std_in_grpo under the trainer, honours it as a function', () => {
    const trainer = verlAdvantages(batch, { estimator: 'grpo_vectorized', normAdvByStdInGrpo: false });
    const normalized = verlAdvantages(batch, { estimator: 'grpo_vectorized' });
    const direct = verlAdvantages(batch, {
      estimator: 'grpo_vectorized',
      normAdvByStdInGrpo: false,
      call: 'function',
    });
    expect(Array.from(trainer.advantages)).toEqual(Array.from(normalized.advantages));
    expect(Array.from(direct.advantages)).not.toEqual(Array.from(normalized.advantages));
    // grpo itself receives the flag: mean-centring only, the first token of sample 0 is 1 − 0.5.
    expect(verlAdvantages(batch, { estimator: 'grpo', normAdvByStdInGrpo: false }).advantages[0]).toBe(0.5);
  });

  it('the optimal token baselines fail under the trainer (TypeError in verl) and run as functions', () => {
    const e = errorOf(() => verlAdvantages(batch, { estimator: 'optimal_token_baseline' }));
    expect(e).toBeInstanceOf(ConfigError);
    expect(e.message).toMatch(/TypeError at this verl version.*call: 'function'/);
    const ones = batch.responseLengths.flatMap((n) => Array(n).fill(-0.5));
    const out = verlAdvantages(
      { ...batch, oldLogProbs: ones, sumPiSquared: ones.map(() => 0.3) },
      { estimator: 'optimal_token_baseline', call: 'function' },
    );
    expect(out.advantages).toHaveLength(19);
  });

  it('groups labels like as_torch_index for the vectorized estimators only', () => {
    expect(Array.from(asTorchIndex([2.0, 2.0000001, 7]))).toEqual([2, 2, 7]);
    expect(Array.from(asTorchIndex(['01', '1', '3']))).toEqual([1, 1, 3]);
    expect(Array.from(asTorchIndex(['b', 'a', 'b']))).toEqual([1, 0, 1]);
    expect(() => asTorchIndex([-1, 2])).toThrow(/index\[0\].*≥ 0/);
  });

  it('names the missing or bad input', () => {
    expect(errorOf(() => verlAdvantages(batch, { estimator: 'nope' as 'grpo' })).message).toMatch(
      /estimator: unknown "nope"; use one of gae, grpo/,
    );
    const { index: _, ...noIndex } = batch;
    expect(errorOf(() => verlAdvantages(noIndex, { estimator: 'grpo' })).message).toMatch(/index.*required/);
    expect(errorOf(() => verlAdvantages(batch, { estimator: 'gae' })).message).toMatch(/values.*required/);
    expect(
      errorOf(() => verlAdvantages({ ...batch, paddedLength: 2 }, { estimator: 'grpo' })).message,
    ).toMatch(/paddedLength.*longest response \(4\)/);
    expect(errorOf(() => verlAdvantages({ ...batch, scores: [1] }, { estimator: 'grpo' })).message).toMatch(
      /responseLengths.*8 entries but there are 1 samples/,
    );
  });
});

describe('verl losses: bad configuration', () => {
  const input = {
    oldLogProbs: [-1, -1.2, -0.7, -2],
    logProbs: [-0.9, -1.1, -0.8, -2.2],
    advantages: [1, 1, -0.5, -0.5],
    responseLengths: [2, 2],
    lossMasks: [
      [1, 1],
      [1, 1],
    ],
  };
  it('refuses what verl refuses, saying why', () => {
    expect(errorOf(() => klPenalty([0], [0], { type: 'k3+' as 'k3' })).message).toMatch(
      /NotImplementedError/,
    );
    expect(errorOf(() => klPenalty([0], [0], { type: 'full' as 'k3' })).message).toMatch(
      /NotImplementedError/,
    );
    expect(errorOf(() => klPenalty([0], [0, 1], { type: 'k1' })).message).toMatch(/refLogProbs/);
    expect(errorOf(() => verlPolicyLoss(input, { config: { clipRatioC: 1 } })).message).toMatch(
      /clipRatioC.*greater than 1/,
    );
    expect(errorOf(() => verlPolicyLoss(input, { lossMode: 'bypass_mode' })).message).toMatch(
      /rolloutCorrection/,
    );
    const rs = (rolloutRs: string, rolloutRsThreshold: string | number | null) =>
      errorOf(() =>
        verlPolicyLoss(input, {
          lossMode: 'bypass_mode',
          config: { rolloutCorrection: { lossType: 'reinforce', rolloutRs, rolloutRsThreshold } },
        }),
      ).message;
    expect(rs('token_k1', null)).toMatch(/rolloutRsThreshold: must be provided/);
    expect(rs('token_k9', 2)).toMatch(/rolloutRs: unknown option "token_k9"/);
    expect(rs('token_k2', '0.1_2')).toMatch(/single upper bound/);
    expect(rs('token_k2,token_k3', '1,2,3')).toMatch(/one threshold shared by all options or exactly 2/);
    expect(rs('token_k2', '-1')).toMatch(/must be positive/);
  });

  it('clip_cov asks for the permutation torch drew when there are more candidates than slots', () => {
    const many = {
      oldLogProbs: Array(20).fill(-1),
      logProbs: Array.from({ length: 20 }, (_, i) => -1 + (i % 5) * 0.01),
      advantages: Array.from({ length: 20 }, (_, i) => (i < 10 ? 3 : -3)),
      responseLengths: [10, 10],
      lossMasks: new Uint8Array(20).fill(1),
    };
    const options = {
      lossMode: 'clip_cov' as const,
      config: { clipCovRatio: 0.05, clipCovLb: -10, clipCovUb: 10 },
    };
    const e = errorOf(() => verlPolicyLoss(many, options));
    expect(e).toBeInstanceOf(ValidationError);
    const count = Number(/torch\.randperm\((\d+)\)/.exec(e.message)![1]);
    const perm = Array.from({ length: count }, (_, i) => count - 1 - i);
    expect(Number.isFinite(verlPolicyLoss({ ...many, randperm: perm }, options).loss)).toBe(true);
  });
});

describe('TRL and OpenRLHF: bad input', () => {
  it('names the field', () => {
    expect(errorOf(() => sumThenNormalize([[1, 0, 1]], { groupSize: 2 })).message).toMatch(
      /groupSize.*3 samples do not split into groups of 2/,
    );
    expect(errorOf(() => sumThenNormalize([[1, 0], [1]], { groupSize: 2 })).message).toMatch(
      /rewardsPerFunc\[1\]/,
    );
    expect(errorOf(() => sumThenNormalize([[1, 0]], { groupSize: 2, weights: [1, 2] })).message).toMatch(
      /weights.*2 entries for 1/,
    );
    expect(
      errorOf(() => sumThenNormalize([[1, 0]], { groupSize: 2, scale: 'nope' as 'group' })).message,
    ).toMatch(/scale: must be/);
    expect(errorOf(() => nanstd([1, 2, 3], { rowLength: 2 })).message).toMatch(/rowLength.*dividing 3/);
    const loss = { perTokenLogps: [-1, -2], advantages: [1], responseLengths: [2], lossMasks: [[1, 1]] };
    expect(errorOf(() => trlLoss(loss, { lossType: 'ppo' as 'grpo' })).message).toMatch(
      /lossType: unknown "ppo"/,
    );
    expect(errorOf(() => trlLoss(loss, { lossType: 'dr_grpo' })).message).toMatch(
      /maxCompletionLength.*required/,
    );
    expect(errorOf(() => trlLoss(loss, { beta: 0.1 })).message).toMatch(/refPerTokenLogps.*required/);
    const o = { rewards: [1, 0], responseLengths: [1, 1], actionMasks: [[1], [1]] };
    expect(
      errorOf(() => openrlhfAdvantages(o, { estimator: 'group_norm', nSamplesPerPrompt: 1 })).message,
    ).toMatch(/nSamplesPerPrompt.*> 1/);
    expect(errorOf(() => openrlhfAdvantages(o, { estimator: 'gae', nSamplesPerPrompt: 2 })).message).toMatch(
      /values.*critic/,
    );
    expect(
      errorOf(() => openrlhfAdvantages({ ...o, order: [0, 0] }, { estimator: 'rloo', nSamplesPerPrompt: 2 }))
        .message,
    ).toMatch(/order.*permutation/);
  });
});
