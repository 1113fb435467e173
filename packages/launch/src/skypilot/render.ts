/**
 * Typed SkyPilot builders: a Job Group (header + trainer + N inference engines) and the shared
 * weight-sync volume. Engine job names, the trainer's members list and discovery hostnames are derived
 * from the engine count, never written by hand.
 */
import { ConfigError, parseWith } from '@vime/core';
import { Document, isMap, isScalar, isSeq, Scalar, type YAMLMap } from 'yaml';
import { z } from 'zod';
import {
  DURATION_PATTERN,
  ENV_KEY_PATTERN,
  INFRA_PATTERN,
  NAME_PATTERN,
  VOLUME_SIZE_PATTERN,
} from './patterns.js';

/** Env names that hold credentials: they belong in `secrets`, referenced by name, never inlined. */
const SECRET_NAME = /(?:^|_)(?:API_KEY|ACCESS_KEY|PRIVATE_KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$/i;

const name = z.string().regex(NAME_PATTERN, 'use letters, digits, "-" and "_" only (SkyPilot job names)');
const envValue = z.union([z.string(), z.number(), z.boolean()], {
  error: (issue) =>
    issue.input === null || issue.input === undefined
      ? 'env values are never null: write "" for an empty value'
      : 'expected a string, number or boolean',
});
const envs = z.record(z.string().regex(ENV_KEY_PATTERN, 'env names match [A-Za-z_][A-Za-z0-9_]*'), envValue);
const accelerators = z
  .string()
  .regex(/^[A-Za-z0-9_.-]+:[0-9]+$/, 'write accelerators as "NAME:COUNT", e.g. "H100:4" or "L40S:1"');
const infra = z.string().regex(INFRA_PATTERN, 'expected "kubernetes[/context]" or "cloud[/region[/zone]]"');

/** Schema of the shared volume the trainer and engines mount. */
export const VolumeConfigSchema = z.strictObject({
  name: name.default('slime-policy'),
  type: z.enum(['k8s-pvc', 'k8s-hostpath', 'runpod-network-volume']).default('k8s-pvc'),
  size: z.string().regex(VOLUME_SIZE_PATTERN, 'expected a size such as "100Gi"').default('100Gi'),
  infra: infra.default('kubernetes'),
  /** ReadWriteMany is required when the trainer and engines share the volume for disk weight sync. */
  accessMode: z
    .enum(['ReadWriteOnce', 'ReadWriteOncePod', 'ReadWriteMany', 'ReadOnlyMany'])
    .default('ReadWriteMany'),
  storageClassName: z.string().optional(),
  namespace: z.string().optional(),
  /** Where jobs mount it. */
  mountPath: z.string().startsWith('/', 'mount paths are absolute').default('/shared/policy'),
});
/** A volume config as written. */
export type VolumeConfig = z.input<typeof VolumeConfigSchema>;
/** A volume config with every default filled in. */
export type ResolvedVolumeConfig = z.output<typeof VolumeConfigSchema>;

/** Schema of an engine kind. */
export const EngineKindSchema = z.enum(['sglang', 'vllm']);
/** An inference engine: SGLang or vLLM. */
export type EngineKind = z.infer<typeof EngineKindSchema>;

/** Schema of the Job Group's engine jobs. */
export const EnginesConfigSchema = z.strictObject({
  kind: EngineKindSchema.default('sglang'),
  /** How many engine jobs; each is one server. */
  count: z.number().int().min(1, 'at least one engine').max(64),
  /** Job name of the first engine; later ones get a number (`sglang`, `sglang2`, ...). Defaults to the kind. */
  namePrefix: name.optional(),
  /** Per-engine GPUs, independent of the trainer's (engines can sit on cheaper GPUs). */
  accelerators: accelerators.default('H100:1'),
  infra: infra.optional(),
  image: z.string().optional(),
  port: z.number().int().min(1).max(65535).default(30000),
  /** Model path served when `run` is derived. */
  model: z.string().optional(),
  setup: z.string().optional(),
  /** Shell run command; derived from kind, model, accelerators and port when absent. */
  run: z.string().optional(),
  envs: envs.default({}),
});
/** The engine jobs of a Job Group as written. */
export type EnginesConfig = z.input<typeof EnginesConfigSchema>;

/** Schema of the Job Group's trainer job. */
export const TrainerConfigSchema = z.strictObject({
  name: name.default('trainer'),
  accelerators: accelerators.default('H100:4'),
  numNodes: z.number().int().min(1).default(1),
  infra: infra.optional(),
  image: z.string().optional(),
  fileMounts: z.record(z.string(), z.string()).default({}),
  envs: envs.default({}),
  /** Secret names, emitted as `NAME: ""` and supplied at launch with `--secret NAME`. */
  secrets: z
    .array(z.string().regex(ENV_KEY_PATTERN, 'secret names match [A-Za-z_][A-Za-z0-9_]*'))
    .default([]),
  setup: z.string().optional(),
  run: z.string(),
});
/** The trainer job of a Job Group as written. */
export type TrainerConfig = z.input<typeof TrainerConfigSchema>;

/** Schema of a Job Group config: its header, engine jobs and trainer job. */
export const JobGroupConfigSchema = z.strictObject({
  name,
  /** Default infra and container image for every job; each job may override. */
  infra: infra.default('kubernetes'),
  image: z.string().optional(),
  workdir: z.string().optional(),
  terminationDelay: z
    .union([z.string(), z.number().int().min(0)])
    .refine((v) => DURATION_PATTERN.test(String(v)), 'expected a duration such as "60s", "5m" or seconds')
    .default('60s'),
  trainer: TrainerConfigSchema,
  engines: EnginesConfigSchema,
  /**
   * A trainer env listing the engine job names, space separated (e.g. `SGLANG_MEMBERS`, as the reference
   * scripts read it). None by default: every env the trainer gets must be read by something.
   */
  membersEnv: z.string().regex(ENV_KEY_PATTERN).optional(),
  volume: VolumeConfigSchema.optional(),
});
/** A Job Group config as written. */
export type JobGroupConfig = z.input<typeof JobGroupConfigSchema>;
/** A Job Group config with every default filled in. */
export type ResolvedJobGroupConfig = z.output<typeof JobGroupConfigSchema>;

/** Env var SkyPilot injects into every job of a group (the `-n` name or the header name). */
export const JOBGROUP_NAME_ENV = 'SKYPILOT_JOBGROUP_NAME';

function acceleratorCount(spec: string): number {
  return Number(spec.split(':')[1] ?? '1');
}

/** Fill in a Job Group config's defaults, checking it. */
export function resolveJobGroupConfig(
  config: JobGroupConfig | ResolvedJobGroupConfig,
): ResolvedJobGroupConfig {
  const resolved = parseWith(JobGroupConfigSchema, config, 'Job Group config');
  const names = engineJobNames(resolved);
  const trainerName = resolved.trainer.name;
  if (names.includes(trainerName)) {
    throw new ConfigError(
      `trainer.name ${JSON.stringify(trainerName)} collides with an engine job name; rename one`,
    );
  }
  const membersEnv = resolved.membersEnv;
  checkNoInlinedSecrets(resolved.trainer.envs, resolved.trainer.secrets, 'trainer');
  checkNoInlinedSecrets(resolved.engines.envs, [], 'engines');
  if (membersEnv !== undefined && membersEnv in resolved.trainer.envs) {
    throw new ConfigError(
      `trainer.envs.${membersEnv} is derived from engines.count; remove it from the config (it would say ${JSON.stringify(resolved.trainer.envs[membersEnv])})`,
    );
  }
  if (resolved.engines.run === undefined && resolved.engines.model === undefined) {
    throw new ConfigError(
      'engines: give either `run` (the server command) or `model` (to derive the command)',
    );
  }
  return resolved;
}

/** The engine job names: `sglang`, `sglang2`, `sglang3`, ... */
export function engineJobNames(config: Pick<ResolvedJobGroupConfig, 'engines'>): string[] {
  const prefix = config.engines.namePrefix ?? config.engines.kind;
  return Array.from({ length: config.engines.count }, (_, i) => (i === 0 ? prefix : `${prefix}${i + 1}`));
}

/**
 * Discovery addresses of the engines as seen from the trainer: `<job>-0.$SKYPILOT_JOBGROUP_NAME:<port>`.
 * The group name stays a shell variable because `sky jobs launch -n` replaces the header's name.
 */
export function engineAddresses(config: JobGroupConfig | ResolvedJobGroupConfig): string[] {
  const resolved = parseWith(JobGroupConfigSchema, config, 'Job Group config');
  return engineJobNames(resolved).map((job) => `${job}-0.$${JOBGROUP_NAME_ENV}:${resolved.engines.port}`);
}

function engineRun(engines: ResolvedJobGroupConfig['engines']): string {
  if (engines.run !== undefined) return engines.run;
  const tp = acceleratorCount(engines.accelerators);
  const model = engines.model!;
  return engines.kind === 'sglang'
    ? `python -m sglang.launch_server --model-path ${model} --tp ${tp} --host 0.0.0.0 --port ${engines.port}`
    : `vllm serve ${model} --tensor-parallel-size ${tp} --host 0.0.0.0 --port ${engines.port}`;
}

function stringEnvs(map: Record<string, string | number | boolean>): Record<string, string> {
  return Object.fromEntries(Object.entries(map).map(([k, v]) => [k, String(v)]));
}

type Job = Record<string, unknown>;

/** Schema of one SkyPilot task. */
export const TaskConfigSchema = z.strictObject({
  name,
  infra: infra.optional(),
  accelerators: accelerators.optional(),
  cpus: z.union([z.number().positive(), z.string().regex(/^[0-9]+(?:\.[0-9]+)?\+?$/)]).optional(),
  memory: z.union([z.number().positive(), z.string().regex(/^[0-9]+(?:\.[0-9]+)?\+?$/)]).optional(),
  /** Container image, e.g. `docker:slimerl/slime:latest`. */
  image: z.string().optional(),
  useSpot: z.boolean().optional(),
  ports: z
    .array(z.union([z.number().int().min(1).max(65535), z.string().regex(/^[0-9]+(?:-[0-9]+)?$/)]))
    .optional(),
  numNodes: z.number().int().min(1).default(1),
  workdir: z.string().optional(),
  fileMounts: z.record(z.string(), z.string()).default({}),
  /** Mount path -> existing volume name. */
  volumes: z.record(z.string().startsWith('/', 'mount paths are absolute'), name).default({}),
  envs: envs.default({}),
  /** Secret names, emitted as `NAME: ""` and supplied at launch with `--secret NAME`. */
  secrets: z
    .array(z.string().regex(ENV_KEY_PATTERN, 'secret names match [A-Za-z_][A-Za-z0-9_]*'))
    .default([]),
  setup: z.string().optional(),
  run: z.string(),
});
/** A SkyPilot task config as written. */
export type TaskConfig = z.input<typeof TaskConfigSchema>;
/** A SkyPilot task config with every default filled in. */
export type ResolvedTaskConfig = z.output<typeof TaskConfigSchema>;

/** Credentials belong in `secrets`, referenced by name; an env that looks like one must be empty. */
function checkNoInlinedSecrets(
  envMap: Record<string, string | number | boolean>,
  secrets: string[],
  where: string,
): void {
  for (const [key, value] of Object.entries(envMap)) {
    if (SECRET_NAME.test(key) && String(value) !== '') {
      throw new ConfigError(
        `${where}.envs.${key} looks like a credential: do not inline it; list ${JSON.stringify(key)} in ${where}.secrets and pass it at launch with --secret ${key}`,
      );
    }
  }
  for (const secret of secrets) {
    if (secret in envMap)
      throw new ConfigError(`${where}: ${secret} is both an env and a secret; keep it in secrets only`);
  }
}

/** One task as a plain object in SkyPilot's key order. */
export function taskDocument(config: TaskConfig | ResolvedTaskConfig): Job {
  const t = parseWith(TaskConfigSchema, config, 'task config');
  checkNoInlinedSecrets(t.envs, t.secrets, 'task');
  const resources = Object.fromEntries(
    Object.entries({
      infra: t.infra,
      accelerators: t.accelerators,
      cpus: t.cpus,
      memory: t.memory,
      image_id: t.image,
      use_spot: t.useSpot,
      ports: t.ports,
    }).filter(([, v]) => v !== undefined),
  );
  return {
    name: t.name,
    ...(t.numNodes !== 1 ? { num_nodes: t.numNodes } : {}),
    ...(Object.keys(resources).length ? { resources } : {}),
    ...(t.workdir !== undefined ? { workdir: t.workdir } : {}),
    ...(Object.keys(t.volumes).length ? { volumes: t.volumes } : {}),
    ...(Object.keys(t.fileMounts).length ? { file_mounts: t.fileMounts } : {}),
    ...(Object.keys(t.envs).length ? { envs: stringEnvs(t.envs) } : {}),
    ...(t.secrets.length ? { secrets: Object.fromEntries(t.secrets.map((s) => [s, ''])) } : {}),
    ...(t.setup !== undefined ? { setup: t.setup } : {}),
    run: t.run,
  };
}

/** Render one task YAML for `sky launch` / `sky jobs launch`. */
export function renderTask(config: TaskConfig | ResolvedTaskConfig): string {
  return toYaml(taskDocument(config));
}

/** The Job Group as plain objects: `[header, ...engines, trainer]`, ready for YAML. */
export function jobGroupDocuments(config: JobGroupConfig | ResolvedJobGroupConfig): Job[] {
  const c = resolveJobGroupConfig(config);
  const shared = {
    infra: c.infra,
    ...(c.image !== undefined ? { image: c.image } : {}),
    ...(c.workdir !== undefined ? { workdir: c.workdir } : {}),
    volumes: c.volume ? { [c.volume.mountPath]: c.volume.name } : {},
  };
  const names = engineJobNames(c);
  const e = c.engines;
  const engines = names.map((jobName) =>
    taskDocument({
      ...shared,
      name: jobName,
      accelerators: e.accelerators,
      ...(e.infra !== undefined ? { infra: e.infra } : {}),
      ...(e.image !== undefined ? { image: e.image } : {}),
      envs: e.envs,
      ...(e.setup !== undefined ? { setup: e.setup } : {}),
      run: engineRun(e),
    }),
  );
  const t = c.trainer;
  const trainer = taskDocument({
    ...shared,
    name: t.name,
    numNodes: t.numNodes,
    accelerators: t.accelerators,
    ...(t.infra !== undefined ? { infra: t.infra } : {}),
    ...(t.image !== undefined ? { image: t.image } : {}),
    fileMounts: t.fileMounts,
    envs: { ...(c.membersEnv ? { [c.membersEnv]: names.join(' ') } : {}), ...t.envs },
    secrets: t.secrets,
    ...(t.setup !== undefined ? { setup: t.setup } : {}),
    run: t.run,
  });
  const header = {
    name: c.name,
    execution: 'parallel',
    primary_tasks: [t.name],
    termination_delay: c.terminationDelay,
  };
  return [header, ...engines, trainer];
}

const yamlOptions = { lineWidth: 0 } as const;

/** Quote every env/secret value so an empty one reads `KEY: ""`, never `KEY:` (which SkyPilot loads as null). */
function quoteValues(map: unknown): void {
  if (!isMap(map)) return;
  for (const pair of (map as YAMLMap).items) {
    if (isScalar(pair.value)) pair.value.type = Scalar.QUOTE_DOUBLE;
  }
}

function toYaml(job: Job, comment?: string): string {
  const doc = new Document(job);
  quoteValues(doc.get('envs', true));
  quoteValues(doc.get('secrets', true));
  const primary = doc.get('primary_tasks', true);
  if (isSeq(primary)) primary.flow = true;
  const run = doc.get('run', true);
  if (isScalar(run) && typeof run.value === 'string' && run.value.includes('\n'))
    run.type = Scalar.BLOCK_LITERAL;
  if (comment) doc.commentBefore = comment;
  return doc.toString(yamlOptions);
}

/** Render the Job Group as multi-document YAML for `sky jobs launch`. */
export function renderJobGroup(config: JobGroupConfig | ResolvedJobGroupConfig): string {
  const c = resolveJobGroupConfig(config);
  const [header, ...jobs] = jobGroupDocuments(c);
  const engineGpus = `${c.engines.count} x ${c.engines.kind} ${c.engines.accelerators}`;
  const secrets = c.trainer.secrets.map((s) => ` --secret ${s}`).join('');
  const comment = [
    ` Job Group ${c.name}: ${c.trainer.name} ${c.trainer.accelerators}${c.trainer.numNodes > 1 ? ` x ${c.trainer.numNodes} nodes` : ''} + ${engineGpus}.`,
    ...(c.volume ? [` Once: sky volumes apply volume.yaml`] : []),
    ` Launch: sky jobs launch -n ${c.name} job-group.yaml${secrets}`,
  ].join('\n');
  return [toYaml(header!, comment), ...jobs.map((job) => toYaml(job))].map((text) => `---\n${text}`).join('');
}

/** Render the shared volume for `sky volumes apply`. */
export function renderVolume(config: VolumeConfig | ResolvedVolumeConfig = {}): string {
  const v = parseWith(VolumeConfigSchema, config, 'volume config');
  const body = {
    name: v.name,
    type: v.type,
    size: v.size,
    infra: v.infra,
    config: {
      access_mode: v.accessMode,
      ...(v.storageClassName !== undefined ? { storage_class_name: v.storageClassName } : {}),
      ...(v.namespace !== undefined ? { namespace: v.namespace } : {}),
    },
  };
  return toYaml(
    body,
    ` Shared weight-sync volume (mounted at ${v.mountPath}). Apply once: sky volumes apply volume.yaml`,
  );
}
