import type { GroupingOptions } from '../estimators/groups.js';
import {
  type AutoReport,
  type Batch,
  type CheckOptions,
  type ConventionMatch,
  compareRows,
  recompute,
  type Tolerance,
} from './check-core.js';

/**
 * The convention search behind `check --preset auto` and the mismatch hints: recompute the dump with
 * every preset, convention and trainer estimator the SDK reproduces, and keep the ones that match.
 */

interface Convention {
  name: string;
  options: CheckOptions;
  flags: string;
  /** slime's silent fallback: the whole batch normalized as one group. */
  wholeBatch?: boolean | undefined;
}

/** Options describing the run (kept), as opposed to the conventions being searched (replaced). */
function runOptions(base: CheckOptions): CheckOptions {
  const {
    preset: _p,
    estimator: _e,
    stdNormalization: _s,
    scale: _c,
    epsilon: _eps,
    singleton: _g,
    moments: _m,
    normalizeAdvantages: _n,
    ...run
  } = base;
  return run;
}

/** Every convention the check knows, most common first: ties in the ranking keep this order. */
export function conventions(base: CheckOptions): Convention[] {
  const run = runOptions(base);
  const given = base.estimator ?? 'grpo';
  const slime = given.includes(':') ? 'grpo' : given;
  const grpoFamily = ['grpo', 'gspo', 'cispo'].includes(slime);
  const list: Convention[] = [];
  const add = (name: string, options: CheckOptions, flags: string, wholeBatch = false) =>
    list.push({ name, options: { ...run, ...options }, flags, wholeBatch });
  const est = slime === 'grpo' ? '' : ` --estimator ${slime}`;
  add("preset 'slime'", { preset: 'slime', estimator: slime }, `--preset slime${est}`);
  if (grpoFamily) {
    add(
      "preset 'drGrpo' (slime --disable-grpo-std-normalization)",
      { preset: 'drGrpo', estimator: slime },
      `--preset drGrpo${est}`,
    );
    add("preset 'verl' (adv_estimator=grpo)", { preset: 'verl' }, '--preset verl');
    add(
      "preset 'verl' with norm_adv_by_std_in_grpo=False (Dr.GRPO)",
      { preset: 'verl', stdNormalization: false },
      '--preset verl --no-std-normalization',
    );
    add(
      "preset 'verlVectorized' (adv_estimator=grpo_vectorized)",
      { preset: 'verlVectorized' },
      '--preset verlVectorized',
    );
    add('preset \'trl\' (scale_rewards="group")', { preset: 'trl' }, '--preset trl');
    add(
      'preset \'trl\' with scale_rewards="batch"',
      { preset: 'trl', scale: 'batch' },
      '--preset trl --scale batch',
    );
    add(
      'preset \'trl\' with scale_rewards="none" (Dr.GRPO)',
      { preset: 'trl', scale: 'none' },
      '--preset trl --scale none',
    );
    add("preset 'openrlhf' (advantage_estimator=group_norm)", { preset: 'openrlhf' }, '--preset openrlhf');
    add(
      "preset 'openrlhf' without std (advantage_estimator=dr_grpo)",
      { preset: 'openrlhf', stdNormalization: false },
      '--preset openrlhf --no-std-normalization',
    );
    add("verl estimator 'grpo_passk'", { estimator: 'verl:grpo_passk' }, '--estimator verl:grpo_passk');
    add(
      "verl estimator 'grpo_passk' with norm_adv_by_std_in_grpo=False",
      { estimator: 'verl:grpo_passk', stdNormalization: false },
      '--estimator verl:grpo_passk --no-std-normalization',
    );
    add("verl estimator 'rloo'", { estimator: 'verl:rloo' }, '--estimator verl:rloo');
    add(
      "verl estimator 'rloo_vectorized'",
      { estimator: 'verl:rloo_vectorized' },
      '--estimator verl:rloo_vectorized',
    );
    add("verl estimator 'opo'", { estimator: 'verl:opo' }, '--estimator verl:opo');
    add("verl estimator 'gpg'", { estimator: 'verl:gpg' }, '--estimator verl:gpg');
    add("OpenRLHF estimator 'rloo'", { estimator: 'openrlhf:rloo' }, '--estimator openrlhf:rloo');
  }
  // Group-mean baselines whitened over the batch's tokens (any slime estimator: the dump cannot say).
  add(
    "verl estimator 'reinforce_plus_plus_baseline'",
    { estimator: 'verl:reinforce_plus_plus_baseline' },
    '--estimator verl:reinforce_plus_plus_baseline',
  );
  add(
    "OpenRLHF estimator 'reinforce_baseline'",
    { estimator: 'openrlhf:reinforce_baseline' },
    '--estimator openrlhf:reinforce_baseline',
  );
  // Token-level returns (gamma = 1, verl's and OpenRLHF's default) whitened over the batch.
  add(
    "verl estimator 'reinforce_plus_plus' (gamma 1)",
    { estimator: 'verl:reinforce_plus_plus' },
    '--estimator verl:reinforce_plus_plus',
  );
  add(
    "OpenRLHF estimator 'reinforce' (gamma 1)",
    { estimator: 'openrlhf:reinforce' },
    '--estimator openrlhf:reinforce',
  );
  // A baseline per prompt (ReMax's greedy rollout reward, taken from the dump).
  add(
    "verl estimator 'remax' (one greedy-rollout baseline per prompt, read off the dump)",
    { estimator: 'verl:remax' },
    '--estimator verl:remax',
  );
  // The critic's values are in the dump of a PPO run; without them these do not apply.
  add(
    "verl estimator 'gae' (gamma 1, lam 1; the dump's values)",
    { estimator: 'verl:gae' },
    '--estimator verl:gae',
  );
  add(
    "OpenRLHF estimator 'gae' (gamma 1, lambd 1; the dump's values)",
    { estimator: 'openrlhf:gae' },
    '--estimator openrlhf:gae',
  );
  const whitening = base.normalizeAdvantages ?? slime.startsWith('reinforce_plus_plus');
  add(
    `preset 'slime' with --${whitening ? 'no-' : ''}normalize-advantages`,
    { preset: 'slime', estimator: slime, normalizeAdvantages: !whitening },
    `--preset slime${est} --${whitening ? 'no-' : ''}normalize-advantages`,
  );
  add(
    "slime's fallback: the whole batch normalized as ONE group (the sample count is not n_samples_per_prompt × rollout_batch_size: fan-out rows or filtered samples; group by group_index or collapse fan-out rows first)",
    { preset: 'slime', estimator: slime },
    `--preset slime${est} --group-size <batch size>`,
    true,
  );
  return list;
}

