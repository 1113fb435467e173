// Building and publishing the offline task set: the repository, its instance branches, the rows.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { cp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ConfigError, SandboxError, type TaskSpec } from '@vime/core';
import { runProcessOk } from '@vime/core/utils';
import { rowToTask, type SweSmithRow, swesmithNames } from '../dataset.js';
import { parseJsonlRows } from '../dataset-file.js';
import { BUG_PATCH_SUBJECT, REMOVE_TESTS_SUBJECT } from '../layout.js';
import type { SweProfile } from '../profiles.js';
import {
  bugKindOf,
  LIBRARY_GITIGNORE,
  OFFLINE_GIT_ENV,
  OFFLINE_OWNER,
  OFFLINE_REPO,
  offlineAssetsDir,
  offlineProfile,
} from './assets.js';
import { findBugs, type Kept, problemStatement, sourceKey } from './bugs.js';
import { environmentFolder, publishDataset } from './publish.js';

/** Options of `buildOfflineTaskSet`. */
export interface OfflineTaskSetOptions {
  /** Output folder (created). A build with the same sources and options found there is reused. */
  dir: string;
  /** Single-bug instances to keep (default 40). */
  count?: number | undefined;
  /**
   * Extra instances combining two kept bugs in different functions of one file (SWE-smith's `combine_file`),
   * at most this many (default 6). Fixing one of the two is a natural half fix (RESOLVED_PARTIAL).
   */
  combined?: number | undefined;
  /** Seed for the order in which candidates are tried (default 1). */
  seed?: number | undefined;
  /** Python with pytest used for validation on this machine (default `python3`). */
  python?: string | undefined;
  /** Validation runs in parallel (default 2). */
  concurrency?: number | undefined;
  /**
   * Wall-clock backstop per validation run (default 60 s). Hanging bugs are cut by a CPU-time limit (3 s;
   * the suite needs ~0.2 s) and dropped, as SWE-smith drops bugs that time out.
   */
  timeoutMs?: number | undefined;
  /** Rebuild even when a matching build exists. */
  force?: boolean | undefined;
  /** Appended to pool names. */
  runSuffix?: string | undefined;
  /** Progress callback (validated, total tried). */
  onProgress?: ((event: { kept: number; tried: number; target: number }) => void) | undefined;
  signal?: AbortSignal | undefined;
}

/** An instance of the offline set that combines two bugs in one file. */
export interface CombinedInstance {
  instanceId: string;
  parts: [string, string];
  /** Applied at the instance's start, fixes `parts[0]` only: F2P partly passes, P2P still passes. */
  halfFixPatch: string;
}

/** The built offline task set: its folder, repository, rows and tasks. */
export interface OfflineTaskSet {
  dir: string;
  /** The repository mirror (branch `main` = clean library; one branch per instance): the image's `/testbed`. */
  repoDir: string;
  /** The dataset as users get SWE-smith: one row per line (what `--dataset` takes). */
  jsonlPath: string;
  /** The same rows as parquet, the Hub's layout. */
  parquetPath: string;
  /** `environments.json`: the rows' image, with the mirror as its workspace template. */
  environmentsPath: string;
  /** The rows' `image_name` (a Docker image of this name is made by `buildOfflineDockerImage`). */
  image: string;
  rows: SweSmithRow[];
  tasks: TaskSpec[];
  /** The profile of the offline repository (test command, parser, test-file rule). */
  profile: SweProfile;
  /** The `combine_file` instances: their two parts and a patch that fixes only the first part. */
  combined: CombinedInstance[];
  repoName: string;
  /** False when a previous build was reused. */
  built: boolean;
  durationMs: number;
}

/**
 * Build (or reuse) the offline task set in `dir`, published exactly as users get SWE-smith:
 * `instances.jsonl` and `instances.parquet` (the upstream row fields), `environments.json` (the image, with
 * the repository mirror under `environments/` as its workspace template: every instance a branch named
 * `instance_id`, "Bug Patch" then "Remove F2P Tests"), and `manifest.json`. Needs git and a Python with
 * pytest on this machine.
 */
