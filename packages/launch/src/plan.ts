/**
 * The launch plan: one typed config for a disaggregated coding-agent RL run (trainer + N inference
 * engines + sandboxes), resolved into the Job Group, the volume and the slime command so the three can
 * never disagree. Every default is the reference coding-agent example's: Qwen3-14B on an H100:4
 * trainer, 1-GPU SGLang engines, async mode, delta weights over disk; the rows are a SWE-smith dataset file
 * (`dataset.path`, every repo unless `dataset.repos` filters) or, by default, the offline task set.
 */
import { ConfigError, parseWith } from '@vime/core';
import { type ResolvedSlimeConfig, SlimeConfigSchema } from '@vime/slime';
import { z } from 'zod';
import { MODEL_ARCH_ARGS } from './models.js';
import {
  EngineKindSchema,
  engineAddresses,
  engineJobNames,
  JOBGROUP_NAME_ENV,
  type ResolvedJobGroupConfig,
  type ResolvedVolumeConfig,
  resolveJobGroupConfig,
  VolumeConfigSchema,
} from './skypilot/render.js';

const pos = z.number().int().positive();

/** The slime bridge's launch scripts, relative to the job's workdir (this repository). */
export const BRIDGE_LAUNCH = 'examples/slime-bridge/launch';
/** The slime bridge's Python module folder, relative to the job's workdir. */
export const BRIDGE_PYTHON = 'packages/slime/python';

/** Schema of the launch config: one typed config for the Job Group, its engines, the trainer and slime. */
export const LaunchConfigSchema = z.strictObject({
  /** Job Group name; defaults to `coding-agent-rl` (1 engine) or `coding-agent-rl-<N>eng`. */
  name: z.string().optional(),
  infra: z.string().default('kubernetes'),
  image: z.string().default('docker:slimerl/slime:nightly-dev-20260707a'),
  workdir: z.string().default('.'),
  trainer: z
    .strictObject({
      accelerators: z.string().default('H100:4'),
      numNodes: pos.default(1),
      setup: z.string().default(`bash ${BRIDGE_LAUNCH}/trainer-setup.sh`),
      run: z.string().default(`bash ${BRIDGE_LAUNCH}/trainer-run.sh`),
      fileMounts: z.record(z.string(), z.string()).default({}),
    })
    .prefault({}),
  engines: z
    .strictObject({
      count: pos.max(64).default(1),
      kind: EngineKindSchema.default('sglang'),
      /** Per-engine GPUs; engines may use cheaper GPUs than the trainer. */
      accelerators: z.string().default('H100:1'),
      port: pos.default(30000),
      setup: z.string().default(`bash ${BRIDGE_LAUNCH}/engine-setup.sh`),
      run: z.string().default(`bash ${BRIDGE_LAUNCH}/engine-run.sh`),
      memFractionStatic: z.number().default(0.7),
    })
    .prefault({}),
  model: z
    .strictObject({
      dir: z.string().default('Qwen3-14B'),
      /** Hugging Face repository the checkpoint is fetched from. */
      hfRepo: z.string().default('Qwen/Qwen3-14B'),
      script: z.string().default('qwen3-14B.sh'),
      /** Architecture flags; defaults to the known ones for `script`. */
      args: z.array(z.string()).optional(),
      tensorParallel: pos.default(4),
      saveInterval: pos.default(5),
    })
    .prefault({}),
  mode: z.enum(['sync', 'async']).default('async'),
  weights: z
    .strictObject({
      transport: z.enum(['disk', 'nccl']).default('disk'),
      mode: z.enum(['delta', 'full']).default('delta'),
      localCheckpointDir: z.string().default('/root/slime-local-ckpt'),
    })
    .prefault({}),
  rollout: z
    .strictObject({
      batchSize: pos.default(23),
      samplesPerPrompt: pos.default(8),
      numRollout: pos.default(8),
      shuffle: z.boolean().default(true),
      maxContextLen: pos.default(32768),
      maxResponseLen: pos.default(2048),
      temperature: z.number().default(1),
      maxTokensPerGpu: pos.default(9216),
      promptData: z.string().default('$HOME/sky_workdir/swesmith.jsonl'),
    })
    .prefault({}),
  dataset: z
    .strictObject({
      /** SWE-smith rows (.jsonl/.parquet) on the trainer; default: the offline task set. */
      path: z.string().optional(),
      /** Repo substrings to keep (default: every repo of the dataset). */
      repos: z.array(z.string()).default([]),
      perRepo: pos.default(16),
      poolSuffix: z.string().default(''),
    })
    .prefault({}),
  sandbox: z
    .strictObject({
      /** The rollout server's sandbox backend on the trainer. */
      kind: z.enum(['bubblewrap', 'docker']).default('docker'),
      /** On-demand sandbox per claim instead of warm pools. */
      noPool: z.boolean().default(false),
      /** Warm sandboxes per repo pool; must cover the concurrent rollouts. */
      poolReplicas: pos.default(184),
    })
    .prefault({}),
  agent: z
    .strictObject({
      maxTurns: pos.default(20),
      evalTimeoutSec: pos.default(900),
    })
    .prefault({}),
  wandb: z
    .strictObject({
      project: z.string().default('slime-coding-agent'),
      group: z.string().optional(),
      /** `auto`: log to wandb when WANDB_API_KEY is set where the plan is resolved (the trainer job). */
      enabled: z.union([z.boolean(), z.literal('auto')]).default('auto'),
    })
    .prefault({}),
  volume: VolumeConfigSchema.prefault({}),
  ray: z
    .strictObject({
      address: z.url().default('http://127.0.0.1:8265'),
      /** `token` when the cluster runs with RAY_AUTH_MODE=token (then RAY_AUTH_TOKEN is required). */
      auth: z.enum(['none', 'token']).default('none'),
    })
    .prefault({}),
  /** Env names that must be set where the plan is launched. */
  requiredEnv: z.array(z.string()).default([]),
});
/** A launch config as written: every field optional. */
export type LaunchConfig = z.input<typeof LaunchConfigSchema>;
/** A launch config with every default filled in. */
export type ResolvedLaunchConfig = z.output<typeof LaunchConfigSchema>;

