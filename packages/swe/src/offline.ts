/**
 * The offline task set: a small Python library shipped with this package (`offline-tasks/library`, with
 * its pytest suite), turned into SWE-smith-format instances by procedural bug injection. Each kept bug is
 * validated like SWE-smith does (tests run on clean and buggy code, F2P ≥ 1 and P2P ≥ 1), gets a branch with
 * a "Bug Patch" and a "Remove F2P Tests" commit, and a row in SWE-smith's schema.
 */

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { cp, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { ConfigError, SandboxError, seededRandom, type TaskSpec } from '@vime/core';
import { parseJsonlRows, rowToTask, type SweSmithRow, swesmithNames } from './dataset.js';
import { validReport } from './grading.js';
import { BUG_PATCH_SUBJECT, REMOVE_TESTS_SUBJECT } from './layout.js';
import { parsePythonProfile } from './parsers/swesmith.js';
import type { StatusMap } from './parsers/types.js';
import { runOk } from './process.js';
import { defineProfile, PYTHON_TEST_CMD, type SweProfile } from './profiles.js';

/** Bump when the generator's output for the same sources changes, so cached builds are rebuilt. */
const GENERATOR_VERSION = 2;
export const OFFLINE_OWNER = 'vime';
export const OFFLINE_REPO = 'toolbelt';
/** Staged into the work dir by offline tasks and unpacked by their setup command. */
export const OFFLINE_BUNDLE_NAME = '.vime-task.bundle';

/**
 * The offline tasks' test command: SWE-smith's Python default without conda, with plugin autoloading off so
 * the output does not depend on which pytest plugins the machine has.
 */
export const OFFLINE_TEST_COMMAND = `PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m ${PYTHON_TEST_CMD} -p no:cacheprovider`;

/** Keeps pytest's and Python's caches out of `git add -A`, so they never enter a captured patch. */
const LIBRARY_GITIGNORE = '__pycache__/\n*.pyc\n.pytest_cache/\n';

/** Deterministic commits: same sources, same SHAs. */
const GIT_ENV = {
  GIT_AUTHOR_NAME: 'Vime Tasks',
  GIT_AUTHOR_EMAIL: 'tasks@vime.invalid',
  GIT_AUTHOR_DATE: '2025-01-01T00:00:00Z',
  GIT_COMMITTER_NAME: 'Vime Tasks',
  GIT_COMMITTER_EMAIL: 'tasks@vime.invalid',
  GIT_COMMITTER_DATE: '2025-01-01T00:00:00Z',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_TERMINAL_PROMPT: '0',
};

export type BugKind =
  | 'func_pm_op_change'
  | 'func_pm_flip_operators'
  | 'func_pm_op_swap'
  | 'func_pm_op_change_const'
  | 'func_pm_off_by_one'
  | 'func_pm_remove_cond'
  | 'func_pm_swap_args'
  | 'combine_file';

interface Candidate {
  kind: BugKind;
  file: string;
  function: string;
  start: number;
  end: number;
  replacement: string;
  description: string;
}

export interface OfflineTaskSetOptions {
  /** Output folder (created). A build with the same sources and options found there is reused. */
  dir: string;
  /** Single-bug instances to keep (default 40). */
  count?: number;
  /**
   * Extra instances combining two kept bugs in different functions of one file (SWE-smith's `combine_file`),
   * at most this many (default 6). Fixing one of the two is a natural half fix (RESOLVED_PARTIAL).
   */
  combined?: number;
  /** Seed for the order in which candidates are tried (default 1). */
  seed?: number;
  /** Python with pytest used for validation on this machine (default `python3`). */
  python?: string;
  /** Validation runs in parallel (default 2). */
  concurrency?: number;
  /**
   * Wall-clock backstop per validation run (default 60 s). Hanging bugs are cut by a CPU-time limit (3 s;
   * the suite needs ~0.2 s) and dropped, as SWE-smith drops bugs that time out.
   */
  timeoutMs?: number;
  /** Rebuild even when a matching build exists. */
  force?: boolean;
  /** Image for the tasks (default none: the sandbox provider's default system, which has git and pytest). */
  image?: string;
  /** Appended to pool names. */
  runSuffix?: string;
  /** Progress callback (validated, total tried). */
  onProgress?: (event: { kept: number; tried: number; target: number }) => void;
  signal?: AbortSignal;
}

export interface CombinedInstance {
  instanceId: string;
  parts: [string, string];
  /** Applied at the instance's start, fixes `parts[0]` only: F2P partly passes, P2P still passes. */
  halfFixPatch: string;
}

export interface OfflineTaskSet {
  dir: string;
  /** The git repository (branch `main` = clean library; one branch per instance). Usable as `/testbed`. */
  repoDir: string;
  /** SWE-smith rows, one per line. */
  jsonlPath: string;
  /** `git bundle` of every branch, staged into sandboxes by the tasks' setup. */
  bundlePath: string;
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

/** Where the library and the mutation lister live: next to `src/` and `dist/` alike. */
export function offlineAssetsDir(): string {
  const dir = fileURLToPath(new URL('../offline-tasks/', import.meta.url));
  if (existsSync(join(dir, 'mutations.py'))) return dir;
  throw new ConfigError(
    `offline task assets were not found at ${dir} (they ship in @vime/swe's offline-tasks/); reinstall @vime/swe`,
  );
}

async function listFiles(root: string, dir = root): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.name === '__pycache__' || entry.name === '.pytest_cache') continue;
    const full = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await listFiles(root, full)));
    else out.push(relative(root, full));
  }
  return out.sort();
}

