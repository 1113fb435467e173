/**
 * SkyPilot's loader rules in TypeScript: the task schema (`sky/utils/schemas.py`), the rules its loader
 * applies on top (`sky/task.py`: null envs, volume shapes) and the Job Group header checks
 * (`sky/utils/dag_utils.py`). Every problem is reported with its document and YAML path.
 */
import { formatPath } from '@vime/core';
import { didYouMean } from '@vime/core/utils';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';
import {
  ACCELERATOR_PATTERN,
  DURATION_PATTERN,
  ENV_KEY_PATTERN,
  INFRA_PATTERN,
  NAME_PATTERN,
  VOLUME_INFRA_PATTERN,
  VOLUME_SIZE_PATTERN,
} from './patterns.js';

/** One problem SkyPilot's loader would report: the document, the YAML path and a message. */
export interface SkyPilotProblem {
  /** 1-based document number in the YAML stream. */
  document: number;
  /** The job the document defines, when it has a name. */
  job?: string | undefined;
  /** Dotted path inside the document, e.g. `resources.accelerators` or `envs.WANDB_API_KEY`. */
  path: string;
  message: string;
  /** Warnings are what SkyPilot logs and ignores (unknown header keys). */
  severity: 'error' | 'warning';
}

/** What a SkyPilot YAML file is. */
export type SkyPilotYamlKind = 'task' | 'job-group' | 'pipeline' | 'volume';

/** What `validateSkyPilotYaml` found: the file's kind and its problems. */
export interface SkyPilotValidation {
  kind: SkyPilotYamlKind;
  /** True when there is no error (warnings allowed). */
  ok: boolean;
  problems: SkyPilotProblem[];
  /** The parsed documents. */
  documents: unknown[];
}

/** `document 3 (trainer) envs.TP: message` */
export function formatProblem(p: SkyPilotProblem): string {
  const where = `document ${p.document}${p.job ? ` (${p.job})` : ''}${p.path ? ` ${p.path}` : ''}`;
  return `${p.severity === 'warning' ? 'warning: ' : ''}${where}: ${p.message}`;
}

const str = z.string();
const strOrNum = z.union([z.string(), z.number()]);
const stringMap = z.record(z.string(), z.string());

const accelerators = z.union([
  z.string().regex(ACCELERATOR_PATTERN, 'expected "NAME" or "NAME:COUNT", e.g. "H100:4"'),
  z.record(z.string(), z.number().positive().nullable()),
  z.array(z.string().regex(ACCELERATOR_PATTERN, 'expected "NAME" or "NAME:COUNT"')),
]);
const infra = z
  .string()
  .regex(INFRA_PATTERN, 'expected "cloud[/region[/zone]]", "*" or "kubernetes[/context]"');
const cpuOrMemory = z.union([
  z.number().positive(),
  z.string().regex(/^[0-9]+(?:\.[0-9]+)?\+?$/, 'expected a number with an optional "+", e.g. "4+"'),
]);
const port = z.union([z.number().int().min(1).max(65535), z.string().regex(/^[0-9]+(?:-[0-9]+)?$/)]);

const resourcesShape = {
  infra,
  cloud: str,
  region: str,
  zone: str,
  accelerators,
  accelerator_args: z.record(z.string(), z.unknown()),
  cpus: cpuOrMemory,
  memory: cpuOrMemory,
  instance_type: str,
  use_spot: z.boolean(),
  job_recovery: z.union([
    str,
    z.strictObject({
      strategy: str.nullable(),
      max_restarts_on_errors: z.number().int().min(0),
      recover_on_exit_codes: z.union([z.number().int(), z.array(z.number().int())]),
    }),
  ]),
  disk_size: z.union([z.number().int().positive(), str]),
  disk_tier: z.enum(['low', 'medium', 'high', 'ultra', 'best']),
  network_tier: z.enum(['standard', 'best']),
  local_disk: str,
  max_hourly_cost: z.number().positive(),
  ports: z.union([port, z.array(port)]),
  labels: stringMap,
  image_id: z.union([str, z.record(z.string(), z.string())]).nullable(),
  autostop: z.union([z.boolean(), z.number().int(), str, z.record(z.string(), z.unknown())]),
  priority: z.number().int().min(0).max(1000),
  priority_class: str,
  volumes: z.array(z.record(z.string(), z.unknown())),
  _docker_login_config: z.record(z.string(), z.unknown()),
  _docker_username_for_runpod: str,
  _is_image_managed: z.boolean(),
  _requires_fuse: z.boolean(),
  _cluster_config_overrides: z.record(z.string(), z.unknown()),
};
const singleResources = z.strictObject(resourcesShape).partial();
const resources = z
  .strictObject({
    ...resourcesShape,
    any_of: z.array(singleResources),
    ordered: z.array(singleResources),
  })
  .partial();

