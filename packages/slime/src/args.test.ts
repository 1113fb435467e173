import { ConfigError, VimeError } from '@vime/core';
import { shellJoin } from '@vime/core/utils';
import { describe, expect, it } from 'vitest';
import { checkSlimeConfig, type SlimeConfig, slimeArgs } from './args.js';

const base: SlimeConfig = {
  mode: 'sync',
  model: { hfCheckpoint: '/root/M', refLoad: '/root/M_torch_dist' },
  cluster: { actorGpusPerNode: 4 },
  parallelism: { tensor: 4 },
  data: { promptData: '/data/train.jsonl', numRollout: 3 },
  rollout: { batchSize: 4, samplesPerPrompt: 4 },
};

/** The value following `flag` in argv. */
const flagValue = (argv: string[], flag: string) => argv[argv.indexOf(flag) + 1];

function problems(config: SlimeConfig): string[] {
  return checkSlimeConfig(config).map((p) => `${p.path}: ${p.message}`);
}

describe('slimeArgs', () => {
  it('picks train.py for sync mode and derives the global batch from the steps per rollout', () => {
    const { script, args } = slimeArgs({
      ...base,
      rollout: { batchSize: 8, samplesPerPrompt: 4, numStepsPerRollout: 2 },
    });
    expect(script).toBe('train.py');
    expect(flagValue(args, '--global-batch-size')).toBe('16');
    expect(flagValue(args, '--num-steps-per-rollout')).toBe('2');
    expect(args).not.toContain('--rollout-external-engine-addrs');
    expect(flagValue(args, '--update-weight-transport')).toBe('nccl');
  });

  it('rejects delta updates without disk transport, a local checkpoint dir, or with colocate', () => {
    expect(problems({ ...base, weights: { mode: 'delta' } })).toEqual([
      'weights.transport: delta weight updates require transport "disk", got "nccl"; set weights.transport: disk (and weights.diskDir)',
      'weights.localCheckpointDir: delta weight updates need an engine-host-local checkpoint dir (e.g. /root/slime-local-ckpt)',
    ]);
    expect(
      problems({
        ...base,
        cluster: { actorGpusPerNode: 4, colocate: true },
        weights: { mode: 'delta', transport: 'disk', diskDir: '/d', localCheckpointDir: '/l' },
      }),
    ).toEqual([
      'weights.mode: delta weight updates are not supported with colocated engines; use mode "full" or external engines',
    ]);
  });

  it('rejects async with colocate, disk without a dir, temperature 0, and more, all at once', () => {
    const found = problems({
      ...base,
      mode: 'async',
      cluster: { actorGpusPerNode: 4, colocate: true },
      engines: { external: ['e-0.g:30000'] },
      weights: { transport: 'disk' },
      data: { promptData: '/d.jsonl' },
      rollout: {
        batchSize: 4,
        temperature: 0,
        overSamplingBatchSize: 2,
        dynamicBatchSize: true,
        maxContextLen: 100,
        maxPromptLen: 100,
      },
      algorithm: { klCoef: 0.1, klLossCoef: 0.1, useRolloutLogprobs: true, useTis: true },
      model: { hfCheckpoint: '/m', saveInterval: 5 },
    });
    expect(found.map((p) => p.split(':')[0])).toEqual([
      'weights.diskDir',
      'cluster.colocate',
      'engines.external',
      'rollout.temperature',
      'model.refLoad',
      'algorithm.klCoef',
      'algorithm.useTis',
      'rollout.maxTokensPerGpu',
      'rollout.overSamplingBatchSize',
      'data.numRollout',
      'rollout.maxPromptLen',
      'model.save',
    ]);
    let error: unknown;
    try {
      slimeArgs({ ...base, rollout: { batchSize: 4, temperature: 0 } });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).message).toMatch(
      /rollout\.temperature: rollout temperature must be > 0 \(got 0\)/,
    );
    expect((error as ConfigError).data?.problems).toHaveLength(1);
  });

  it('reproduces the algorithm rules: reinforce++ needs normalized advantages, fixed global batch must match steps', () => {
    expect(problems({ ...base, algorithm: { advantageEstimator: 'reinforce_plus_plus' } })).toEqual([
      'algorithm.normalizeAdvantages: reinforce_plus_plus requires normalizeAdvantages: true',
    ]);
    expect(
      problems({
        ...base,
        rollout: { batchSize: 4, samplesPerPrompt: 4, numStepsPerRollout: 2, globalBatchSize: 16 },
      }),
    ).toEqual([
      'rollout.globalBatchSize: with numStepsPerRollout 2, globalBatchSize must be batchSize × samplesPerPrompt ÷ steps = 8 (got 16)',
    ]);
    expect(problems({ ...base, parallelism: { tensor: 3 } })).toEqual([
      'parallelism: tensor × pipeline × context = 3 must divide the 4 trainer GPUs',
    ]);
    expect(
      problems({
        ...base,
        engines: { external: ['a:1'], sglangConfig: '/c.yaml', prefillNumServers: 1 },
      }).map((p) => p.split(':')[0]),
    ).toEqual(['engines.sglangConfig', 'engines.prefillNumServers']);
  });

  it('refuses unknown, misspelled and secret-carrying flags; accepts the allow-list and --sglang-*', () => {
    expect(
      problems({
        ...base,
        extraArgs: [
          '--recompute-granularty',
          'full',
          '--update-weight-encoding',
          'indices',
          '--wandb-key',
          'x',
          '--sglang-port',
          '1',
        ],
      }),
    ).toEqual([
      'extraArgs[0]: --recompute-granularty: unknown flag (slime would silently ignore it) (did you mean --recompute-granularity?)',
      'extraArgs[2]: --update-weight-encoding: slime has no such flag (it is silently ignored); use --update-weight-delta-encoding xor|overwrite',
      'extraArgs[4]: --wandb-key: pass WANDB_API_KEY through the runtime env (secrets never go in argv)',
      'extraArgs[6]: --sglang-port: slime sets this SGLang server arg itself; remove it',
    ]);
    expect(problems({ ...base, extraArgs: ['--rollout-batch-size', '8'] })).toEqual([
      'extraArgs[0]: --rollout-batch-size is set by the typed config; change the matching config field instead',
    ]);
    expect(problems({ ...base, model: { hfCheckpoint: '/m', args: ['--num-layerz', '2'] } })[0]).toMatch(
      /model\.args\[0\]: --num-layerz: unknown flag.*did you mean --num-layers/,
    );
    const ok = slimeArgs({
      ...base,
      extraArgs: ['--sglang-enable-metrics', '--recompute-granularity', 'full', '--my-patch-flag', '1'],
      allowFlags: ['my-patch-flag'],
    });
    expect(ok.args.slice(-5)).toEqual([
      '--sglang-enable-metrics',
      '--recompute-granularity',
      'full',
      '--my-patch-flag',
      '1',
    ]);
  });

  it('validates types with the field path', () => {
    expect(() => slimeArgs({ ...base, rollout: { batchSize: -1 } })).toThrow(/rollout\.batchSize/);
    expect(() => slimeArgs({ ...base, weights: { transport: 'rdma' as 'disk' } })).toThrow(
      /weights\.transport/,
    );
    try {
      slimeArgs({ ...base, rollout: { batchSize: 0 } });
    } catch (e) {
      expect(VimeError.isInstance(e)).toBe(true);
    }
  });

  it('joins argv for a shell, keeping $VAR references expandable and quoting the rest', () => {
    expect(shellJoin(['python3', 'a b', "it's", 'h-0.$G:1', '--x'], { expandVariables: true })).toBe(
      `python3 'a b' 'it'\\''s' "h-0.$G:1" --x`,
    );
  });
});