async function sourceKey(
  assets: string,
  options: { count: number; combined: number; seed: number },
): Promise<string> {
  const hash = createHash('sha256');
  hash.update(
    JSON.stringify({ GENERATOR_VERSION, ...options, test: OFFLINE_TEST_COMMAND, LIBRARY_GITIGNORE }),
  );
  for (const file of await listFiles(assets)) {
    hash.update(file);
    hash.update(await readFile(join(assets, file)));
  }
  return hash.digest('hex');
}

/** Shuffle each kind (seeded), keep one candidate per function and kind, then interleave the kinds. */
function orderCandidates(candidates: Candidate[], seed: number): Candidate[] {
  const next = seededRandom(seed);
  const byKind = new Map<string, Candidate[]>();
  for (const c of candidates) byKind.set(c.kind, [...(byKind.get(c.kind) ?? []), c]);
  const queues = [...byKind.keys()].sort().map((kind) => {
    const list = byKind.get(kind)!;
    for (let i = list.length - 1; i > 0; i--) {
      const j = Math.floor(next() * (i + 1));
      [list[i], list[j]] = [list[j]!, list[i]!];
    }
    const seen = new Set<string>();
    return list.filter((c) => {
      const key = `${c.file}:${c.function}`;
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    });
  });
  const out: Candidate[] = [];
  for (let i = 0; queues.some((q) => i < q.length); i++)
    for (const q of queues) if (i < q.length) out.push(q[i]!);
  return out;
}

interface RunReport {
  statusMap: StatusMap;
  log: string;
  timedOut: boolean;
}

/**
 * CPU seconds one validation run may use. The suite needs ~0.2 s; a bug that loops forever hits this limit
 * whatever the machine's load, so the set of kept bugs does not depend on it.
 */
const CPU_SECONDS = 3;

/** pytest arguments of the offline test command (after `python3 -m pytest`). */
const PYTEST_ARGS = [...PYTHON_TEST_CMD.split(' ').slice(1), '-p', 'no:cacheprovider'];

/**
 * Validate runs with `offline-tasks/validate.py` (pytest imported once, one fork per run), streaming one
 * result per line; `onResult` returning false stops the worker early.
 */