const storage = z
  .strictObject({
    name: str,
    source: z.union([str, z.array(str)]),
    store: z
      .string()
      .refine(
        (s) =>
          ['S3', 'GCS', 'AZURE', 'R2', 'IBM', 'OCI', 'NEBIUS', 'COREWEAVE', 'VASTDATA', 'VOLUME'].includes(
            s.toUpperCase(),
          ),
        'expected one of S3, GCS, AZURE, R2, IBM, OCI, NEBIUS, COREWEAVE, VASTDATA, VOLUME',
      ),
    persistent: z.boolean(),
    mode: z
      .string()
      .refine(
        (s) => ['MOUNT', 'COPY', 'MOUNT_CACHED'].includes(s.toUpperCase()),
        'expected MOUNT, COPY or MOUNT_CACHED',
      ),
    mount_options: z.record(z.string(), z.unknown()),
    type: str,
    config: z.record(z.string(), z.unknown()),
    _bucket_sub_path: str,
    _force_delete: z.boolean(),
  })
  .partial();

const envValue = z.union([z.string(), z.number(), z.boolean()]);
const taskVolume = z.union([
  z.string().min(1),
  z.strictObject({ name: str, sub_path: str.optional() }),
  z.looseObject({ size: strOrNum }),
]);

const taskShape = {
  name: str,
  workdir: z.union([str, z.strictObject({ url: str, ref: str.optional() })]),
  event_callback: str,
  num_nodes: z.number().int().min(1),
  resources,
  file_mounts: z.record(z.string(), z.union([str, storage])),
  service: z.record(z.string(), z.unknown()),
  pool: z.record(z.string(), z.unknown()),
  setup: str,
  run: str,
  envs: z.record(z.string(), envValue.nullable()),
  secrets: z.union([z.record(z.string(), envValue.nullable()), z.array(z.string())]),
  managed_secrets: z.array(z.union([str, z.record(z.string(), z.looseObject({ mount_path: str }))])),
  inputs: z.record(z.string(), z.unknown()),
  outputs: z.record(z.string(), z.unknown()),
  file_mounts_mapping: z.record(z.string(), z.unknown()),
  config: z.record(z.string(), z.unknown()),
  volumes: z.record(z.string(), taskVolume),
  volume_mounts: z.array(z.unknown()),
  api_server_access: z.boolean(),
  _metadata: z.record(z.string(), z.unknown()),
};
const taskSchema = z.strictObject(taskShape).partial();
const TASK_KEYS = Object.keys(taskShape);
const RESOURCE_KEYS = [...Object.keys(resourcesShape), 'any_of', 'ordered'];

const volumeShape = {
  name: z.string().regex(NAME_PATTERN, 'use letters, digits, "-" and "_" only'),
  type: z.enum(['k8s-pvc', 'k8s-hostpath', 'runpod-network-volume']),
  infra: z.string().regex(VOLUME_INFRA_PATTERN, 'expected "cloud[/region[/zone]]" or "kubernetes[/context]"'),
  size: z.union([
    z.number().int().positive(),
    z.string().regex(VOLUME_SIZE_PATTERN, 'expected a size such as "100Gi"'),
  ]),
  use_existing: z.boolean().optional(),
  config: z
    .strictObject({
      storage_class_name: str,
      access_mode: z.enum(['ReadWriteOnce', 'ReadWriteOncePod', 'ReadWriteMany', 'ReadOnlyMany']),
      namespace: str,
      host_path: str,
      cleanup_on_deletion: z.boolean(),
    })
    .partial()
    .optional(),
  labels: stringMap.optional(),
};
const volumeSchema = z.strictObject(volumeShape).partial({ infra: true, size: true });
const HEADER_KEYS = ['name', 'execution', 'primary_tasks', 'termination_delay', 'inter_connection'];

type Report = (path: string, message: string, severity?: 'error' | 'warning') => void;

