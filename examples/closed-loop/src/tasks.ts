/**
 * The closed loop's task split of a SWE-smith dataset (default: the offline task set): training tasks (the loop's batches and the
 * training-set evaluation), held-out tasks (evaluated, never trained on, left out of the warm start)
 * and the rest (warm start only). Each split is a SWE-smith JSONL file with its own `environments.json`,
 * so the coding-agent loop reads it exactly like a user's `--dataset`.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { ConfigError } from '@vime/core';
import { seededRandom } from '@vime/core/utils';
import { buildOfflineTaskSet, buildProceduralTaskSet, ENVIRONMENTS_FILE } from '@vime/swe';

export interface TaskSplit {
  dir: string;
  /** `offline`: a seeded split of one task set; `procedural`: the generated family's own splits. */
  kind?: 'offline' | 'procedural' | undefined;
  /** JSONL files of each split. The RL steps draw from `train`. */
  train: string;
  /** The training tasks an eval pass measures (offline: `train` itself; procedural: a seeded subset). */
  trainEval?: string | undefined;
  heldout: string;
  /** Procedural: instances of the operator family held out entirely (evaluated, never trained on). */
  heldoutFamily?: string | undefined;
  /** What the warm start imitates its stand-in policy on (never a held-out task). */
  warmstart: string;
  ids: {
    train: string[];
    trainEval?: string[] | undefined;
    heldout: string[];
    heldoutFamily?: string[] | undefined;
    warmstartOnly: string[];
  };
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
  if (set.environments) await writeEnvironments(set.environments, options.dir);
  const write = (name: string, rows: string[]) => writeRows(options.dir, name, rows);
  const split: TaskSplit = {
    kind: 'offline',
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

/** The environments file with absolute paths: the splits live apart from the set they came from. */
async function writeEnvironments(from: string, dir: string): Promise<void> {
  const env = JSON.parse(await readFile(from, 'utf8')) as {
    version: 1;
    environments: Record<string, Record<string, string | undefined>>;
  };
  const base = dirname(from);
  for (const entry of Object.values(env.environments)) {
    for (const key of ['template', 'rootfs']) {
      const p = entry[key];
      if (p !== undefined && !isAbsolute(p)) entry[key] = join(base, p);
    }
  }
  await writeFile(join(dir, ENVIRONMENTS_FILE), `${JSON.stringify(env, null, 2)}\n`);
}

async function writeRows(dir: string, name: string, rows: string[]): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, rows.length ? `${rows.join('\n')}\n` : '');
  return path;
}

function seededShuffle<T>(items: readonly T[], seed: number): T[] {
  const random = seededRandom(seed);
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

export interface ProceduralSplitOptions {
  /** Folder for the split files. */
  dir: string;
  /** A procedural set generated before (`vime-swe procedural DIR`); else one is generated in `cacheDir`. */
  setDir?: string | undefined;
  cacheDir: string;
  /** Generator options when the set is generated here. */
  seed: number;
  perFamily: number;
  /** Training instances an eval pass measures; held-out instances and held-out-family instances, each. */
  trainEval: number;
  heldoutEval: number;
  /** Training instances set apart for the warm start (the RL steps never draw them). */
  warmTasks: number;
  signal?: AbortSignal | undefined;
  log?: ((line: string) => void) | undefined;
}

/**
 * The procedural family's own splits (`vime-swe procedural`): the training instances, seeded-shuffled,
 * give the warm start its own (it imitates the debugger on them) and the RL steps the rest (`train.jsonl`,
 * drawn without replacement); the evals measure a seeded subset of the RL's training instances, the
 * held-out instances and the held-out operator family.
 * `heldout-ids.txt` lists every held-out instance of both kinds (the warm start's SFT leaves them out).
 */
export async function proceduralSplit(options: ProceduralSplitOptions): Promise<TaskSplit> {
  let setDir = options.setDir ? resolve(options.setDir) : undefined;
  if (setDir) {
    if (!existsSync(join(setDir, 'train.jsonl')) || !existsSync(join(setDir, ENVIRONMENTS_FILE)))
      throw new ConfigError(
        `--procedural-dir: ${options.setDir} has no train.jsonl and ${ENVIRONMENTS_FILE}; give a folder \`vime-swe procedural\` wrote`,
      );
  } else {
    options.log?.(
      `tasks: generating the procedural family (seed ${options.seed}, ${options.perFamily} per operator family)`,
    );
    const set = await buildProceduralTaskSet({
      dir: join(options.cacheDir, `procedural-${options.seed}-${options.perFamily}`),
      seed: options.seed,
      perFamily: options.perFamily,
      // Each candidate is one pytest run pair; a GPU machine's cores shorten the build.
      concurrency: Math.max(2, Math.min(8, availableParallelism())),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    setDir = set.dir;
  }
  const read = async (name: string) => {
    const path = join(setDir, name);
    if (!existsSync(path)) return [];
    return (await readFile(path, 'utf8')).split('\n').filter((l) => l.trim());
  };
  const [train, heldout, family] = await Promise.all(
    ['train.jsonl', 'heldout.jsonl', 'heldout_family.jsonl'].map(read),
  );
  if (train!.length === 0) throw new ConfigError(`--procedural-dir: ${setDir}/train.jsonl has no rows`);
  await mkdir(options.dir, { recursive: true });
  await writeEnvironments(join(setDir, ENVIRONMENTS_FILE), options.dir);
  const idOf = (line: string) => (JSON.parse(line) as { instance_id: string }).instance_id;
  if (options.warmTasks >= train!.length)
    throw new ConfigError(
      `--warm-steps x --warm-prompts: the warm start would take ${options.warmTasks} of the ${train!.length} training instances, leaving none to the RL steps; give a smaller warm start or a larger set (--per-family)`,
    );
  const shuffled = seededShuffle(train!, options.seed);
  const warm = shuffled.slice(0, options.warmTasks);
  const pool = shuffled.slice(options.warmTasks);
  const trainEval = pool.slice(0, options.trainEval);
  const heldoutEval = seededShuffle(heldout!, options.seed).slice(0, options.heldoutEval);
  const familyEval = seededShuffle(family!, options.seed).slice(0, options.heldoutEval);
  const write = (name: string, rows: string[]) => writeRows(options.dir, name, rows);
  const split: TaskSplit = {
    dir: options.dir,
    kind: 'procedural',
    train: await write('train.jsonl', pool),
    trainEval: await write('train-eval.jsonl', trainEval),
    heldout: await write('heldout.jsonl', heldoutEval),
    heldoutFamily: await write('heldout_family.jsonl', familyEval),
    warmstart: await write('warmstart.jsonl', warm),
    ids: {
      train: pool.map(idOf),
      trainEval: trainEval.map(idOf),
      heldout: heldoutEval.map(idOf),
      heldoutFamily: familyEval.map(idOf),
      warmstartOnly: warm.map(idOf),
    },
  };
  const neverTrained = [...heldout!, ...family!].map(idOf);
  await writeFile(join(options.dir, 'heldout-ids.txt'), neverTrained.map((id) => `${id}\n`).join(''));
  await writeFile(join(options.dir, 'split.json'), `${JSON.stringify({ ...split, setDir }, null, 2)}\n`);
  return split;
}

export function hasSplit(dir: string): boolean {
  return existsSync(join(dir, 'split.json'));
}