function validateRuns(
  assets: string,
  workdir: string,
  python: string,
  runs: ReadonlyArray<{ file: string; content: string } | null>,
  timeoutMs: number,
  onResult: (index: number, report: RunReport) => boolean,
  signal?: AbortSignal,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(python, [join(assets, 'validate.py')], {
      cwd: workdir,
      // COLUMNS: pytest cuts summary messages to the terminal width; fixed, so problem statements are stable.
      env: {
        ...process.env,
        PYTEST_DISABLE_PLUGIN_AUTOLOAD: '1',
        PYTHONDONTWRITEBYTECODE: '1',
        COLUMNS: '160',
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stopped = false;
    let stderr = '';
    const stop = () => {
      stopped = true;
      child.kill('SIGKILL');
    };
    signal?.addEventListener('abort', stop, { once: true });
    child.stderr.on('data', (b: Buffer) => {
      stderr += b.toString('utf8');
    });
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (stopped) return;
      const r = JSON.parse(line) as {
        index: number;
        exit_code: number | null;
        timed_out: boolean;
        log: string;
      };
      const report = { statusMap: parsePythonProfile(r.log), log: r.log, timedOut: r.timed_out };
      if (!onResult(r.index, report)) stop();
    });
    child.on('error', (error) =>
      reject(new SandboxError(`could not start ${python}: ${error.message}`, { cause: error })),
    );
    child.on('close', (code) => {
      signal?.removeEventListener('abort', stop);
      if (signal?.aborted) reject(signal.reason);
      else if (code !== 0 && !stopped)
        reject(new SandboxError(`validate.py failed (exit ${code}): ${stderr.slice(-1500)}`));
      else resolve();
    });
    child.stdin.on('error', () => {});
    child.stdin.end(
      JSON.stringify({
        workdir,
        args: PYTEST_ARGS,
        timeout: timeoutMs / 1000,
        cpu_seconds: CPU_SECONDS,
        runs,
      }),
    );
  });
}

/** The first `FAILED id - message` of pytest's short summary, for the problem statement. */
function firstFailure(log: string, ids: readonly string[]): string | undefined {
  for (const line of log.split('\n')) {
    if (!line.startsWith('FAILED ')) continue;
    const [id, ...rest] = line.slice(7).split(' - ');
    if (id && ids.includes(id) && rest.length > 0) return rest.join(' - ').trim();
  }
  return undefined;
}