function zodProblems(schema: z.ZodType, value: unknown, known: Record<string, string[]>, report: Report) {
  const result = schema.safeParse(value);
  if (result.success) return;
  for (const issue of result.error.issues) {
    const path = formatPath(issue.path);
    if (issue.code === 'unrecognized_keys') {
      const scope =
        path
          .split('.')
          .pop()
          ?.replace(/\[\d+\]$/, '') ?? '';
      const keys = known[scope] ?? known[''] ?? [];
      for (const key of issue.keys) {
        report(path ? `${path}.${key}` : key, `unknown key${didYouMean(key, keys)}`);
      }
    } else if (issue.code === 'invalid_union') {
      report(path, unionMessage(issue));
    } else {
      report(path, issue.message);
    }
  }
}

function unionMessage(issue: z.core.$ZodIssueInvalidUnion): string {
  // Prefer the branch that got furthest: its first non-type message is the useful one.
  const messages = issue.errors.flat().map((i) => i.message);
  const specific = messages.find((m) => !m.startsWith('Invalid input: expected'));
  return specific ?? issue.message;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Check one task document against the schema and the loader rules; `report` receives each problem. */
function checkTask(raw: unknown, report: Report): void {
  if (!isRecord(raw)) {
    report('', `a task must be a mapping, found ${raw === null ? 'an empty document' : typeof raw}`);
    return;
  }
  // The loader drops top-level keys whose value is null before validating.
  const task = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== null));
  zodProblems(taskSchema, task, { '': TASK_KEYS, resources: RESOURCE_KEYS, any_of: RESOURCE_KEYS }, report);

  for (const field of ['envs', 'secrets'] as const) {
    const map = task[field];
    if (!isRecord(map)) continue;
    for (const [key, value] of Object.entries(map)) {
      if (!ENV_KEY_PATTERN.test(key) && !(field === 'secrets' && key.startsWith('secrets:'))) {
        report(`${field}.${key}`, `invalid ${field === 'envs' ? 'environment variable' : 'secret'} name`);
      }
      if (value === null && !key.startsWith('secrets:')) {
        report(
          `${field}.${key}`,
          `${field === 'envs' ? 'Environment variable' : 'Secret'} '${key}' is None. Set a value in the YAML or with --${field === 'envs' ? 'env' : 'secret'} ${key}=...; for an empty value write ${key}: ""`,
        );
      }
    }
  }
}

function checkHeader(header: Record<string, unknown>, jobNames: string[], report: Report): void {
  for (const key of Object.keys(header)) {
    if (!HEADER_KEYS.includes(key)) {
      report(
        key,
        `unknown Job Group header key, ignored by SkyPilot${didYouMean(key, HEADER_KEYS)}`,
        'warning',
      );
    }
  }
  const name = header.name;
  if (name === undefined || name === null) report('name', 'a Job Group header needs a name');
  else if (typeof name !== 'string' || !NAME_PATTERN.test(name)) {
    report('name', `invalid Job Group name ${JSON.stringify(name)}: use letters, digits, "-" and "_" only`);
  }
  const primary = header.primary_tasks;
  if (primary !== undefined && primary !== null) {
    if (!Array.isArray(primary) || primary.some((p) => typeof p !== 'string')) {
      report('primary_tasks', 'primary_tasks must be a list of job names');
    } else {
      primary.forEach((p: string, i) => {
        if (!jobNames.includes(p)) {
          report(
            `primary_tasks[${i}]`,
            `primary_tasks references unknown job ${JSON.stringify(p)}${didYouMean(p, jobNames)}`,
          );
        }
      });
    }
  }
  const delay = header.termination_delay;
  const checkDelay = (value: unknown, path: string) => {
    if ((typeof value !== 'string' && typeof value !== 'number') || !DURATION_PATTERN.test(String(value))) {
      report(
        path,
        `invalid duration ${JSON.stringify(value)}: write a whole number with an optional unit s, m, h, d or w (e.g. "60s")`,
      );
    }
  };
  if (isRecord(delay)) {
    for (const [key, value] of Object.entries(delay)) {
      if (key !== 'default' && !jobNames.includes(key)) {
        report(
          `termination_delay.${key}`,
          `keys must be "default" or a job name${didYouMean(key, ['default', ...jobNames])}`,
        );
      }
      checkDelay(value, `termination_delay.${key}`);
    }
  } else if (delay !== undefined && delay !== null) {
    checkDelay(delay, 'termination_delay');
  }
  const inter = header.inter_connection;
  if (inter !== undefined && inter !== null && typeof inter !== 'boolean') {
    report('inter_connection', 'inter_connection must be a boolean');
  }
}

