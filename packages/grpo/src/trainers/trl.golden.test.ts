/** Every golden file of huggingface/trl's GRPOTrainer (computed by the pinned upstream code). */
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
import { nanstd, normalizeThenSum, sumThenNormalize, type TrlLossType, trlLoss } from './trl.js';

const rows = (x: unknown) => x as Array<Array<number | null>>;
const num = (x: unknown) => x as number;

function each(prefix: string, run: (g: GoldenCase) => void) {
  for (const g of loadGolden(prefix, 'trl')) it(g.case, () => run(g));
}

/** `rewards_per_func` is `[B, F]`; the SDK takes one score array per function. */
const perFunction = (g: GoldenCase) => {
  const m = rows(g.inputs.rewards_per_func);
  return m[0]!.map((_, f) => m.map((r) => r[f] ?? null));
};

describe('golden: TRL nanstd', () => {
  each('trl__nanstd__', (g) => {
    const dim = g.params.dim as number | null;
    const values = g.inputs.tensor as Array<number | number[]>;
    const out =
      dim === null
        ? nanstd(flat(values))
        : nanstd(flat(values), { rowLength: (values[0] as number[]).length });
    expectExact(out, flat([g.expected.std]), g.case);
  });
});

describe('golden: TRL advantages (scale_rewards, multi-reward aggregation, None scores)', () => {
  each('trl__advantages__', (g) => {
    const p = g.params;
    const options = {
      groupSize: num(p.num_generations),
      weights: flat(p.reward_weights),
    };
    const expected = flat(g.expected.advantages);
    const out =
      p.multi_objective_aggregation === 'sum_then_normalize'
        ? sumThenNormalize(perFunction(g), { ...options, scale: p.scale_rewards as 'group' })
        : normalizeThenSum(perFunction(g), options);
    expectExact(out, expected, g.case);
    // One reward function, default aggregation: the `trl` preset of grpoAdvantages is the same computation.
    if (p.multi_objective_aggregation === 'sum_then_normalize' && options.weights.length === 1) {
      const rewards = perFunction(g)[0] as number[];
      const preset = grpoAdvantages(rewards, {
        groupSize: options.groupSize,
        preset: 'trl',
        scale: p.scale_rewards as 'group',
      });
      expectExact(preset, expected, `${g.case} (preset trl)`);
    }
  });

  it('an unscored sample gets advantage 0 and stays out of its group statistics', () => {
    const [g] = loadGolden('trl__advantages__sum_then_normalize__group__three_funcs', 'trl');
    const out = sumThenNormalize(perFunction(g!), { groupSize: 4, weights: [1, 0.5, 2] });
    expect(out[5]).toBe(0);
    // Group 1 without the unscored sample 5: TRL normalizes over the three scored ones (0, 1.25, 1.5).
    const three = sumThenNormalize([[0, 1.25, 1.5]], { groupSize: 3 });
    expectClose([out[4]!, out[6]!, out[7]!], Array.from(three), 'group 1 without sample 5');
  });
});

describe('golden: TRL loss by loss_type', () => {
  each('trl__loss__', (g) => {
    const p = g.params;
    const i = g.inputs;
    const completion = rows(i.completion_mask) as number[][];
    const tool = i.tool_mask ? (rows(i.tool_mask) as number[][]) : null;
    const mask = tool ? completion.map((r, s) => r.map((m, t) => m * tool[s]![t]!)) : completion;
    const out = trlLoss(
      {
        perTokenLogps: flat(i.per_token_logps),
        oldPerTokenLogps: flat(i.old_per_token_logps),
        refPerTokenLogps: flat(i.ref_per_token_logps),
        samplingPerTokenLogps: flat(i.sampling_per_token_logps),
        importanceSamplingRatio: flat(i.importance_sampling_ratio),
        advantages: flat(i.advantages),
        responseLengths: flat(i.response_lengths),
        lossMasks: mask,
        paddedLength: num(i.padded_length),
      },
      {
        lossType: p.loss_type as TrlLossType,
        importanceSamplingLevel: p.importance_sampling_level as 'token',
        epsilon: num(p.epsilon),
        epsilonHigh: num(p.epsilon_high),
        delta: p.delta as number | null,
        beta: num(p.beta),
        useBiasCorrectionKl: p.use_bias_correction_kl as boolean,
        offPolicyMaskThreshold: p.off_policy_mask_threshold as number | null,
        vllmImportanceSamplingCorrection: p.vllm_importance_sampling_correction as boolean,
        gradientAccumulationSteps: num(p.gradient_accumulation_steps),
        numProcesses: num(p.num_processes),
        numItemsInBatch: num(p.num_items_in_batch),
        maxCompletionLength: num(p.max_completion_length),
        sapoTemperaturePos: num(p.sapo_temperature_pos),
        sapoTemperatureNeg: num(p.sapo_temperature_neg),
        vespoKPos: num(p.vespo_k_pos),
        vespoLambdaPos: num(p.vespo_lambda_pos),
        vespoKNeg: num(p.vespo_k_neg),
        vespoLambdaNeg: num(p.vespo_lambda_neg),
      },
    );
    const e = g.expected as { loss: number; policy_loss: number; per_token_loss: number[][] };
    expectClose(out.perTokenLoss, flat(e.per_token_loss), `${g.case}: per_token_loss`);
    expectClose([out.loss], [e.loss], `${g.case}: loss`);
    expectClose([out.policyLoss], [e.policy_loss], `${g.case}: policy_loss`);
  });
});

it('covers every TRL golden file', () => {
  const files = allGoldenFiles('trl');
  expect(files.length).toBeGreaterThan(60);
  expect(
    files.filter((f) => !['trl__nanstd__', 'trl__advantages__', 'trl__loss__'].some((p) => f.startsWith(p))),
  ).toEqual([]);
});
