/**
 * Preflight: everything that can be checked before a GPU is allocated, reported all at once. GPU counts
 * against parallelism and engines, the rollout concurrency against the sandbox
 * pool, the rendered YAML against SkyPilot's loader rules, and required env.
 */

import { checkSlimeConfig } from '@vime/slime';
import type { LaunchPlan } from './plan.js';
import { renderJobGroup, renderVolume } from './skypilot/render.js';
import { formatProblem, validateSkyPilotYaml } from './skypilot/validate.js';

/** One problem preflight found: a code, the config path, a message and its severity. */
export interface PreflightProblem {
  /** Stable identifier, e.g. `gpu.trainer`, `sandbox.pool`, `env.missing`. */
  code: string;
  /** Plan field the problem is about, e.g. `slime.parallelism.tensor`. */
  path: string;
  message: string;
  severity: 'error' | 'warning';
}

/** What preflight found: every problem at once, and whether any is an error. */
export interface PreflightReport {
  /** No errors (warnings allowed). */
  ok: boolean;
  problems: PreflightProblem[];
}

const gpus = (accelerators: string) => Number(accelerators.split(':')[1] ?? 1);

/** Check a launch plan before anything starts: GPUs, engines, sandbox pool sizing, reachability and env. */
export function preflight(plan: LaunchPlan): PreflightReport {
  const problems: PreflightProblem[] = [];
  const add = (code: string, path: string, message: string, severity: 'error' | 'warning' = 'error') =>
    problems.push({ code, path, message, severity });
  const { jobGroup, slime, config } = plan;

  // GPUs: the trainer job must hold exactly what slime will ask Ray for.
  const trainerGpus = gpus(jobGroup.trainer.accelerators) * jobGroup.trainer.numNodes;
  const actorGpus = slime.cluster.actorNumNodes * slime.cluster.actorGpusPerNode;
  if (actorGpus !== trainerGpus) {
    add(
      'gpu.trainer',
      'slime.cluster',
      `slime asks for ${actorGpus} trainer GPUs (actorNumNodes × actorGpusPerNode) but the trainer job holds ${trainerGpus} (${jobGroup.trainer.accelerators} × ${jobGroup.trainer.numNodes} node(s))`,
    );
  }
  // Engines: one address per engine job, each job holding the GPUs slime assumes per engine.
  const engineGpus = gpus(jobGroup.engines.accelerators);
  if (!slime.cluster.colocate) {
    if (slime.engines.external.length !== jobGroup.engines.count) {
      add(
        'engines.count',
        'slime.engines.external',
        `slime is given ${slime.engines.external.length} engine address(es) but the Job Group runs ${jobGroup.engines.count} engine job(s)`,
      );
    }
    if (engineGpus !== slime.cluster.rolloutGpusPerEngine) {
      add(
        'gpu.engine',
        'engines.accelerators',
        `each engine job holds ${engineGpus} GPU(s) (${jobGroup.engines.accelerators}) but slime expects ${slime.cluster.rolloutGpusPerEngine} per engine (rolloutGpusPerEngine)`,
      );
    }
  }
  if (jobGroup.engines.kind === 'vllm') {
    add(
      'engines.kind',
      'engines.kind',
      "slime's rollout and weight updates speak SGLang's API (/generate, /server_info, /update_weights_from_disk); vLLM engines need a custom generate function and weight-update path",
      'warning',
    );
  }
  for (const problem of checkSlimeConfig(slime))
    add('slime.config', `slime.${problem.path}`, problem.message);

  // One sandbox claim per rollout the rollout server runs at once (VIME_ROLLOUT_CONCURRENCY).
  const concurrent = slime.rollout.batchSize * slime.rollout.samplesPerPrompt;
  if (!config.sandbox.noPool && config.sandbox.poolReplicas < concurrent) {
    add(
      'sandbox.pool',
      'sandbox.poolReplicas',
      `${concurrent} concurrent rollouts (rollout batch ${slime.rollout.batchSize} × ${slime.rollout.samplesPerPrompt} samples) need at least ${concurrent} warm sandboxes; the pool has ${config.sandbox.poolReplicas}, so ${concurrent - config.sandbox.poolReplicas} claims would wait or fall back to cold starts`,
    );
  }
  // Disk weight sync goes through the shared volume, which every job must mount read-write-many.
  if (slime.weights.transport === 'disk') {
    const volume = jobGroup.volume;
    if (!volume) {
      add(
        'volume.missing',
        'volume',
        'disk weight sync needs a shared volume mounted by the trainer and every engine',
      );
    } else {
      if (volume.accessMode !== 'ReadWriteMany') {
        add(
          'volume.access',
          'volume.accessMode',
          `trainer and engines share the volume, so it must be ReadWriteMany (got ${volume.accessMode})`,
        );
      }
      const dir = slime.weights.diskDir ?? '';
      if (dir !== volume.mountPath && !dir.startsWith(`${volume.mountPath}/`)) {
        add(
          'volume.path',
          'slime.weights.diskDir',
          `weights are written to ${dir || '(unset)'}, outside the shared volume at ${volume.mountPath}`,
        );
      }
    }
  }
  // The rendered YAML must load under SkyPilot's own rules.
  for (const [what, text] of [
    ['jobGroup', renderJobGroup(jobGroup)],
    ['volume', renderVolume(plan.volume)],
  ] as const) {
    for (const problem of validateSkyPilotYaml(text).problems) {
      add('skypilot.yaml', what, formatProblem(problem), problem.severity);
    }
  }
  // Env.
  for (const name of plan.requiredEnv) {
    if (!plan.env[name])
      add('env.missing', `env.${name}`, `${name} must be set in the environment that launches this plan`);
  }
  if (config.wandb.enabled === 'auto' && !plan.env.WANDB_API_KEY) {
    add(
      'env.optional',
      'env.WANDB_API_KEY',
      'WANDB_API_KEY is not set: the run will not log to Weights & Biases',
      'warning',
    );
  }
  return { ok: !problems.some((x) => x.severity === 'error'), problems };
}
