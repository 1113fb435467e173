/**
 * A run as `vime-metrics --run` and `vime-metrics compare` read it: a folder `vime-loop` wrote
 * (`metrics.jsonl`, `run-config.yaml`, `steps/<n>.msgpack` and `steps/<n>.results.json`), or a
 * `metrics.jsonl` file alone. Anything that is not one is a `ConfigError` naming the flag and the path.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { ConfigError, decodeSamples, type RolloutResult, type Sample } from '@vime/core';
import { pathError, readTextFile } from '@vime/core/utils';
import { isMap, isScalar, type Node, parseDocument } from 'yaml';
import { type MetricsFile, parseMetricsFile, reportInputFromMetrics } from '../metrics-file.js';
import type { RunReportInput, RunSetting } from '../report-input.js';

/** A run read from disk. */
export interface ReadRun {
  /** Its name on a page: the folder's name (or the file's, for a file not called metrics.jsonl). */
  label: string;
  path: string;
  file: MetricsFile;
  input: RunReportInput;
}

const RUN_HELP = 'give a folder vime-loop wrote (its --out, holding metrics.jsonl) or a metrics.jsonl file';

/** Each setting of a `run-config.yaml` with the source its comment names (`flag --steps`, `default`). */
export function runConfigSettings(text: string, where: string): RunSetting[] {
  const doc = parseDocument(text);
  if (doc.errors.length)
    throw new ConfigError(
      `${where}: not YAML (${doc.errors[0]!.message.split('\n')[0]}); is it a run's run-config.yaml?`,
    );
  const out: RunSetting[] = [];
  const walk = (node: unknown, path: string[]) => {
    // Block maps are sections; a value (a flow list or map included) is a setting, its comment its source.
    if (isMap(node) && !node.flow) {
      for (const pair of node.items)
        walk(pair.value, [...path, isScalar(pair.key) ? String(pair.key.value) : String(pair.key)]);
      return;
    }
    if (path.length === 0) return;
    const n = node as Node | null;
    out.push({
      key: path.join('.'),
      value: n && typeof n.toJSON === 'function' ? n.toJSON() : null,
      source: n?.comment?.trim() || 'not recorded',
    });
  };
  walk(doc.contents, []);
  return out;
}

/** `steps/<n>.<suffix>` files of a run folder, by step. */
async function stepFiles(dir: string, suffix: string): Promise<Array<[number, string]>> {
  const names = await readdir(join(dir, 'steps')).catch(() => [] as string[]);
  return names
    .map((name) => [Number(name.slice(0, -suffix.length)), name] as const)
    .filter(
      ([step, name]) => name.endsWith(suffix) && /^\d+$/.test(name.slice(0, -suffix.length)) && step >= 0,
    )
    .map(([step, name]): [number, string] => [step, join(dir, 'steps', name)]);
}

/** One step's training rows from an `encodeSamples` file; a file that is not one is named. */
export async function readBatch(path: string, field: string): Promise<Sample[]> {
  let bytes: Uint8Array;
  try {
    bytes = await readFile(path);
  } catch (error) {
    throw pathError(error, field, path, 'read it');
  }
  try {
    return decodeSamples(bytes);
  } catch (error) {
    throw new ConfigError(
      `${field} ${path}: not a batch of training rows (${(error as Error).message.split('\n')[0]}); give a step's steps/<n>.msgpack`,
    );
  }
}

async function readResults(path: string): Promise<RolloutResult[]> {
  const text = await readTextFile(path, 'results');
  try {
    const v = JSON.parse(text) as unknown;
    if (!Array.isArray(v)) throw new Error('not a list');
    return v as RolloutResult[];
  } catch (error) {
    throw new ConfigError(
      `${path}: not a step's rollout results (${(error as Error).message}); the run folder is damaged`,
    );
  }
}

/** The metrics file a run path names: the path itself, or the folder's `metrics.jsonl`. */
async function metricsPathOf(
  target: string,
  flag: string,
  cwd: string,
): Promise<{ file: string; dir: string | null }> {
  const path = resolve(cwd, target);
  let isDir: boolean;
  try {
    isDir = (await stat(path)).isDirectory();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new ConfigError(`${flag} ${target}: does not exist; ${RUN_HELP}`);
    throw pathError(error, flag, target, 'read it');
  }
  if (!isDir) return { file: path, dir: null };
  const file = join(path, 'metrics.jsonl');
  const found = await stat(file).then(
    (s) => s.isFile(),
    () => false,
  );
  if (!found)
    throw new ConfigError(`${flag} ${target}: not a run folder: it has no metrics.jsonl; ${RUN_HELP}`);
  return { file, dir: path };
}

/**
 * Read a run: its metrics file, and in a run folder its settings, its steps' results and rows. `batches`
 * adds rows by step (a run whose batches were kept elsewhere).
 */
export async function readRun(
  target: string,
  flag: string,
  cwd: string,
  batches: ReadonlyMap<number, string> = new Map(),
): Promise<ReadRun> {
  const { file: path, dir } = await metricsPathOf(target, flag, cwd);
  const file = parseMetricsFile(await readTextFile(path, flag));
  if (!file.run) {
    throw new ConfigError(
      `${flag} ${target}: not a vime metrics file: no "run" line of schema vime.metrics/1 among its ${file.lines} lines; ${RUN_HELP}`,
    );
  }
  const rows = new Map<number, Sample[]>();
  const results = new Map<number, RolloutResult[]>();
  let settings: RunSetting[] | undefined;
  if (dir) {
    for (const [step, p] of await stepFiles(dir, '.msgpack')) rows.set(step, await readBatch(p, flag));
    for (const [step, p] of await stepFiles(dir, '.results.json')) results.set(step, await readResults(p));
    const yaml = join(dir, 'run-config.yaml');
    const text = await readFile(yaml, 'utf8').catch(() => undefined);
    if (text !== undefined) settings = runConfigSettings(text, `${flag} ${target}: run-config.yaml`);
  }
  for (const [step, p] of batches) rows.set(step, await readBatch(resolve(cwd, p), '--batch'));
  const label =
    dir !== null
      ? basename(dir)
      : basename(path) === 'metrics.jsonl'
        ? basename(dirname(path))
        : basename(path);
  return { label, path: dir ?? path, file, input: reportInputFromMetrics(file, { rows, results, settings }) };
}
