/**
 * A run config file (YAML or JSON, the layout of `knobs.ts`): read, checked key by key (an unknown key gets
 * a did-you-mean, a wrong value its key path, the value and the fix), and turned into the fields of
 * `Config` it sets. Relative paths in it are taken from the file's folder, so a config travels with its
 * data. `RunConfigFileSchema` is the file's schema; `runConfigJsonSchema()` gives it to editors.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { ConfigError, describeValue } from '@vime/core';
import { closest, parseDuration } from '@vime/core/utils';
import { AGENT_KINDS } from '@vime/harness';
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { z } from 'zod';
import { KNOBS, type Knob, LIMIT_KEYS } from './knobs.js';
import { type Config, type ConfigField, ConfigSchema } from './schema.js';

const DURATION = /^\d+(?:\.\d+)?(?:ms|s|m|h|d|w)?$/i;
const SIZE = /^(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?$/i;
const SIZE_UNITS: Record<string, number> = {
  b: 1,
  kib: 2 ** 10,
  mib: 2 ** 20,
  gib: 2 ** 30,
  tib: 2 ** 40,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  tb: 1e12,
};

/** Fields whose absence is their default: a file writes them as `null` (or leaves them out). */
const UNSET_BY_NULL = new Set<ConfigField>([
  'out',
  'tokenizer',
  'dataset',
  'harnessRegistry',
  'wandbProject',
  'topK',
  'topLogprobs',
  'agentMix',
  'sandboxLimits',
  'imageDir',
]);

type FlatShape = typeof ConfigSchema.shape;

/** The field's schema without its default (a file that leaves a key out leaves it to the layers below). */
function bare(field: ConfigField): z.ZodType {
  let schema: z.ZodType = (ConfigSchema.shape as FlatShape)[field];
  while (schema instanceof z.ZodDefault || schema instanceof z.ZodOptional)
    schema = schema.unwrap() as z.ZodType;
  return schema;
}

const fieldDefault = (field: ConfigField): unknown => {
  const schema = (ConfigSchema.shape as FlatShape)[field];
  return schema instanceof z.ZodDefault ? schema.def.defaultValue : undefined;
};

const byteSize = z
  .union([z.number().int().positive(), z.string().regex(SIZE, 'a size such as "2GiB" or "512MiB"')])
  .nullable()
  .optional();

/** A file's leaf for one knob, with the field's description and default for editors. */
function leafSchema(knob: Knob): z.ZodType {
  const description = (ConfigSchema.shape as FlatShape)[knob.field].description;
  const fallback = fieldDefault(knob.field);
  let leaf: z.ZodType;
  if (knob.kind === 'duration') {
    const ms = fallback as number;
    leaf = z.union([
      z.number().positive(),
      z.string().regex(DURATION, 'a duration such as "90s", "10m" or "1h"'),
    ]);
    return leaf.optional().meta({ description, default: durationText(ms) });
  }
  if (knob.kind === 'negated') leaf = z.boolean();
  else if (knob.kind === 'limits')
    leaf = z.strictObject(
      Object.fromEntries(
        Object.entries(LIMIT_KEYS).map(([key]) => [
          key,
          key === 'cpus' ? z.number().positive().nullable().optional() : byteSize,
        ]),
      ),
    );
  else leaf = bare(knob.field);
  if (UNSET_BY_NULL.has(knob.field)) leaf = leaf.nullable();
  const shown = knob.kind === 'negated' ? !(fallback as boolean) : fallback;
  return leaf.optional().meta({ description, ...(shown === undefined ? {} : { default: shown }) });
}

/** The section `key` of `node`, made when missing. */
function sectionOf(node: Record<string, unknown>, key: string): unknown {
  if (node[key] === undefined) node[key] = {};
  return node[key];
}

/** Nested sections from the knobs' key paths. */
type Tree = { [key: string]: Tree | Knob };

function knobTree(): Tree {
  const tree: Tree = {};
  for (const k of KNOBS) {
    const parts = k.key.split('.');
    let node = tree;
    for (const part of parts.slice(0, -1)) node = sectionOf(node, part) as Tree;
    node[parts.at(-1)!] = k;
  }
  return tree;
}

const isKnob = (node: Tree | Knob): node is Knob => typeof (node as Knob).field === 'string';

function treeSchema(tree: Tree): z.ZodType {
  return z.strictObject(
    Object.fromEntries(
      Object.entries(tree).map(([key, node]) => [
        key,
        isKnob(node) ? leafSchema(node) : treeSchema(node).optional(),
      ]),
    ),
  );
}

/** The schema of a run config file: every key optional, no key unknown. */
export const RunConfigFileSchema = treeSchema(knobTree());