/** A resolved launch: the config, the Job Group, the volume and slime's config. */
export interface LaunchPlan {
  config: ResolvedLaunchConfig;
  jobGroup: ResolvedJobGroupConfig;
  volume: ResolvedVolumeConfig;
  slime: ResolvedSlimeConfig;
  /** Engine job names, in order. */
  engineJobs: string[];
  /** Engine health URLs as the trainer sees them (`$SKYPILOT_JOBGROUP_NAME` left for the shell). */
  engineUrls: string[];
  /** Env names the launch needs, and the env they were checked against. */
  requiredEnv: string[];
  env: Record<string, string | undefined>;
}

/** Resolve a launch config (all fields optional) into a consistent plan. */
export function resolvePlan(
  config: LaunchConfig = {},
  options: { env?: Record<string, string | undefined> | undefined } = {},
): LaunchPlan {
  const c = parseWith(LaunchConfigSchema, config, 'launch config');
  const jobGroup = jobGroupOf(c, config);
  const env = options.env ?? {};
  const wandbOn = c.wandb.enabled === 'auto' ? Boolean(env.WANDB_API_KEY) : c.wandb.enabled;
  const slime = parseWith(SlimeConfigSchema, slimeConfigOf(c, jobGroup, wandbOn), 'slime config');
  const requiredEnv = [
    ...c.requiredEnv,
    ...(c.ray.auth === 'token' ? ['RAY_AUTH_TOKEN'] : []),
    ...(c.wandb.enabled === true ? ['WANDB_API_KEY'] : []),
  ];
  return {
    config: c,
    jobGroup,
    volume: parseWith(VolumeConfigSchema, c.volume, 'volume config'),
    slime,
    engineJobs: engineJobNames(jobGroup),
    engineUrls: engineJobNames(jobGroup).map(
      (job) => `http://${job}-0.$${JOBGROUP_NAME_ENV}:${c.engines.port}`,
    ),
    requiredEnv,
    env,
  };
}

