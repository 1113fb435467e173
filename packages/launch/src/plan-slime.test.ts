import { slimeArgs } from '@vime/slime';
import { describe, expect, it } from 'vitest';
import { resolvePlan } from './plan.js';

const flagValue = (argv: string[], flag: string) => argv[argv.indexOf(flag) + 1];

// The plan's slime section, rendered by @vime/slime's command builder.
describe("the plan's slime command", () => {
  it('builds the reference coding-agent command (async, external engines, delta over disk)', () => {
    const plan = resolvePlan({ engines: { count: 3 } }, { env: { WANDB_API_KEY: 'wandb-secret-value' } });
    const { script, argv, args } = slimeArgs(plan.slime);
    expect(script).toBe('train_async.py');
    expect(argv.slice(0, 2)).toEqual(['python3', 'train_async.py']);
    expect(argv.slice(2)).toEqual(args);
    const addrs = args.indexOf('--rollout-external-engine-addrs');
    expect(args.slice(addrs + 1, addrs + 4)).toEqual([
      'sglang-0.$SKYPILOT_JOBGROUP_NAME:30000',
      'sglang2-0.$SKYPILOT_JOBGROUP_NAME:30000',
      'sglang3-0.$SKYPILOT_JOBGROUP_NAME:30000',
    ]);
    expect(flagValue(args, '--update-weight-mode')).toBe('delta');
    expect(flagValue(args, '--update-weight-transport')).toBe('disk');
    expect(flagValue(args, '--update-weight-disk-dir')).toBe('/shared/policy');
    expect(flagValue(args, '--update-weight-local-checkpoint-dir')).toBe('/root/slime-local-ckpt');
    expect(flagValue(args, '--rollout-batch-size')).toBe('23');
    expect(flagValue(args, '--n-samples-per-prompt')).toBe('8');
    expect(flagValue(args, '--global-batch-size')).toBe('184');
    expect(flagValue(args, '--tensor-model-parallel-size')).toBe('4');
    expect(flagValue(args, '--actor-num-gpus-per-node')).toBe('4');
    expect(flagValue(args, '--rollout-max-context-len')).toBe('32768');
    // The bridge's module: the rollout, the infra-failure filter (with over-sampling to refill the batch),
    // per-prompt reward normalisation and the rollout-metrics hook.
    expect(flagValue(args, '--custom-generate-function-path')).toBe('vime_bridge.generate');
    expect(flagValue(args, '--dynamic-sampling-filter-path')).toBe('vime_bridge.drop_infra_failed_groups');
    expect(flagValue(args, '--over-sampling-batch-size')).toBe('29');
    expect(flagValue(args, '--custom-reward-post-process-path')).toBe(
      'vime_bridge.normalize_rewards_by_group',
    );
    expect(flagValue(args, '--custom-rollout-log-function-path')).toBe('vime_bridge.log_rollout_metrics');
    expect(flagValue(args, '--kl-loss-type')).toBe('low_var_kl');
    expect(flagValue(args, '--eps-clip-high')).toBe('0.28');
    expect(flagValue(args, '--wandb-group')).toBe('coding-agent-3eng');
    expect(args).toContain('--sequence-parallel');
    expect(args).toContain('--rollout-shuffle');
    // The reference script passes --update-weight-encoding, which slime silently ignores; we never emit it.
    expect(args).not.toContain('--update-weight-encoding');
    // No secret in argv.
    expect(args.join(' ')).not.toMatch(/wandb-key|API_KEY|wandb-secret-value/);
    // wandb is opt-in: without the key where the plan is resolved, no wandb flags.
    expect(slimeArgs(resolvePlan({ engines: { count: 3 } }).slime).args).not.toContain('--use-wandb');
  });
});