function problemStatement(
  candidate: Candidate,
  failToPass: readonly string[],
  message: string | undefined,
): string {
  const module = candidate.file.replace(/\.py$/, '').replace(/\//g, '.');
  const tests = failToPass.map((t) => `- \`${t}\``).join('\n');
  return [
    `\`${module}.${candidate.function}\` no longer behaves as documented.`,
    '',
    `After a recent change, ${failToPass.length === 1 ? 'this test fails' : `these ${failToPass.length} tests fail`}:`,
    '',
    tests,
    ...(message ? ['', 'The first failure reports:', '', '```', message, '```'] : []),
    '',
    `Please fix the library so that ${failToPass.length === 1 ? 'it passes' : 'they pass'} again without breaking the rest of the suite. The tests are correct; do not change them.`,
  ].join('\n');
}

/** The profile the offline repository uses (default Python parser, no conda). */
export function offlineProfile(): SweProfile {
  return defineProfile({ key: `${OFFLINE_OWNER}__${OFFLINE_REPO}`, testCommand: OFFLINE_TEST_COMMAND });
}

/**
 * The setup prefix of offline tasks: unpack the staged bundle into the (empty) work dir, so every backend
 * that can write one file can host the repository.
 */
export const OFFLINE_SETUP_PREFIX = `git init -q && git fetch -q --update-head-ok ${OFFLINE_BUNDLE_NAME} '+refs/heads/*:refs/heads/*' && rm -f ${OFFLINE_BUNDLE_NAME}`;

/** Map offline rows to tasks that stage the bundle and check the instance branch out. */
export function offlineTasks(
  rows: readonly SweSmithRow[],
  bundle: Uint8Array,
  options: { image?: string; runSuffix?: string } = {},
): TaskSpec[] {
  const profile = offlineProfile();
  return rows.map((row) =>
    rowToTask(row, {
      profiles: [profile],
      files: [{ path: OFFLINE_BUNDLE_NAME, content: bundle }],
      setupPrefix: OFFLINE_SETUP_PREFIX,
      ...(options.image ? { image: options.image } : {}),
      ...(options.runSuffix ? { runSuffix: options.runSuffix } : {}),
    }),
  );
}

async function loadBuilt(
  dir: string,
  options: OfflineTaskSetOptions,
  started: number,
  built: boolean,
): Promise<OfflineTaskSet> {
  const jsonlPath = join(dir, 'instances.jsonl');
  const bundlePath = join(dir, `${OFFLINE_REPO}.bundle`);
  const { rows, issues } = parseJsonlRows(await readFile(jsonlPath, 'utf8'), { onInvalid: 'fatal' });
  if (issues.length > 0)
    throw new SandboxError(`offline task set in ${dir} has malformed rows; rebuild with force: true`);
  const bundle = new Uint8Array(await readFile(bundlePath));
  const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as {
    combined?: CombinedInstance[];
  };
  const taskOptions = {
    ...(options.image ? { image: options.image } : {}),
    ...(options.runSuffix ? { runSuffix: options.runSuffix } : {}),
  };
  return {
    dir,
    repoDir: join(dir, OFFLINE_REPO),
    jsonlPath,
    bundlePath,
    rows,
    tasks: offlineTasks(rows, bundle, taskOptions),
    profile: offlineProfile(),
    combined: manifest.combined ?? [],
    repoName: swesmithNames(rows[0]?.instance_id ?? '').repoName,
    built,
    durationMs: performance.now() - started,
  };
}

/**
 * Build (or reuse) the offline task set in `dir`: `toolbelt/` (git repo), `instances.jsonl` (SWE-smith rows),
 * `toolbelt.bundle`, `manifest.json`. Needs git, bash and a Python with pytest on this machine.
 */
export async function buildOfflineTaskSet(options: OfflineTaskSetOptions): Promise<OfflineTaskSet> {
  const started = performance.now();
  const {
    dir,
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
  const assets = offlineAssetsDir();
  const key = await sourceKey(assets, { count, combined, seed });
  const manifestPath = join(dir, 'manifest.json');
  if (!options.force && existsSync(manifestPath)) {
    const manifest = JSON.parse(await readFile(manifestPath, 'utf8')) as { key?: string };
    if (manifest.key === key) return loadBuilt(dir, options, started, false);
  }

  await mkdir(dir, { recursive: true });
  const repoDir = join(dir, OFFLINE_REPO);
  const scratchRoot = join(dir, '.scratch');
  await rm(repoDir, { recursive: true, force: true });
  await rm(scratchRoot, { recursive: true, force: true });
  await rm(manifestPath, { force: true });
  const library = join(assets, 'library');
  const filter = (src: string) => !/__pycache__|\.pytest_cache/.test(src);
  await cp(library, repoDir, { recursive: true, filter });
  // Written here, not shipped: package managers drop `.gitignore` files from published packages.
  await writeFile(join(repoDir, '.gitignore'), LIBRARY_GITIGNORE);
  const git = (args: string[], cwd = repoDir) =>
    runOk(
      'git',
      ['-c', 'init.defaultBranch=main', '-c', 'commit.gpgsign=false', '-c', 'core.autocrlf=false', ...args],
      {
        cwd,
        env: GIT_ENV,
        ...(signal ? { signal } : {}),
      },
    );
  await git(['init', '-q']);
  await git(['add', '-A']);
  await git(['commit', '-q', '-m', 'Initial commit']);
  const sha = (await git(['rev-parse', 'HEAD'])).trim();
  const repoName = `${OFFLINE_OWNER}__${OFFLINE_REPO}.${sha.slice(0, 8)}`;

  // Scratch copies for validation runs (plain folders; the repo itself stays clean).
  const scratch: string[] = [];
  for (let i = 0; i < concurrency; i++) {
    const s = join(scratchRoot, `w${i}`);
    await cp(library, s, { recursive: true, filter });
    scratch.push(s);
  }
  let clean: RunReport | undefined;
  await validateRuns(
    assets,
    scratch[0]!,
    python,
    [null],
    timeoutMs,
    (_, report) => {
      clean = report;
      return true;
    },
    signal,
  );
  const cleanIds = Object.keys(clean?.statusMap ?? {});
  if (!clean || cleanIds.length < 60 || Object.values(clean.statusMap).some((s) => s !== 'PASSED')) {
    throw new SandboxError(
      `the clean offline library must pass all its tests with ${python}; got ${cleanIds.length} tests, log:\n${clean?.log.slice(-2000)}`,
    );
  }
  const cleanMap = clean.statusMap;

  const sources = (await listFiles(library)).filter(
    (f) => f.startsWith(`${OFFLINE_REPO}/`) && f.endsWith('.py') && !f.endsWith('__init__.py'),
  );
  const listed = await runOk(python, [join(assets, 'mutations.py'), library, ...sources], {
    cwd: library,
    ...(signal ? { signal } : {}),
  });
  const ordered = orderCandidates(JSON.parse(listed) as Candidate[], seed);
  const original = new Map<string, string>();
  for (const f of sources) original.set(f, await readFile(join(library, f), 'utf8'));

  interface Kept {
    candidate: Candidate;
    mutated: string;
    failToPass: string[];
    passToPass: string[];
    message: string | undefined;
    order: number;
  }
  const kept: Kept[] = [];
  let tried = 0;
  // Candidate i goes to worker i % concurrency.
  const mutatedOf = (c: Candidate) => {
    const source = original.get(c.file)!;
    return source.slice(0, c.start) + c.replacement + source.slice(c.end);
  };
  await Promise.all(
    scratch.map((workdir, w) => {
      const mine = ordered.map((c, order) => ({ c, order })).filter((_, i) => i % concurrency === w);
      const runs = mine.map(({ c }) => ({ file: c.file, content: mutatedOf(c) }));
      return validateRuns(
        assets,
        workdir,
        python,
        runs,
        timeoutMs,
        (index, buggy) => {
          tried++;
          const { c: candidate, order } = mine[index]!;
          const report = validReport(buggy.statusMap, cleanMap);
          const spacesInIds = [...report.FAIL_TO_PASS, ...report.PASS_TO_PASS].some((id) => /\s/.test(id));
          if (
            !buggy.timedOut &&
            report.FAIL_TO_PASS.length > 0 &&
            report.PASS_TO_PASS.length > 0 &&
            !spacesInIds
          ) {
            kept.push({
              candidate,
              mutated: runs[index]!.content,
              failToPass: report.FAIL_TO_PASS,
              passToPass: report.PASS_TO_PASS,
              message: firstFailure(buggy.log, report.FAIL_TO_PASS),
              order,
            });
            options.onProgress?.({ kept: Math.min(kept.length, count), tried, target: count });
          }
          // Stop once `count` bugs precede this worker's next candidate: then every candidate before the
          // count-th kept one has been tried, so the result does not depend on which worker ran faster.
          const next = mine[index + 1]?.order ?? Number.POSITIVE_INFINITY;
          return kept.filter((k) => k.order < next).length < count;
        },
        signal,
      );
    }),
  );
  if (kept.length < count) {
    throw new SandboxError(
      `only ${kept.length} of ${count} requested bugs validated (${tried} tried); lower count`,
    );
  }
  // Keep the first `count` in candidate order, whichever worker found them (deterministic output).
  kept.sort((a, b) => a.order - b.order);
  kept.length = Math.min(kept.length, count);

  // A worker stopped early may have been killed with a candidate applied: restore the scratch copies.
  for (const workdir of scratch)
    for (const [file, text] of original) await writeFile(join(workdir, file), text);

  // combine_file: two kept bugs in different functions of one file, with disjoint F2P tests.
  const used = new Set<number>();
  const combos: Array<{ a: Kept; b: Kept; content: string }> = [];
  const perFile = new Map<string, number>();
  for (let i = 0; i < kept.length && combos.length < combined; i++) {
    for (let j = i + 1; j < kept.length && !used.has(i); j++) {
      const [a, b] = [kept[i]!, kept[j]!];
      if (
        used.has(j) ||
        a.candidate.file !== b.candidate.file ||
        a.candidate.function === b.candidate.function
      )
        continue;
      if ((perFile.get(a.candidate.file) ?? 0) >= 2) continue;
      if (a.failToPass.some((t) => b.failToPass.includes(t))) continue;
      const [first, second] =
        a.candidate.start < b.candidate.start ? [a.candidate, b.candidate] : [b.candidate, a.candidate];
      if (first.end > second.start) continue;
      const source = original.get(a.candidate.file)!;
      const content =
        source.slice(0, first.start) +
        first.replacement +
        source.slice(first.end, second.start) +
        second.replacement +
        source.slice(second.end);
      combos.push({ a, b, content });
      used.add(i).add(j);
      perFile.set(a.candidate.file, (perFile.get(a.candidate.file) ?? 0) + 1);
    }
  }
  const combinedKept: Array<Kept & { parts: [Kept, Kept] }> = [];
  await validateRuns(
    assets,
    scratch[0]!,
    python,
    combos.map((c) => ({ file: c.a.candidate.file, content: c.content })),
    timeoutMs,
    (index, buggy) => {
      const { a, b, content } = combos[index]!;
      const report = validReport(buggy.statusMap, cleanMap);
      const covers = [...a.failToPass, ...b.failToPass].every((t) => report.FAIL_TO_PASS.includes(t));
      if (!buggy.timedOut && covers && report.PASS_TO_PASS.length > 0) {
        combinedKept.push({
          candidate: {
            ...a.candidate,
            kind: 'combine_file',
            function: `${a.candidate.function}/${b.candidate.function}`,
          },
          mutated: content,
          failToPass: report.FAIL_TO_PASS,
          passToPass: report.PASS_TO_PASS,
          message: firstFailure(buggy.log, report.FAIL_TO_PASS),
          order: kept.length + index,
          parts: [a, b],
        });
      }
      return true;
    },
    signal,
  );
  await rm(scratchRoot, { recursive: true, force: true });

  // One branch per instance: "Bug Patch" (bug, tests present), then "Remove F2P Tests", written in one
  // `git fast-import` stream (what `git commit` would write, without a checkout per branch).
  const when = `${Date.parse(GIT_ENV.GIT_COMMITTER_DATE) / 1000} +0000`;
  const who = `${GIT_ENV.GIT_COMMITTER_NAME} <${GIT_ENV.GIT_COMMITTER_EMAIL}> ${when}`;
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
  await runOk('git', ['fast-import', '--quiet'], {
    cwd: repoDir,
    env: GIT_ENV,
    input: stream,
    ...(signal ? { signal } : {}),
  });
  const rows: SweSmithRow[] = [];
  for (const k of instances) {
    const patch = await git(['diff', '--no-color', '--no-ext-diff', 'main', `${k.instanceId}~1`]);
    const names = swesmithNames(k.instanceId);
    rows.push({
      instance_id: k.instanceId,
      repo: names.mirrorName,
      patch,
      FAIL_TO_PASS: k.failToPass,
      PASS_TO_PASS: k.passToPass,
      image_name: names.imageName,
      problem_statement: problemStatement(k.candidate, k.failToPass, k.message),
      base_commit: sha,
      created_at: GIT_ENV.GIT_COMMITTER_DATE,
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
  const jsonlPath = join(dir, 'instances.jsonl');
  await writeFile(jsonlPath, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  await git(['bundle', 'create', '-q', join(dir, `${OFFLINE_REPO}.bundle`), '--all']);
  await writeFile(
    manifestPath,
    `${JSON.stringify({ key, repoName, count: rows.length, kinds: [...new Set(rows.map((r) => bugKindOf(r.instance_id)))].sort(), combined: combinedInfo }, null, 2)}\n`,
  );
  return loadBuilt(dir, options, started, true);
}

/** `….func_pm_op_swap__1a2b3c4d` → `func_pm_op_swap`. */
export function bugKindOf(instanceId: string): string {
  const last = instanceId.slice(instanceId.lastIndexOf('.') + 1);
  return last.replace(/__[a-z0-9]+$/, '');
}