/** GPUs of an accelerator spec such as `H100:4` (1 when it names none). */
const gpusOf = (accelerators: string) => Number(accelerators.split(':')[1] ?? 1);

/**
 * The Job Group: N engine jobs and the trainer job, with the env their scripts read. `config` is the
 * launch config as given, handed to the trainer so it resolves exactly this plan.
 */
function jobGroupOf(c: ResolvedLaunchConfig, config: LaunchConfig): ResolvedJobGroupConfig {
  const n = c.engines.count;
  return resolveJobGroupConfig({
    name: c.name ?? (n === 1 ? 'coding-agent-rl' : `coding-agent-rl-${n}eng`),
    infra: c.infra,
    image: c.image,
    workdir: c.workdir,
    terminationDelay: '60s',
    volume: c.volume,
    engines: {
      kind: c.engines.kind,
      count: n,
      accelerators: c.engines.accelerators,
      port: c.engines.port,
      setup: c.engines.setup,
      run: c.engines.run,
      // Read by the engine scripts: which checkpoint to fetch and serve, and how.
      envs: {
        MODEL_DIR: c.model.dir,
        MODEL_HF_REPO: c.model.hfRepo,
        ENGINE_TP: gpusOf(c.engines.accelerators),
        SGLANG_MEM_FRACTION: c.engines.memFractionStatic,
      },
    },
    trainer: {
      accelerators: c.trainer.accelerators,
      numNodes: c.trainer.numNodes,
      fileMounts: c.trainer.fileMounts,
      // Each of these is read by a script the trainer runs or by the rollout server (`vime launch check`
      // fails on one nothing reads); the slime command carries everything else.
      envs: {
        MODEL_SCRIPT: c.model.script,
        MODEL_DIR: c.model.dir,
        MODEL_HF_REPO: c.model.hfRepo,
        SWESMITH_REPOS: c.dataset.repos.join(' '),
        SWESMITH_PER_REPO: c.dataset.perRepo,
        SWESMITH_POOL_SUFFIX: c.dataset.poolSuffix,
        ...(c.dataset.path ? { SWESMITH_DATASET: c.dataset.path } : {}),
        SANDBOX_NO_POOL: c.sandbox.noPool ? '1' : '0',
        SANDBOX_POOL_REPLICAS: c.sandbox.poolReplicas,
        VIME_SANDBOX: c.sandbox.kind,
        AGENT_MAX_TURNS: c.agent.maxTurns,
        AGENT_EVAL_TIMEOUT_SEC: c.agent.evalTimeoutSec,
        // One rollout in flight per sample of the batch (the warm pools are sized for it).
        VIME_ROLLOUT_CONCURRENCY: c.rollout.batchSize * c.rollout.samplesPerPrompt,
        // The config itself, so the trainer resolves exactly this plan (`vime ray submit` in trainer-run.sh).
        VIME_LAUNCH_CONFIG: JSON.stringify(config),
      },
      secrets: ['WANDB_API_KEY'],
      setup: c.trainer.setup,
      run: c.trainer.run,
    },
  });
}

