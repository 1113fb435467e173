/**
 * slime command builder: a typed config becomes the exact argv of `train.py` (sync) or
 * `train_async.py` (async). Every combination slime rejects at start-up (after the GPUs are allocated)
 * is rejected here first, all at once, with the fix.
 */
import { ConfigError, parseWith } from '@vime/core';
import { closest } from '@vime/core/utils';
import { z } from 'zod';
import { flagProblem, KNOWN_FLAGS } from './flags.js';

const path = z.string().min(1);
const int = z.number().int();
const pos = int.positive();

/** Schema of the slime config `slimeArgs` turns into slime's argv. */
export const SlimeConfigSchema = z.strictObject({
  /** `async` overlaps rollout and training (`train_async.py`); `sync` serializes them (`train.py`). */
  mode: z.enum(['sync', 'async']).default('async'),
  python: z.string().default('python3'),
  model: z.strictObject({
    hfCheckpoint: path,
    /** Reference model (Megatron torch_dist); needed for a KL term. */
    refLoad: path.optional(),
    load: path.optional(),
    save: path.optional(),
    saveInterval: pos.optional(),
    /** Architecture flags (what slime's `scripts/models/<model>.sh` sets), checked against the allow-list. */
    args: z.array(z.string()).default([]),
  }),
  cluster: z
    .strictObject({
      actorNumNodes: pos.default(1),
      actorGpusPerNode: pos.default(8),
      rolloutNumGpus: pos.optional(),
      rolloutGpusPerEngine: pos.default(1),
      /** Engines share the trainer's GPUs (weights move over IPC). */
      colocate: z.boolean().default(false),
    })
    .prefault({}),
  parallelism: z
    .strictObject({
      tensor: pos.default(1),
      pipeline: pos.default(1),
      context: pos.default(1),
      expert: pos.default(1),
      expertTensor: pos.default(1),
      /** Defaults to on when tensor > 1. */
      sequenceParallel: z.boolean().optional(),
    })
    .prefault({}),
  engines: z
    .strictObject({
      /** External engine addresses `host:port`; empty = slime starts its own engines. */
      external: z
        .array(z.string().regex(/^(?:https?:\/\/)?[^\s:/]+:\d+$/, 'expected "host:port"'))
        .default([]),
      routerIp: z.string().optional(),
      routerPort: pos.optional(),
      memFractionStatic: z.number().gt(0).lte(1).optional(),
      sglangConfig: path.optional(),
      prefillNumServers: pos.optional(),
    })
    .prefault({}),
  weights: z
    .strictObject({
      mode: z.enum(['full', 'delta']).default('full'),
      transport: z.enum(['nccl', 'disk']).default('nccl'),
      diskDir: path.optional(),
      keepFiles: z.boolean().default(false),
      deltaEncoding: z.enum(['xor', 'overwrite']).optional(),
      deltaChecksum: z.enum(['xxh3-128', 'blake3', 'adler32']).optional(),
      /** Engine-host-local dir that delta updates are pulled into. */
      localCheckpointDir: path.optional(),
      interval: pos.optional(),
    })
    .prefault({}),
  data: z.strictObject({
    promptData: path,
    inputKey: z.string().default('input'),
    labelKey: z.string().optional(),
    metadataKey: z.string().optional(),
    applyChatTemplate: z.boolean().default(false),
    shuffle: z.boolean().default(false),
    numRollout: pos.optional(),
    numEpoch: pos.optional(),
  }),
  rollout: z.strictObject({
    batchSize: pos,
    samplesPerPrompt: pos.default(1),
    /** Defaults to batchSize × samplesPerPrompt ÷ numStepsPerRollout: train on exactly what was generated. */
    globalBatchSize: pos.optional(),
    numStepsPerRollout: pos.optional(),
    overSamplingBatchSize: pos.optional(),
    microBatchSize: pos.optional(),
    maxTokensPerGpu: pos.optional(),
    /** Dynamic batching by token count (needs maxTokensPerGpu). */
    dynamicBatchSize: z.boolean().default(false),
    balanceData: z.boolean().default(false),
    maxContextLen: pos.optional(),
    maxPromptLen: pos.optional(),
    maxResponseLen: pos.optional(),
    temperature: z.number().default(1),
    topP: z.number().gt(0).lte(1).optional(),
    topK: int.optional(),
    seed: int.optional(),
    functionPath: z.string().optional(),
    /** Python path of a custom `generate(args, sample, sampling_params)` (the agent loop). */
    customGenerateFunctionPath: z.string().optional(),
    customRolloutLogFunctionPath: z.string().optional(),
    /** slime's `--dynamic-sampling-filter-path`: a group filter run before a group joins the batch. */
    dynamicSamplingFilterPath: z.string().optional(),
    /** slime's `--custom-reward-post-process-path`: replaces its group reshape and normalisation. */
    customRewardPostProcessPath: z.string().optional(),
  }),
  algorithm: z
    .strictObject({
      advantageEstimator: z
        .enum(['grpo', 'gspo', 'cispo', 'reinforce_plus_plus', 'reinforce_plus_plus_baseline', 'ppo'])
        .default('grpo'),
      useKlLoss: z.boolean().default(false),
      klLossCoef: z.number().min(0).optional(),
      klLossType: z.enum(['k1', 'k2', 'k3', 'low_var_kl']).optional(),
      klCoef: z.number().min(0).optional(),
      epsClip: z.number().positive().optional(),
      epsClipHigh: z.number().positive().optional(),
      entropyCoef: z.number().min(0).optional(),
      normalizeAdvantages: z.boolean().default(false),
      disableGrpoStdNormalization: z.boolean().default(false),
      useRolloutLogprobs: z.boolean().default(false),
      useTis: z.boolean().default(false),
      lossType: z.enum(['policy_loss', 'sft_loss', 'custom_loss']).optional(),
    })
    .prefault({}),
  optimizer: z
    .strictObject({
      name: z.enum(['adam', 'sgd']).default('adam'),
      lr: z.number().positive().default(1e-6),
      lrDecayStyle: z.enum(['constant', 'linear', 'cosine']).optional(),
      weightDecay: z.number().min(0).optional(),
      adamBeta1: z.number().optional(),
      adamBeta2: z.number().optional(),
    })
    .prefault({}),
  /** Weights & Biases: project/group/team only. The API key travels as WANDB_API_KEY in the job's env. */
  wandb: z
    .strictObject({ project: z.string(), group: z.string().optional(), team: z.string().optional() })
    .optional(),
  /** Further slime/Megatron flags (`['--recompute-granularity', 'full']`), checked against the allow-list. */
  extraArgs: z.array(z.string()).default([]),
  /** Flags (without dashes) to accept in addition to the built-in allow-list, e.g. from a patched slime. */
  allowFlags: z.array(z.string()).default([]),
});
/** A slime config as written. */
export type SlimeConfig = z.input<typeof SlimeConfigSchema>;
/** A slime config with every default filled in. */
export type ResolvedSlimeConfig = z.output<typeof SlimeConfigSchema>;