/** The file's JSON Schema (draft 2020-12), for editors: what `run-config.schema.json` holds. */
export function runConfigJsonSchema(): Record<string, unknown> {
  return {
    ...z.toJSONSchema(RunConfigFileSchema, { io: 'input', unrepresentable: 'any' }),
    title: 'Vime run config (@vime/loop)',
    description:
      'One file for every knob of the coding-agent RL loop (vime-loop --config FILE). Precedence: defaults < this file < env vars < flags.',
  };
}

/** Keys a value of an object-valued knob may have (for did-you-mean). */
const INNER_KEYS: Partial<Record<ConfigField, readonly string[]>> = {
  odds: ['gold', 'wrong', 'malformed'],
  agentMix: AGENT_KINDS,
  sandboxLimits: Object.keys(LIMIT_KEYS),
};

/** The known name a misspelled one most likely meant: a near spelling, or one it begins (`memory`). */
function nearest(name: string, known: readonly string[]): string | undefined {
  const lower = name.toLowerCase();
  return closest(name, known) ?? known.find((k) => k.startsWith(lower) || lower.startsWith(k));
}

/** Every key the file has that the layout lacks, each with the nearest known key. */
function unknownKeys(raw: Record<string, unknown>, tree: Tree, at: string[] = []): string[] {
  const out: string[] = [];
  const allKeys = KNOBS.map((k) => k.key);
  for (const [key, value] of Object.entries(raw)) {
    const path = [...at, key].join('.');
    const node = tree[key];
    if (node === undefined) {
      const here = nearest(key, Object.keys(tree));
      const anywhere = KNOBS.find((k) => k.key.split('.').at(-1) === key)?.key ?? closest(path, allKeys);
      const hint = here ? [...at, here].join('.') : anywhere;
      out.push(`unknown key ${path}${hint ? ` (did you mean ${JSON.stringify(hint)}?)` : ''}`);
      continue;
    }
    if (isKnob(node)) {
      const inner = INNER_KEYS[node.field];
      if (inner && value && typeof value === 'object' && !Array.isArray(value))
        for (const k of Object.keys(value).filter((k) => !inner.includes(k))) {
          const near = nearest(k, inner);
          out.push(
            `unknown key ${path}.${k} (${near ? `did you mean ${JSON.stringify(`${path}.${near}`)}? ` : ''}known: ${inner.join(', ')})`,
          );
        }
      continue;
    }
    if (value && typeof value === 'object' && !Array.isArray(value))
      out.push(...unknownKeys(value as Record<string, unknown>, node, [...at, key]));
  }
  return out;
}

/** What to write instead, from a zod issue. */
function fixOf(issue: z.core.$ZodIssue): string {
  switch (issue.code) {
    case 'invalid_value':
      return `write one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}`;
    case 'too_small':
      return `write a value ${issue.inclusive ? '≥' : '>'} ${String(issue.minimum)}`;
    case 'too_big':
      return `write a value ${issue.inclusive ? '≤' : '<'} ${String(issue.maximum)}`;
    case 'invalid_format':
      return issue.format === 'url'
        ? 'write a URL such as "http://10.0.0.5:30000"'
        : `write ${issue.message}`;
    case 'invalid_type':
      return `write ${issue.expected === 'array' ? 'a list' : `${/^[aeiou]/.test(issue.expected) ? 'an' : 'a'} ${issue.expected}`}`;
    default:
      return issue.message;
  }
}

/** A wrong value after its name: the value found and the fix (which says what is accepted). */
export function describeIssue(raw: unknown, issue: z.core.$ZodIssue): string {
  const value = issue.path.reduce<unknown>((v, k) => (v as Record<PropertyKey, unknown>)?.[k], raw);
  if (value === undefined) return `is missing; ${fixOf(issue)}`;
  let hint = '';
  if (issue.code === 'invalid_value' && typeof value === 'string') {
    const near = nearest(value, issue.values.map(String));
    if (near) hint = ` (did you mean ${JSON.stringify(near)}?)`;
  }
  return `${describeValue(value)} is not accepted${hint}; ${fixOf(issue)}`;
}

/** One line per wrong value: the key path, the value found and the fix. */
export function valueProblems(raw: unknown, issues: readonly z.core.$ZodIssue[]): string[] {
  return issues.map((issue) => `${issue.path.map(String).join('.')}: ${describeIssue(raw, issue)}`);
}

/** Read the text of a config file as YAML (JSON is YAML), naming the line of a syntax error. */
function parseText(text: string, shown: string): Record<string, unknown> {
  let raw: unknown;
  try {
    raw = parseYaml(text, { uniqueKeys: true });
  } catch (error) {
    const where =
      error instanceof YAMLParseError && error.linePos
        ? ` at line ${error.linePos[0].line}, column ${error.linePos[0].col}`
        : '';
    const message = (error as Error).message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
    throw new ConfigError(
      `--config ${shown}: not valid YAML or JSON${where} (${message}); fix the syntax there`,
    );
  }
  if (raw === null || raw === undefined)
    throw new ConfigError(
      `--config ${shown}: the file is empty; write the settings to change, e.g. "run: {steps: 4}"`,
    );
  if (typeof raw !== 'object' || Array.isArray(raw))
    throw new ConfigError(
      `--config ${shown}: expected a mapping of sections (run:, sampling:, …), got ${describeValue(raw)}`,
    );
  return raw as Record<string, unknown>;
}

