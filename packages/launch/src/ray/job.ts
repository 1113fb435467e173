/**
 * The Ray job that runs slime for a plan: the argv as a shell entrypoint, and a runtime env that gives
 * the rollout actors (which read their env from Ray, not the launching shell) the trainer's settings.
 * Secrets travel only in `runtime_env.env_vars`, never in the entrypoint.
 */
import { shellJoin, shellQuote } from '@vime/core/utils';
import { slimeArgs } from '@vime/slime';
import { BRIDGE_PYTHON, type LaunchPlan } from '../plan.js';
import { JOBGROUP_NAME_ENV } from '../skypilot/render.js';
import type { JobSubmitRequest } from './types.js';

/** Engine addresses in the argv are `$VAR` references the job's shell expands. */
const expandable = { expandVariables: true };

/** Options of `slimeJobRequest`. */
export interface SlimeJobOptions {
  /** Environment of the launching process: secrets and `SKYPILOT_JOBGROUP_NAME` are read from it. */
  env?: Record<string, string | undefined> | undefined;
  submissionId?: string | undefined;
  /** Where slime is checked out on the trainer. Default `/root/slime`. */
  slimeDir?: string | undefined;
  /** The slime bridge's Python folder (the custom generate function, filter and hooks). Default: the job's workdir copy. */
  codeDir?: string | undefined;
}

/**
 * Env names forwarded from the launching environment when set: credentials, API endpoints, and where the
 * slime bridge finds the rollout server (the Ray worker running the generate function reads it).
 */
export const FORWARDED_ENV = [
  'VIME_ROLLOUT_URL',
  'VIME_ROLLOUT_TIMEOUT',
  'WANDB_API_KEY',
  'WANDB_TEAM',
  'HF_TOKEN',
  'SKYPILOT_API_SERVER_ENDPOINT',
  'SKYPILOT_SERVICE_ACCOUNT_TOKEN',
];

/** Build the Ray submission for a plan's slime command. */
export function slimeJobRequest(plan: LaunchPlan, options: SlimeJobOptions = {}): JobSubmitRequest {
  const env = options.env ?? plan.env;
  const { argv } = slimeArgs(plan.slime);
  // Engine addresses name the group through $SKYPILOT_JOBGROUP_NAME; resolve it now when known.
  const group = env[JOBGROUP_NAME_ENV];
  const resolved = group ? argv.map((a) => a.replaceAll(`$${JOBGROUP_NAME_ENV}`, group)) : argv;
  const slimeDir = options.slimeDir ?? '/root/slime';
  const home = env.HOME ?? '/root';
  const codeDir = (options.codeDir ?? `$HOME/sky_workdir/${BRIDGE_PYTHON}`).replace('$HOME', home);
  // Ray's runtime env replaces the workers' PYTHONPATH: merge what the launching shell exports into it.
  const pythonPath = [...new Set(['/root/Megatron-LM/', codeDir, ...(env.PYTHONPATH ?? '').split(':')])]
    .filter(Boolean)
    .join(':');
  const envVars: Record<string, string> = {
    PYTHONPATH: pythonPath,
    CUDA_DEVICE_MAX_CONNECTIONS: '1',
    PYTHONUNBUFFERED: '1',
    ...Object.fromEntries(Object.entries(plan.jobGroup.trainer.envs).map(([k, v]) => [k, String(v)])),
  };
  for (const name of FORWARDED_ENV) {
    const value = env[name];
    if (value) envVars[name] = value;
  }
  return {
    entrypoint: `cd ${shellQuote(slimeDir, expandable)} && ${shellJoin(resolved, expandable)}`,
    ...(options.submissionId ? { submission_id: options.submissionId } : {}),
    runtime_env: { env_vars: envVars },
    metadata: {
      job_group: plan.jobGroup.name,
      engines: String(plan.jobGroup.engines.count),
      mode: plan.slime.mode,
    },
  };
}

const SECRET = /(?:API_KEY|ACCESS_KEY|PRIVATE_KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$/i;

/** A copy safe to print or log: secret-looking env values replaced by `***`. */
export function redactRequest(request: JobSubmitRequest): JobSubmitRequest {
  const vars = request.runtime_env?.env_vars;
  if (!vars) return request;
  const redacted = Object.fromEntries(
    Object.entries(vars).map(([k, v]) => [k, SECRET.test(k) && v ? '***' : v]),
  );
  return { ...request, runtime_env: { ...request.runtime_env, env_vars: redacted } };
}