/** One combination slime would reject, with the config path and the fix. */
export interface SlimeProblem {
  /** Config field, e.g. `weights.transport`. */
  path: string;
  message: string;
}

/** slime's command: the script, its flags and the whole argv. */
export interface SlimeCommand {
  script: 'train.py' | 'train_async.py';
  /** Flags after the script. */
  args: string[];
  /** `[python, script, ...args]`. */
  argv: string[];
}

function globalBatch(c: ResolvedSlimeConfig): number {
  return (
    c.rollout.globalBatchSize ??
    Math.floor((c.rollout.batchSize * c.rollout.samplesPerPrompt) / (c.rollout.numStepsPerRollout ?? 1))
  );
}

/** Every combination slime would reject (or silently misread), with the fix; empty when the config is sound. */
export function checkSlimeConfig(config: SlimeConfig | ResolvedSlimeConfig): SlimeProblem[] {
  const c = parseWith(SlimeConfigSchema, config, 'slime config');
  const problems: SlimeProblem[] = [];
  const add = (path: string, message: string) => problems.push({ path, message });
  const w = c.weights;
  const r = c.rollout;
  const a = c.algorithm;

  if (w.mode === 'delta') {
    if (w.transport !== 'disk') {
      add(
        'weights.transport',
        `delta weight updates require transport "disk", got "${w.transport}"; set weights.transport: disk (and weights.diskDir)`,
      );
    }
    if (c.cluster.colocate)
      add(
        'weights.mode',
        'delta weight updates are not supported with colocated engines; use mode "full" or external engines',
      );
    if (!w.localCheckpointDir)
      add(
        'weights.localCheckpointDir',
        'delta weight updates need an engine-host-local checkpoint dir (e.g. /root/slime-local-ckpt)',
      );
  } else if (w.deltaEncoding || w.deltaChecksum) {
    add('weights.deltaEncoding', 'deltaEncoding/deltaChecksum only apply to mode "delta"');
  }
  if (w.transport === 'disk' && !w.diskDir)
    add(
      'weights.diskDir',
      'transport "disk" needs a directory both trainer and engines mount (e.g. /shared/policy)',
    );
  if (c.mode === 'async' && c.cluster.colocate)
    add(
      'cluster.colocate',
      'async training (train_async.py) refuses colocated engines; use mode "sync" or external engines',
    );
  if (c.cluster.colocate && c.engines.external.length)
    add(
      'engines.external',
      'colocated engines run on the trainer GPUs; drop engines.external or cluster.colocate',
    );
  if (r.temperature <= 0)
    add(
      'rollout.temperature',
      `rollout temperature must be > 0 (got ${r.temperature}); slime samples, it does not decode greedily`,
    );
  const needsRef = a.useKlLoss || (a.klCoef ?? 0) !== 0;
  if (needsRef && !c.model.refLoad)
    add('model.refLoad', 'a KL term (useKlLoss or klCoef) needs the reference checkpoint: set model.refLoad');
  if ((a.klCoef ?? 0) !== 0 && (a.klLossCoef ?? 0) !== 0)
    add('algorithm.klCoef', 'use either klCoef (reward penalty) or klLossCoef (loss term), not both');
  if (a.advantageEstimator.startsWith('reinforce_plus_plus') && !a.normalizeAdvantages) {
    add('algorithm.normalizeAdvantages', `${a.advantageEstimator} requires normalizeAdvantages: true`);
  }
  if (a.useRolloutLogprobs && a.useTis)
    add(
      'algorithm.useTis',
      'useTis corrects for rollout/train mismatch; it cannot be combined with useRolloutLogprobs',
    );
  if (r.dynamicBatchSize && !r.maxTokensPerGpu)
    add('rollout.maxTokensPerGpu', 'dynamicBatchSize needs maxTokensPerGpu');
  if (r.numStepsPerRollout !== undefined && r.globalBatchSize !== undefined) {
    const expected = Math.floor((r.batchSize * r.samplesPerPrompt) / r.numStepsPerRollout);
    if (r.globalBatchSize !== expected) {
      add(
        'rollout.globalBatchSize',
        `with numStepsPerRollout ${r.numStepsPerRollout}, globalBatchSize must be batchSize × samplesPerPrompt ÷ steps = ${expected} (got ${r.globalBatchSize})`,
      );
    }
  }
  if (r.overSamplingBatchSize !== undefined && r.overSamplingBatchSize < r.batchSize) {
    add('rollout.overSamplingBatchSize', `must be >= rollout.batchSize (${r.batchSize})`);
  }
  if (c.data.numRollout === undefined && c.data.numEpoch === undefined)
    add('data.numRollout', 'set data.numRollout (steps) or data.numEpoch');
  if (r.maxPromptLen !== undefined && r.maxContextLen !== undefined && r.maxPromptLen > r.maxContextLen - 1) {
    add('rollout.maxPromptLen', `must be <= maxContextLen - 1 (${r.maxContextLen - 1})`);
  }
  if (c.model.saveInterval !== undefined && !c.model.save)
    add('model.save', 'saveInterval needs a save directory');
  if (c.engines.external.length) {
    if (c.engines.sglangConfig)
      add('engines.sglangConfig', 'sglangConfig cannot be combined with external engines');
    if (c.engines.prefillNumServers)
      add('engines.prefillNumServers', 'prefillNumServers cannot be combined with external engines');
  }
  const gb = globalBatch(c);
  if (gb < 1) add('rollout.globalBatchSize', `derived global batch is ${gb}; lower numStepsPerRollout`);

  const p = c.parallelism;
  const modelParallel = p.tensor * p.pipeline * p.context;
  const actorGpus = c.cluster.actorNumNodes * c.cluster.actorGpusPerNode;
  if (actorGpus % modelParallel !== 0) {
    add(
      'parallelism',
      `tensor × pipeline × context = ${modelParallel} must divide the ${actorGpus} trainer GPUs`,
    );
  }
  if (p.sequenceParallel && p.tensor === 1)
    add('parallelism.sequenceParallel', 'sequence parallelism needs tensor > 1');

  const extra = new Set(c.allowFlags);
  const emitted = new Set(
    buildArgs({ ...c, extraArgs: [] })
      .filter((t) => t.startsWith('--'))
      .map((t) => t.slice(2)),
  );
  for (const [field, tokens] of [
    ['model.args', c.model.args],
    ['extraArgs', c.extraArgs],
  ] as const) {
    tokens.forEach((token, i) => {
      if (!token.startsWith('--')) return;
      const flag = token.slice(2).split('=')[0]!;
      const problem = flagProblem(flag, extra);
      if (problem) {
        const hint = problem.startsWith('unknown') ? closest(flag, KNOWN_FLAGS) : undefined;
        add(`${field}[${i}]`, `${token}: ${problem}${hint ? ` (did you mean --${hint}?)` : ''}`);
      } else if (emitted.has(flag) && field === 'extraArgs') {
        add(
          `${field}[${i}]`,
          `${token} is set by the typed config; change the matching config field instead`,
        );
      }
    });
  }
  return problems;
}