/** Recompute the batch under every convention; the matches ranked by bit-exact tokens, then error. */
export function searchConventions(
  batch: Batch,
  base: CheckOptions,
  tolerance: Tolerance,
  grouping: GroupingOptions,
): AutoReport {
  const tried = conventions(base);
  const scored: ConventionMatch[] = [];
  for (const c of tried) {
    const g: GroupingOptions = c.wholeBatch
      ? { groupSize: batch.rawRewards.length, allowUnevenGroups: true }
      : grouping;
    let samples: ReturnType<typeof compareRows>;
    try {
      samples = compareRows(batch, recompute(batch, c.options, g), tolerance, g);
    } catch {
      continue; // the convention cannot apply to this batch (e.g. a group of one where it needs two)
    }
    scored.push({
      name: c.name,
      options: c.wholeBatch
        ? { ...c.options, groupSize: batch.rawRewards.length, allowUnevenGroups: true }
        : c.options,
      flags: c.flags.replace('<batch size>', String(batch.rawRewards.length)),
      mismatchedSamples: samples.filter((s) => !s.ok).length,
      bitExactTokens: samples.reduce((a, s) => a + s.bitExactTokens, 0),
      tokens: samples.reduce((a, s) => a + s.tokens, 0),
      maxAbsError: Math.max(0, ...samples.map((s) => s.maxAbsError)),
    });
  }
  const matches = scored
    .filter((m) => m.mismatchedSamples === 0)
    .sort((a, b) => b.bitExactTokens - a.bitExactTokens || a.maxAbsError - b.maxAbsError);
  const closest =
    matches.length > 0
      ? null
      : ([...scored].sort(
          (a, b) => a.mismatchedSamples - b.mismatchedSamples || a.maxAbsError - b.maxAbsError,
        )[0] ?? null);
  return { tried: tried.length, matches, closest };
}