function sizeOf(value: unknown): number | null | undefined {
  if (typeof value !== 'string') return value as number | null | undefined;
  const m = SIZE.exec(value)!;
  return Math.round(Number(m[1]) * SIZE_UNITS[(m[2] ?? 'b').toLowerCase()]!);
}

/** A checked file value as its field holds it. */
function fieldValue(knob: Knob, value: unknown, base: string): unknown {
  switch (knob.kind) {
    case 'duration':
      return parseDuration(value as string | number, knob.key);
    case 'negated':
      return !value;
    case 'limits':
      return Object.fromEntries(
        Object.entries(value as Record<string, unknown>).map(([k, v]) => [
          LIMIT_KEYS[k],
          k === 'cpus' ? v : sizeOf(v),
        ]),
      );
  }
  // Paths in a file are the file's: relative ones are taken from its folder.
  if (
    (knob.field === 'dataset' || knob.field === 'tokenizer' || knob.field === 'out') &&
    typeof value === 'string'
  )
    return resolve(base, value);
  return value;
}

/** A run config file as read: its name as given, its path and its values by field. */
export interface ConfigFile {
  /** The file as the user named it. */
  shown: string;
  path: string;
  /** The fields it sets, with the key that set each. */
  values: Partial<Record<ConfigField, unknown>>;
  keys: Partial<Record<ConfigField, string>>;
}

const get = (raw: Record<string, unknown>, key: string): unknown =>
  key
    .split('.')
    .reduce<unknown>(
      (v, k) => (v && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined),
      raw,
    );

/** Read and check a config file; every problem of it in one `ConfigError`, one per line. */
export function readConfigFile(file: string, cwd: string): ConfigFile {
  const path = resolve(cwd, file);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const why =
      code === 'ENOENT' ? 'does not exist' : code === 'EISDIR' ? 'is a folder' : `cannot be read (${code})`;
    throw new ConfigError(`--config ${file}: ${why}; give a YAML or JSON run config file`);
  }
  const raw = parseText(text, file);
  const problems = unknownKeys(raw, knobTree());
  const parsed = RunConfigFileSchema.safeParse(raw);
  if (!parsed.success)
    problems.push(
      ...valueProblems(
        raw,
        parsed.error.issues.filter((i) => i.code !== 'unrecognized_keys'),
      ),
    );
  if (problems.length > 0) throw new ConfigError(problems.map((p) => `--config ${file}: ${p}`).join('\n'));
  const values: ConfigFile['values'] = {};
  const keys: ConfigFile['keys'] = {};
  for (const knob of KNOBS) {
    const value = get(raw, knob.key);
    if (value === undefined || (value === null && UNSET_BY_NULL.has(knob.field))) continue;
    values[knob.field] = fieldValue(knob, value, dirname(path));
    keys[knob.field] = knob.key;
  }
  return { shown: file, path, values, keys };
}

/** The file's view of a resolved config: every knob at its key, in file units. */
export function fileLayout(config: Config): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const knob of KNOBS) {
    const parts = knob.key.split('.');
    let node = out;
    for (const part of parts.slice(0, -1)) node = sectionOf(node, part) as Record<string, unknown>;
    node[parts.at(-1)!] = layoutValue(knob, config[knob.field]);
  }
  return out;
}

/** Milliseconds in the largest unit that divides them: `20m`, `90s`, `250ms`. */
export function durationText(ms: number): string {
  for (const [unit, size] of [
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const)
    if (ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}

/** Bytes in the largest binary unit that divides them: `4GiB`, `512MiB` (a plain number otherwise). */
function sizeText(bytes: unknown): unknown {
  if (typeof bytes !== 'number') return bytes;
  for (const [unit, size] of [
    ['TiB', 2 ** 40],
    ['GiB', 2 ** 30],
    ['MiB', 2 ** 20],
    ['KiB', 2 ** 10],
  ] as const)
    if (bytes % size === 0) return `${bytes / size}${unit}`;
  return bytes;
}

function layoutValue(knob: Knob, value: unknown): unknown {
  if (value === undefined) return null;
  if (knob.kind === 'duration') return durationText(value as number);
  if (knob.kind === 'negated') return !value;
  if (knob.kind === 'limits') {
    const snake = Object.fromEntries(Object.entries(LIMIT_KEYS).map(([k, v]) => [v, k]));
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>).map(([k, v]) => [
        snake[k],
        k === 'cpus' ? v : sizeText(v),
      ]),
    );
  }
  return value;
}