/** Jobs of a group share one infra, and peer hostnames resolve only on Kubernetes. */
function checkPlacement(
  header: unknown,
  jobs: unknown[],
  reporter: (document: number, job?: string) => Report,
): void {
  const infras = jobs.map((job) => {
    const resources = isRecord(job) && isRecord(job.resources) ? job.resources : {};
    return typeof resources.infra === 'string' ? resources.infra : undefined;
  });
  const pinned = [...new Set(infras.filter((i): i is string => i !== undefined).map((i) => i.toLowerCase()))];
  if (pinned.length > 1) {
    reporter(1)(
      '',
      `jobs are pinned to different infra (${pinned.join(', ')}); SkyPilot places a Job Group on one infra`,
      'warning',
    );
  }
  if (isRecord(header) && header.inter_connection === true) {
    infras.forEach((infra, i) => {
      if (infra !== undefined && !/^(?:k8s|kubernetes)(?:\/|$)/i.test(infra)) {
        const job = jobs[i];
        reporter(i + 2, isRecord(job) && typeof job.name === 'string' ? job.name : undefined)(
          'resources.infra',
          `inter_connection needs every job on Kubernetes (hostname discovery), but this job is pinned to ${infra}`,
        );
      }
    });
  }
}

function looksLikeVolume(doc: unknown): boolean {
  return isRecord(doc) && 'type' in doc && !('run' in doc) && !('setup' in doc) && !('resources' in doc);
}

/**
 * Validate SkyPilot YAML text (a task, a Job Group or pipeline, or a volume) under SkyPilot's own loader
 * rules. Returns every problem at once; never throws on bad input.
 */
export function validateSkyPilotYaml(
  text: string,
  options: { kind?: SkyPilotYamlKind | undefined } = {},
): SkyPilotValidation {
  const problems: SkyPilotProblem[] = [];
  const parsed = parseAllDocuments(text);
  const docs = Array.isArray(parsed) ? parsed : [parsed];
  const documents: unknown[] = [];
  docs.forEach((doc, i) => {
    for (const error of doc.errors) {
      problems.push({
        document: i + 1,
        path: '',
        message: `YAML syntax: ${error.message}`,
        severity: 'error',
      });
    }
    documents.push(doc.toJS());
  });
  const reporter =
    (document: number, job?: string): Report =>
    (path, message, severity = 'error') =>
      problems.push({ document, ...(job ? { job } : {}), path, message, severity });

  const header = documents[0];
  const isGroup = documents.length >= 2 && isRecord(header) && !('run' in header) && !('resources' in header);
  let kind: SkyPilotYamlKind =
    options.kind ??
    (isGroup
      ? header.execution === 'parallel'
        ? 'job-group'
        : 'pipeline'
      : looksLikeVolume(documents[0])
        ? 'volume'
        : 'task');
  if (kind === 'job-group' && !(isGroup && isRecord(header) && header.execution === 'parallel')) {
    reporter(1)(
      'execution',
      'a Job Group needs a header document with `execution: parallel` followed by 2+ jobs',
    );
    kind = 'pipeline';
  }

  if (kind === 'volume') {
    const volume = documents[0];
    if (documents.length !== 1) reporter(2)('', 'a volume YAML holds exactly one document');
    zodProblems(
      volumeSchema,
      volume,
      {
        '': Object.keys(volumeShape),
        config: ['storage_class_name', 'access_mode', 'namespace', 'host_path', 'cleanup_on_deletion'],
      },
      reporter(1),
    );
  } else if (kind === 'task') {
    if (documents.length !== 1)
      reporter(2)(
        '',
        'a task YAML holds one document; a Job Group needs a header with `execution: parallel`',
      );
    checkTask(documents[0], reporter(1));
  } else {
    const jobs = documents.slice(1);
    const names: string[] = [];
    jobs.forEach((job, i) => {
      const name = isRecord(job) && typeof job.name === 'string' ? job.name : undefined;
      const report = reporter(i + 2, name);
      if (name === undefined) report('name', 'every job in a Job Group needs a name');
      else if (!NAME_PATTERN.test(name)) {
        report(
          'name',
          `invalid job name ${JSON.stringify(name)}: use letters, digits, "-" and "_" only (it becomes a hostname)`,
        );
      } else if (names.includes(name)) {
        report('name', `Duplicate job name in JobGroup: ${JSON.stringify(name)}`);
      } else names.push(name);
      checkTask(job, report);
    });
    if (isRecord(header)) checkHeader(header, names, reporter(1));
    if (kind === 'job-group') checkPlacement(header, jobs, reporter);
  }
  return { kind, ok: !problems.some((p) => p.severity === 'error'), problems, documents };
}