export async function buildOfflineTaskSet(options: OfflineTaskSetOptions): Promise<OfflineTaskSet> {
  const started = performance.now();
  const {
    count = 40,
    combined = 6,
    seed = 1,
    python = 'python3',
    concurrency = 2,
    timeoutMs = 60_000,
    signal,
  } = options;
  if (!Number.isInteger(count) || count < 1)
    throw new ConfigError(`buildOfflineTaskSet: count must be a positive integer, got ${count}`);
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new ConfigError(`buildOfflineTaskSet: concurrency must be a positive integer, got ${concurrency}`);
  }
  // Absolute: the build runs commands in folders under `dir` with other working directories.
  const dir = resolve(options.dir);
  const assets = offlineAssetsDir();
  const key = await sourceKey(assets, { count, combined, seed });
  const manifestPath = join(dir, 'manifest.json');
  if (!options.force && existsSync(manifestPath)) {
    const manifest = JSON.parse(await readFile(manifestPath, 'utf8')) as { key?: string | undefined };
    if (manifest.key === key) return loadBuilt(dir, options, started, false);
  }

  await mkdir(dir, { recursive: true });
  const repoDir = join(dir, '.repo-build');
  const scratchRoot = join(dir, '.scratch');
  await rm(repoDir, { recursive: true, force: true });
  await rm(join(dir, 'environments'), { recursive: true, force: true });
  await rm(scratchRoot, { recursive: true, force: true });
  await rm(manifestPath, { force: true });
  const library = join(assets, 'library');
  const filter = (src: string) => !/__pycache__|\.pytest_cache/.test(src);
  await cp(library, repoDir, { recursive: true, filter });
  // Written here, not shipped: package managers drop `.gitignore` files from published packages.
  await writeFile(join(repoDir, '.gitignore'), LIBRARY_GITIGNORE);
  const gitEnv = { ...process.env, ...OFFLINE_GIT_ENV };
  const git = async (args: string[], cwd = repoDir) => {
    const r = await runProcessOk(
      'git',
      ['-c', 'init.defaultBranch=main', '-c', 'commit.gpgsign=false', '-c', 'core.autocrlf=false', ...args],
      { cwd, env: gitEnv, maxOutputBytes: Number.POSITIVE_INFINITY, signal },
    );
    return r.stdout;
  };
  await git(['init', '-q']);
  await git(['add', '-A']);
  await git(['commit', '-q', '-m', 'Initial commit']);
  const sha = (await git(['rev-parse', 'HEAD'])).trim();
  const repoName = `${OFFLINE_OWNER}__${OFFLINE_REPO}.${sha.slice(0, 8)}`;

  const { kept, combinedKept } = await findBugs({
    assets,
    library,
    scratchRoot,
    python,
    concurrency,
    timeoutMs,
    count,
    combined,
    seed,
    onProgress: options.onProgress,
    signal,
  });
  await rm(scratchRoot, { recursive: true, force: true });

  // One branch per instance: "Bug Patch" (bug, tests present), then "Remove F2P Tests", written in one
  // `git fast-import` stream (what `git commit` would write, without a checkout per branch).
  const when = `${Date.parse(OFFLINE_GIT_ENV.GIT_COMMITTER_DATE) / 1000} +0000`;
  const who = `${OFFLINE_GIT_ENV.GIT_COMMITTER_NAME} <${OFFLINE_GIT_ENV.GIT_COMMITTER_EMAIL}> ${when}`;
  const data = (text: string) => `data ${Buffer.byteLength(text)}\n${text}\n`;
  const instances = [...kept, ...combinedKept].map((k) => {
    const hash8 = createHash('sha256').update(k.candidate.file).update(k.mutated).digest('hex').slice(0, 8);
    const f2pFiles = [...new Set(k.failToPass.map((id) => id.split('::')[0]!))].sort();
    return { ...k, instanceId: `${repoName}.${k.candidate.kind}__${hash8}`, f2pFiles };
  });
  let stream = '';
  instances.forEach((k, i) => {
    const ref = `refs/heads/${k.instanceId}`;
    stream += `blob\nmark :${3 * i + 1}\n${data(k.mutated)}`;
    stream += `commit ${ref}\nmark :${3 * i + 2}\nauthor ${who}\ncommitter ${who}\n${data(`${BUG_PATCH_SUBJECT}\n`)}from ${sha}\nM 100644 :${3 * i + 1} ${k.candidate.file}\n\n`;
    stream += `commit ${ref}\nmark :${3 * i + 3}\nauthor ${who}\ncommitter ${who}\n${data(`${REMOVE_TESTS_SUBJECT}\n`)}from :${3 * i + 2}\n${k.f2pFiles.map((f) => `D ${f}\n`).join('')}\n`;
  });
  await runProcessOk('git', ['fast-import', '--quiet'], {
    cwd: repoDir,
    env: gitEnv,
    stdin: stream,
    signal,
  });
  const rows: SweSmithRow[] = [];
  for (const k of instances) {
    const patch = await git(['diff', '--no-color', '--no-ext-diff', 'main', `${k.instanceId}~1`]);
    const names = swesmithNames(k.instanceId, { org: OFFLINE_OWNER });
    rows.push({
      instance_id: k.instanceId,
      repo: names.mirrorName,
      patch,
      FAIL_TO_PASS: k.failToPass,
      PASS_TO_PASS: k.passToPass,
      image_name: names.imageName,
      problem_statement: problemStatement(k.candidate, k.failToPass, k.message),
      base_commit: sha,
      created_at: OFFLINE_GIT_ENV.GIT_COMMITTER_DATE,
    });
  }
  const idOf = (k: Kept) => instances.find((x) => x.candidate === k.candidate)!.instanceId;
  const combinedInfo: CombinedInstance[] = [];
  for (const c of combinedKept) {
    const id = idOf(c);
    const [a, b] = c.parts;
    // From the combined bug to "only b": fixes a. Test files are excluded (they are absent at the start).
    const halfFixPatch = await git([
      'diff',
      '--no-color',
      '--no-ext-diff',
      `${id}~1`,
      `${idOf(b)}~1`,
      '--',
      c.candidate.file,
    ]);
    combinedInfo.push({ instanceId: id, parts: [idOf(a), idOf(b)], halfFixPatch });
  }
  const image = rows[0]!.image_name;
  await publishDataset(dir, rows, [{ image, repoDir }]);
  await writeFile(
    manifestPath,
    `${JSON.stringify({ key, repoName, image, count: rows.length, kinds: [...new Set(rows.map((r) => bugKindOf(r.instance_id)))].sort(), combined: combinedInfo }, null, 2)}\n`,
  );
  return loadBuilt(dir, options, started, true);
}

async function loadBuilt(
  dir: string,
  options: OfflineTaskSetOptions,
  started: number,
  built: boolean,
): Promise<OfflineTaskSet> {
  const jsonlPath = join(dir, 'instances.jsonl');
  const { rows, issues } = parseJsonlRows(await readFile(jsonlPath, 'utf8'), { onInvalid: 'fatal' });
  if (issues.length > 0 || rows.length === 0) {
    throw new SandboxError(`offline task set in ${dir} has malformed rows; rebuild with force: true`);
  }
  const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as {
    combined?: CombinedInstance[] | undefined;
    image: string;
  };
  return {
    dir,
    repoDir: join(dir, environmentFolder(manifest.image)),
    jsonlPath,
    parquetPath: join(dir, 'instances.parquet'),
    environmentsPath: join(dir, 'environments.json'),
    image: manifest.image,
    rows,
    tasks: rows.map((row) => rowToTask(row, options.runSuffix ? { runSuffix: options.runSuffix } : {})),
    profile: offlineProfile(),
    combined: manifest.combined ?? [],
    repoName: swesmithNames(rows[0]!.instance_id).repoName,
    built,
    durationMs: performance.now() - started,
  };
}