/** The slime command's config (before validation): the plan's model, cluster, weights, data and rollout. */
function slimeConfigOf(
  c: ResolvedLaunchConfig,
  jobGroup: ResolvedJobGroupConfig,
  wandbOn: boolean,
): z.input<typeof SlimeConfigSchema> {
  const n = c.engines.count;
  const group = c.wandb.group ?? (n === 1 ? 'coding-agent' : `coding-agent-${n}eng`);
  const modelRoot = `/root/${c.model.dir}`;
  const delta = c.weights.mode === 'delta';
  const disk = c.weights.transport === 'disk';
  return {
    mode: c.mode,
    model: {
      hfCheckpoint: modelRoot,
      refLoad: `${modelRoot}_torch_dist`,
      load: `${modelRoot}_slime/`,
      save: `${modelRoot}_slime/`,
      saveInterval: c.model.saveInterval,
      args: [...(c.model.args ?? MODEL_ARCH_ARGS[c.model.script] ?? [])],
    },
    cluster: {
      actorNumNodes: c.trainer.numNodes,
      actorGpusPerNode: gpusOf(c.trainer.accelerators),
      rolloutGpusPerEngine: gpusOf(c.engines.accelerators),
    },
    parallelism: { tensor: c.model.tensorParallel },
    engines: { external: engineAddresses(jobGroup), memFractionStatic: c.engines.memFractionStatic },
    weights: {
      mode: c.weights.mode,
      transport: c.weights.transport,
      ...(delta ? { localCheckpointDir: c.weights.localCheckpointDir } : {}),
      ...(disk ? { diskDir: c.volume.mountPath, keepFiles: true } : {}),
    },
    data: {
      promptData: c.rollout.promptData,
      inputKey: 'text',
      labelKey: 'label',
      metadataKey: 'metadata',
      shuffle: c.rollout.shuffle,
      numRollout: c.rollout.numRollout,
    },
    rollout: slimeRolloutOf(c),
    ...TRAINING_RECIPE,
    ...(wandbOn ? { wandb: { project: c.wandb.project, group } } : {}),
    extraArgs: [...RECOMPUTE_AND_KERNEL_ARGS],
  };
}

/** The rollout settings, wired to the slime bridge's Python hooks. */
function slimeRolloutOf(c: ResolvedLaunchConfig): z.input<typeof SlimeConfigSchema>['rollout'] {
  return {
    batchSize: c.rollout.batchSize,
    samplesPerPrompt: c.rollout.samplesPerPrompt,
    maxResponseLen: c.rollout.maxResponseLen,
    maxContextLen: c.rollout.maxContextLen,
    temperature: c.rollout.temperature,
    balanceData: true,
    dynamicBatchSize: true,
    maxTokensPerGpu: c.rollout.maxTokensPerGpu,
    // The slime bridge's Python module (packages/slime/python, on the job's PYTHONPATH): the agent
    // rollout, the filter that keeps infra-failed rollouts out of the batch (over-sampling refills it),
    // per-prompt reward normalisation that counts each rollout once, and Vime's rollout metrics.
    customGenerateFunctionPath: 'vime_bridge.generate',
    dynamicSamplingFilterPath: 'vime_bridge.drop_infra_failed_groups',
    overSamplingBatchSize: Math.ceil(c.rollout.batchSize * 1.25),
    customRewardPostProcessPath: 'vime_bridge.normalize_rewards_by_group',
    customRolloutLogFunctionPath: 'vime_bridge.log_rollout_metrics',
  };
}

/** The reference example's GRPO algorithm and optimizer settings (not in the launch config). */
const TRAINING_RECIPE = {
  algorithm: {
    advantageEstimator: 'grpo',
    useKlLoss: true,
    klLossCoef: 0,
    klLossType: 'low_var_kl',
    entropyCoef: 0,
    epsClip: 0.2,
    epsClipHigh: 0.28,
  },
  optimizer: {
    name: 'adam',
    lr: 1e-6,
    lrDecayStyle: 'constant',
    weightDecay: 0.1,
    adamBeta1: 0.9,
    adamBeta2: 0.98,
  },
} as const;

/** Megatron flags the reference run passes: full recompute, no dropout, fp32 reductions, flash attention. */
const RECOMPUTE_AND_KERNEL_ARGS = [
  '--recompute-granularity',
  'full',
  '--recompute-method',
  'uniform',
  '--recompute-num-layers',
  '1',
  '--attention-dropout',
  '0.0',
  '--hidden-dropout',
  '0.0',
  '--accumulate-allreduce-grads-in-fp32',
  '--attention-softmax-in-fp32',
  '--attention-backend',
  'flash',
] as const;

/** Replace `$VAR` / `${VAR}` in `text` from `env`; unknown names are reported, not left in. */
export function expandEnv(text: string, env: Record<string, string | undefined>): string {
  return text.replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, (_, key: string) => {
    const value = env[key];
    if (value === undefined || value === '') {
      throw new ConfigError(
        `${key} is not set: export it (inside a Job Group SkyPilot sets ${JOBGROUP_NAME_ENV})`,
      );
    }
    return value;
  });
}
