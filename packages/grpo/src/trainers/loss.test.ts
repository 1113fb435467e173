import { VimeError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { expectClose, flat, loadGolden } from '../__fixtures__/golden.js';
import { aggregateLoss, sumOfSampleMean } from './loss.js';

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

describe('aggregateLoss', () => {
  const losses = [1, 2, 3, 4, 5, 6];
  const lengths = [2, 4];
  const masks = [
    [1, 1],
    [1, 0, 1, 1],
  ];

  it('every mode', () => {
    const agg = (mode: Parameters<typeof aggregateLoss>[3]['mode'], extra = {}) =>
      aggregateLoss(losses, lengths, masks, { mode, dtype: 'float64', ...extra });
    expect(agg('token-mean')).toBeCloseTo((1 + 2 + 3 + 5 + 6) / 5, 12);
    expect(agg('seq-mean-token-sum')).toBeCloseTo((3 + 14) / 2, 12);
    expect(agg('seq-mean-token-mean')).toBeCloseTo((1.5 + 14 / 3) / 2, 12);
    expect(agg('seq-mean-token-sum-norm')).toBeCloseTo(17 / 4, 12);
    expect(agg('seq-mean-token-sum-norm', { lossScaleFactor: 8 })).toBeCloseTo(17 / 8, 12);
    expect(agg('rollout-mean')).toBeCloseTo(agg('seq-mean-token-mean'), 12);
    expect(agg('rollout-mean', { rolloutIds: [7, 7] })).toBeCloseTo(17 / 5, 12);
    throwsVime(() => agg('rollout-mean', { rolloutIds: [1] }), /rolloutIds.*1 entries/);
    throwsVime(() => agg('nope' as 'token-mean'), /unknown aggregation/);
  });

  it("rollout-mean is slime's reducer divided by the rollouts in the step (golden fan-out case)", () => {
    const [g] = loadGolden('slime__get_sum_of_sample_mean__rollout_mask_sums_fanout');
    const masks = g!.inputs.loss_masks as number[][];
    const lengths = flat(g!.inputs.response_lengths);
    const x = flat(g!.inputs.x);
    // rollout_mask_sums: the loss-mask total of every sample sharing the rollout id.
    const own = masks.map((m) => m.reduce((a, b) => a + b, 0));
    const denominators = [own[0]! + own[1]!, own[0]! + own[1]!, own[2]!, own[3]!];
    const viaSlime = sumOfSampleMean(x, lengths, masks, { sampleDenominators: denominators }) / 3;
    const viaVime = aggregateLoss(x, lengths, masks, { mode: 'rollout-mean', rolloutIds: [0, 0, 1, 2] });
    expectClose([viaVime], [viaSlime], 'rollout-mean vs slime reducer');
  });
});
