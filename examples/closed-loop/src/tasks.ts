/**
 * The closed loop's task split of a SWE-smith dataset (default: the offline task set): training tasks (the loop's batches and the
 * training-set evaluation), held-out tasks (evaluated, never trained on, left out of the warm start)
 * and the rest (warm start only). Each split is a SWE-smith JSONL file with its own `environments.json`,
 * so the coding-agent loop reads it exactly like a user's `--dataset`.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { ConfigError } from '@vime/core';
import { seededRandom } from '@vime/core/utils';
import { buildOfflineTaskSet, ENVIRONMENTS_FILE } from '@vime/swe';

export interface TaskSplit {
  dir: string;
  /** JSONL files of each split. */
  train: string;
  heldout: string;
  /** Everything but the held-out tasks: what the warm start imitates the scripted policy on. */
  warmstart: string;
  ids: { train: string[]; heldout: string[]; warmstartOnly: string[] };
}

export interface SplitOptions {
  /** Folder for the split files. */
  dir: string;
  /** A SWE-smith JSONL (with its `environments.json` beside it, if any); default: the offline task set. */
  dataset?: string | undefined;
  /** Where the offline task set is built once (its cache). */
  cacheDir: string;
  trainTasks: number;
  heldoutTasks: number;
  /** The shuffle's seed: the same seed, the same split. */
  seed?: number | undefined;
  signal?: AbortSignal | undefined;
}

async function source(options: SplitOptions): Promise<{ jsonl: string; environments: string | null }> {
  if (options.dataset) {
    const jsonl = resolve(options.dataset);
    if (!existsSync(jsonl) || !jsonl.endsWith('.jsonl'))
      throw new ConfigError(`--dataset: ${options.dataset} is not a .jsonl file; give a SWE-smith JSONL`);
    const environments = join(dirname(jsonl), ENVIRONMENTS_FILE);
    return { jsonl, environments: existsSync(environments) ? environments : null };
  }
  const set = await buildOfflineTaskSet({
    dir: join(options.cacheDir, 'offline-tasks'),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  return { jsonl: set.jsonlPath, environments: set.environmentsPath };
}

export async function splitTasks(options: SplitOptions): Promise<TaskSplit> {
  const set = await source(options);
  const lines = (await readFile(set.jsonl, 'utf8')).split('\n').filter((l) => l.trim());
  const { trainTasks, heldoutTasks } = options;
  if (trainTasks < 1 || heldoutTasks < 0 || trainTasks + heldoutTasks > lines.length) {
    throw new ConfigError(
      `--train-tasks ${trainTasks} + --heldout-tasks ${heldoutTasks}: ${set.jsonl} has ${lines.length} tasks; ask for at most that many in all (at least 1 training task)`,
    );
  }
  // A seeded shuffle mixes the bug kinds (the set lists them kind by kind).
  const random = seededRandom(options.seed ?? 0);
  const order = lines.map((_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const pick = (from: number, to: number) => order.slice(from, to).map((i) => lines[i]!);
  const train = pick(0, trainTasks);
  const heldout = pick(trainTasks, trainTasks + heldoutTasks);
  const rest = pick(trainTasks + heldoutTasks, lines.length);
  const idOf = (line: string) => (JSON.parse(line) as { instance_id: string }).instance_id;
  await mkdir(options.dir, { recursive: true });
  // The environments file with absolute paths: the splits live apart from the set they came from.
  if (set.environments) {
    const env = JSON.parse(await readFile(set.environments, 'utf8')) as {
      version: 1;
      environments: Record<string, Record<string, string | undefined>>;
    };
    const base = dirname(set.environments);
    for (const entry of Object.values(env.environments)) {
      for (const key of ['template', 'rootfs']) {
        const p = entry[key];
        if (p !== undefined && !isAbsolute(p)) entry[key] = join(base, p);
      }
    }
    await writeFile(join(options.dir, ENVIRONMENTS_FILE), `${JSON.stringify(env, null, 2)}\n`);
  }
  const write = async (name: string, rows: string[]) => {
    const path = join(options.dir, name);
    await writeFile(path, rows.length ? `${rows.join('\n')}\n` : '');
    return path;
  };
  const split: TaskSplit = {
    dir: options.dir,
    train: await write('train.jsonl', train),
    heldout: await write('heldout.jsonl', heldout),
    warmstart: await write('warmstart.jsonl', [...train, ...rest]),
    ids: { train: train.map(idOf), heldout: heldout.map(idOf), warmstartOnly: rest.map(idOf) },
  };
  await writeFile(join(options.dir, 'heldout-ids.txt'), split.ids.heldout.map((id) => `${id}\n`).join(''));
  await writeFile(join(options.dir, 'split.json'), `${JSON.stringify(split, null, 2)}\n`);
  return split;
}

export function hasSplit(dir: string): boolean {
  return existsSync(join(dir, 'split.json'));
}