const num = (v: number) => String(v);

function buildArgs(c: ResolvedSlimeConfig): string[] {
  const out: string[] = [];
  const flag = (name: string, on: boolean) => {
    if (on) out.push(`--${name}`);
  };
  const opt = (name: string, value: string | number | undefined) => {
    if (value !== undefined) out.push(`--${name}`, typeof value === 'number' ? num(value) : value);
  };
  const cl = c.cluster;
  opt('actor-num-nodes', cl.actorNumNodes);
  opt('actor-num-gpus-per-node', cl.actorGpusPerNode);
  opt('rollout-num-gpus', cl.rolloutNumGpus);
  flag('colocate', cl.colocate);
  if (c.engines.external.length) out.push('--rollout-external-engine-addrs', ...c.engines.external);
  const w = c.weights;
  opt('update-weight-mode', w.mode);
  opt('update-weight-delta-encoding', w.deltaEncoding);
  opt('update-weight-delta-checksum', w.deltaChecksum);
  opt('update-weight-local-checkpoint-dir', w.localCheckpointDir);
  opt('update-weight-transport', w.transport);
  opt('update-weight-disk-dir', w.diskDir);
  flag('update-weight-disk-keep-files', w.keepFiles);
  opt('update-weights-interval', w.interval);
  out.push(...c.model.args);
  const m = c.model;
  opt('hf-checkpoint', m.hfCheckpoint);
  opt('ref-load', m.refLoad);
  opt('load', m.load);
  opt('save', m.save);
  opt('save-interval', m.saveInterval);
  const d = c.data;
  const r = c.rollout;
  opt('prompt-data', d.promptData);
  opt('input-key', d.inputKey);
  opt('label-key', d.labelKey);
  opt('metadata-key', d.metadataKey);
  flag('apply-chat-template', d.applyChatTemplate);
  flag('rollout-shuffle', d.shuffle);
  opt('num-rollout', d.numRollout);
  opt('num-epoch', d.numEpoch);
  opt('rollout-batch-size', r.batchSize);
  opt('n-samples-per-prompt', r.samplesPerPrompt);
  opt('over-sampling-batch-size', r.overSamplingBatchSize);
  opt('rollout-max-response-len', r.maxResponseLen);
  opt('rollout-max-prompt-len', r.maxPromptLen);
  opt('rollout-max-context-len', r.maxContextLen);
  opt('rollout-temperature', r.temperature);
  opt('rollout-top-p', r.topP);
  opt('rollout-top-k', r.topK);
  opt('rollout-seed', r.seed);
  opt('global-batch-size', globalBatch(c));
  opt('num-steps-per-rollout', r.numStepsPerRollout);
  opt('micro-batch-size', r.microBatchSize);
  flag('balance-data', r.balanceData);
  opt('rollout-function-path', r.functionPath);
  opt('custom-generate-function-path', r.customGenerateFunctionPath);
  opt('custom-rollout-log-function-path', r.customRolloutLogFunctionPath);
  opt('dynamic-sampling-filter-path', r.dynamicSamplingFilterPath);
  opt('custom-reward-post-process-path', r.customRewardPostProcessPath);
  const o = c.optimizer;
  opt('optimizer', o.name);
  opt('lr', o.lr);
  opt('lr-decay-style', o.lrDecayStyle);
  opt('weight-decay', o.weightDecay);
  opt('adam-beta1', o.adamBeta1);
  opt('adam-beta2', o.adamBeta2);
  const a = c.algorithm;
  opt('advantage-estimator', a.advantageEstimator);
  flag('use-kl-loss', a.useKlLoss);
  opt('kl-loss-coef', a.klLossCoef);
  opt('kl-loss-type', a.klLossType);
  opt('kl-coef', a.klCoef);
  opt('entropy-coef', a.entropyCoef);
  opt('eps-clip', a.epsClip);
  opt('eps-clip-high', a.epsClipHigh);
  flag('normalize-advantages', a.normalizeAdvantages);
  flag('disable-grpo-std-normalization', a.disableGrpoStdNormalization);
  flag('use-rollout-logprobs', a.useRolloutLogprobs);
  flag('use-tis', a.useTis);
  opt('loss-type', a.lossType);
  if (c.wandb) {
    flag('use-wandb', true);
    opt('wandb-project', c.wandb.project);
    opt('wandb-group', c.wandb.group);
    opt('wandb-team', c.wandb.team);
  }
  const p = c.parallelism;
  opt('tensor-model-parallel-size', p.tensor);
  flag('sequence-parallel', p.sequenceParallel ?? p.tensor > 1);
  opt('pipeline-model-parallel-size', p.pipeline);
  opt('context-parallel-size', p.context);
  opt('expert-model-parallel-size', p.expert);
  opt('expert-tensor-parallel-size', p.expertTensor);
  flag('use-dynamic-batch-size', r.dynamicBatchSize);
  opt('max-tokens-per-gpu', r.maxTokensPerGpu);
  opt('rollout-num-gpus-per-engine', cl.rolloutGpusPerEngine);
  opt('sglang-mem-fraction-static', c.engines.memFractionStatic);
  opt('sglang-router-ip', c.engines.routerIp);
  opt('sglang-router-port', c.engines.routerPort);
  opt('sglang-config', c.engines.sglangConfig);
  opt('prefill-num-servers', c.engines.prefillNumServers);
  out.push(...c.extraArgs);
  return out;
}

/**
 * Build slime's argv. Throws a `ConfigError` listing every problem (`data.problems`) when slime would
 * reject the config or silently ignore a flag.
 */
export function slimeArgs(config: SlimeConfig | ResolvedSlimeConfig): SlimeCommand {
  const c = parseWith(SlimeConfigSchema, config, 'slime config');
  const problems = checkSlimeConfig(c);
  if (problems.length) {
    throw new ConfigError(
      `slime would reject this config:\n${problems.map((p) => `  - ${p.path}: ${p.message}`).join('\n')}`,
      { data: { problems } },
    );
  }
  const script = c.mode === 'async' ? 'train_async.py' : 'train.py';
  const args = buildArgs(c);
  return { script, args, argv: [c.python, script, ...args] };
}
