/**
 * The plan flags every plan-reading command takes: `-c/--config FILE` and the overrides on top of it,
 * resolved into a `LaunchPlan`. Errors name what the user wrote: the flag, or the file with its line and
 * column (syntax) or its key path (schema).
 */
import { ConfigError, describeValue, formatPath } from '@vime/core';
import { type CliIo, positiveInt, readTextFile } from '@vime/core/utils';
import { parseConfigText } from '../internal/config-text.js';
import { type LaunchConfig, LaunchConfigSchema, type LaunchPlan, resolvePlan } from '../plan.js';

/** Each override flag, the config path it sets, and whether it takes a whole number. */
const OVERRIDES: ReadonlyArray<[flag: string, path: readonly string[], kind: 'int' | 'string']> = [
  ['engines', ['engines', 'count'], 'int'],
  ['engine-kind', ['engines', 'kind'], 'string'],
  ['engine-accelerators', ['engines', 'accelerators'], 'string'],
  ['trainer-accelerators', ['trainer', 'accelerators'], 'string'],
  ['name', ['name'], 'string'],
  ['mode', ['mode'], 'string'],
  ['weight-mode', ['weights', 'mode'], 'string'],
  ['weight-transport', ['weights', 'transport'], 'string'],
  ['tp', ['model', 'tensorParallel'], 'int'],
  ['batch-size', ['rollout', 'batchSize'], 'int'],
  ['samples-per-prompt', ['rollout', 'samplesPerPrompt'], 'int'],
  ['pool-replicas', ['sandbox', 'poolReplicas'], 'int'],
  ['infra', ['infra'], 'string'],
  ['image', ['image'], 'string'],
];

export const PLAN_OPTIONS = {
  config: { type: 'string', short: 'c' },
  ...(Object.fromEntries(OVERRIDES.map(([flag]) => [flag, { type: 'string' }])) as Record<
    | 'engines'
    | 'engine-kind'
    | 'engine-accelerators'
    | 'trainer-accelerators'
    | 'name'
    | 'mode'
    | 'weight-mode'
    | 'weight-transport'
    | 'tp'
    | 'batch-size'
    | 'samples-per-prompt'
    | 'pool-replicas'
    | 'infra'
    | 'image',
    { type: 'string' }
  >),
} as const;

export const PLAN_HELP = `Plan options (override the config file; defaults are the reference coding-agent run):
  -c, --config FILE             YAML or JSON launch config
  --engines N                   inference engine jobs (default 1)
  --engine-kind sglang|vllm     engine server (default sglang)
  --engine-accelerators A:N     GPUs per engine job (default H100:1)
  --trainer-accelerators A:N    trainer GPUs (default H100:4)
  --name NAME                   Job Group name (default coding-agent-rl[-Neng])
  --mode async|sync             train_async.py or train.py (default async)
  --weight-mode delta|full      weight update mode (default delta)
  --weight-transport disk|nccl  weight update transport (default disk)
  --tp N                        tensor parallel size (default 4)
  --batch-size N                prompts per rollout step (default 23)
  --samples-per-prompt N        rollouts per prompt (default 8)
  --pool-replicas N             warm sandboxes per repo pool (default 184)
  --infra INFRA, --image IMAGE  placement and container image for every job`;

export type FlagValues = Record<string, string | boolean | string[] | undefined>;

const valueAt = (value: unknown, path: ReadonlyArray<PropertyKey>): unknown =>
  path.reduce<unknown>(
    (node, key) =>
      node !== null && typeof node === 'object'
        ? (node as Record<PropertyKey, unknown>)[key as string]
        : undefined,
    value,
  );

/** The launch config from `--config` (if any) with the override flags applied on top. */
export async function loadConfig(values: FlagValues, io: Pick<CliIo, 'cwd'>): Promise<LaunchConfig> {
  let config: Record<string, unknown> = {};
  const file = values.config as string | undefined;
  const label = `--config ${file}`;
  if (file) {
    const text = await readTextFile(file, '--config', { cwd: io.cwd });
    const parsed = parseConfigText(text, file, label);
    if (parsed !== null && (typeof parsed !== 'object' || Array.isArray(parsed))) {
      throw new ConfigError(
        `${label}: expected a mapping of launch settings (engines:, trainer:, ...), found ${describeValue(parsed)}`,
      );
    }
    config = (parsed as Record<string, unknown> | null) ?? {};
  }
  // Which config paths came from a flag, so a bad value is reported by the flag that set it.
  const fromFlag = new Map<string, string>();
  for (const [flag, path, kind] of OVERRIDES) {
    const raw = values[flag] as string | undefined;
    if (raw === undefined) continue;
    const value = kind === 'int' ? positiveInt(raw, `--${flag}`) : raw;
    let node = config;
    for (const key of path.slice(0, -1)) {
      node[key] = { ...((node[key] as Record<string, unknown> | undefined) ?? {}) };
      node = node[key] as Record<string, unknown>;
    }
    node[path.at(-1)!] = value;
    fromFlag.set(path.join('.'), flag);
  }

  const checked = LaunchConfigSchema.safeParse(config);
  if (!checked.success) {
    const fromFile: string[] = [];
    const fromFlags: string[] = [];
    for (const issue of checked.error.issues.slice(0, 8)) {
      const path = formatPath(issue.path);
      const flag = fromFlag.get(path);
      if (flag) fromFlags.push(`--${flag}: ${issue.message} (got ${JSON.stringify(values[flag])})`);
      else if (!path) fromFile.push(issue.message);
      else fromFile.push(`${path}: ${issue.message} (found ${describeValue(valueAt(config, issue.path))})`);
    }
    const where = file ? `${label}: ` : '';
    const lines = [...(fromFile.length ? [`${where}${fromFile.join('; ')}`] : []), ...fromFlags];
    throw new ConfigError(`invalid launch config: ${lines.join('; ')}`, {
      data: { issues: checked.error.issues.map((i) => ({ path: formatPath(i.path), message: i.message })) },
    });
  }
  return config as LaunchConfig;
}

export async function planFrom(values: FlagValues, io: Pick<CliIo, 'cwd' | 'env'>): Promise<LaunchPlan> {
  return resolvePlan(await loadConfig(values, io), { env: io.env });
}
