/**
 * Building the procedural task family: many small generated Python repositories, each a SWE-smith mirror
 * with one instance branch ("Bug Patch", then "Remove F2P Tests"), its tests' expected values from the
 * clean code, every bug kept only when real pytest runs show that it fails some of its tests and leaves
 * others passing. Published as SWE-smith rows (all, and one file per split) with one environment per
 * repository.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { ConfigError, SandboxError, type TaskSpec } from '@vime/core';
import { runProcessOk } from '@vime/core/utils';
import { rowToTask, type SweSmithRow, swesmithNames } from '../dataset.js';
import { loadJsonl } from '../dataset-file.js';
import { validReport } from '../eval-report.js';
import { BUG_PATCH_SUBJECT, REMOVE_TESTS_SUBJECT } from '../layout.js';
import type { StatusMap } from '../parsers/types.js';
import { LIBRARY_GITIGNORE, OFFLINE_GIT_ENV, OFFLINE_OWNER, offlineAssetsDir } from './assets.js';
import { type RunReport, type ValidationRun, validateRuns } from './bugs.js';
import {
  OPERATOR_FAMILIES,
  type OperatorFamily,
  type ProceduralCandidate,
  type ProceduralSplit,
  proceduralCandidate,
  splitOf,
  testFileText,
} from './procedural.js';
import { publishDataset, writeJsonl } from './publish.js';

/** Bump when the generator's output for the same options changes, so cached sets are rebuilt. */
export const PROCEDURAL_VERSION = 1;
/** The generated repositories' name (`vime__procedural.<commit8>`, one commit per repository). */
export const PROCEDURAL_REPO = 'procedural';
/** Rows of each split, beside `instances.jsonl` (the same environments serve them). */
export const SPLIT_FILES: Record<ProceduralSplit, string> = {
  train: 'train.jsonl',
  heldout: 'heldout.jsonl',
  heldout_family: 'heldout_family.jsonl',
};

/** Options of `buildProceduralTaskSet`. */
export interface ProceduralSetOptions {
  /** Output folder (created). A build with the same options found there is reused. */
  dir: string;
  /** Validated instances per operator family (default 20). */
  perFamily?: number | undefined;
  /** Seed of every choice: repositories, bugs, splits (default 1). */
  seed?: number | undefined;
  /** The operator family held out entirely (default `off_by_one`; null: none). */
  heldoutFamily?: OperatorFamily | null | undefined;
  /** Share of the other families' instances held out (default 0.2). */
  heldoutFraction?: number | undefined;
  /** Python with pytest used to validate on this machine (default `python3`). */
  python?: string | undefined;
  /** Validation runs in parallel (default 2). */
  concurrency?: number | undefined;
  /** Rebuild even when a matching build exists. */
  force?: boolean | undefined;
  /** Called after each validated batch: instances kept so far, candidates tried, and the target count. */
  onProgress?: ((event: { kept: number; tried: number; target: number }) => void) | undefined;
  signal?: AbortSignal | undefined;
}

/** One instance of the set as the manifest records it (the operator's description is never in a row). */
export interface ProceduralInstance {
  instanceId: string;
  family: OperatorFamily;
  split: ProceduralSplit;
  function: string;
  template: string;
  description: string;
  /** The operator's site: its kind, clean text and buggy text. */
  site: { kind: string; before: string; after: string };
}

/** The built procedural task set. */
export interface ProceduralTaskSet {
  dir: string;
  /** Every row (what `--dataset` takes); `splitPaths` has each split's rows alone. */
  jsonlPath: string;
  splitPaths: Record<ProceduralSplit, string>;
  environmentsPath: string;
  rows: SweSmithRow[];
  tasks: TaskSpec[];
  instances: ProceduralInstance[];
  heldoutFamily: OperatorFamily | null;
  built: boolean;
  durationMs: number;
}

/** A candidate with its tests written and its validation verdict. */
interface Validated {
  candidate: ProceduralCandidate;
  files: Record<string, string>;
  failToPass: string[];
  passToPass: string[];
  failures: string[];
}

/** Candidates of one family validated in one round, at most. */
const MAX_ATTEMPTS_PER_ROUND = 64;
/** Rounds before the build gives up (a bank that cannot reach a family fails loudly). */
const MAX_ROUNDS = 100;

/** Check the options a user gives; each error names the option, the value and the fix. */
function checkOptions(options: ProceduralSetOptions) {
  const { perFamily = 20, seed = 1, heldoutFraction = 0.2, concurrency = 2 } = options;
  const heldoutFamily = options.heldoutFamily === undefined ? 'off_by_one' : options.heldoutFamily;
  if (!Number.isInteger(perFamily) || perFamily < 1)
    throw new ConfigError(`perFamily must be a positive whole number, got ${perFamily}`);
  if (!Number.isInteger(seed)) throw new ConfigError(`seed must be a whole number, got ${seed}`);
  if (!(heldoutFraction >= 0 && heldoutFraction < 1))
    throw new ConfigError(`heldoutFraction must be at least 0 and below 1, got ${heldoutFraction}`);
  if (heldoutFamily !== null && !OPERATOR_FAMILIES.includes(heldoutFamily))
    throw new ConfigError(
      `heldoutFamily must be one of ${OPERATOR_FAMILIES.join(', ')} or null, got ${JSON.stringify(heldoutFamily)}`,
    );
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new ConfigError(`concurrency must be a positive whole number, got ${concurrency}`);
  return { perFamily, seed, heldoutFraction, heldoutFamily, concurrency };
}

/**
 * Build (or reuse) the procedural task set in `dir`: `perFamily` instances of each operator family, each
 * its own repository, validated with real pytest and written with real git. Deterministic from the seed.
 */
export async function buildProceduralTaskSet(options: ProceduralSetOptions): Promise<ProceduralTaskSet> {
  const started = performance.now();
  const checked = checkOptions(options);
  const dir = resolve(options.dir);
  const assets = offlineAssetsDir();
  const python = options.python ?? 'python3';
  const key = createHash('sha256')
    .update(JSON.stringify({ PROCEDURAL_VERSION, ...checked, concurrency: undefined, LIBRARY_GITIGNORE }))
    .update(await readFile(join(assets, 'oracle.py')))
    .digest('hex');
  const manifestPath = join(dir, 'manifest.json');
  if (!options.force && existsSync(manifestPath)) {
    const manifest = JSON.parse(await readFile(manifestPath, 'utf8')) as { key?: string | undefined };
    if (manifest.key === key) return loadProcedural(dir, started, false);
  }
  // Only what a build writes: the folder may hold other things.
  for (const name of [
    'environments',
    '.scratch',
    'manifest.json',
    'instances.jsonl',
    'instances.parquet',
    'environments.json',
    ...Object.values(SPLIT_FILES),
  ])
    await rm(join(dir, name), { recursive: true, force: true });
  const scratch = join(dir, '.scratch');
  await mkdir(scratch, { recursive: true });

  const kept = await findInstances(checked, { ...options, assets, python, scratch });
  const rows: SweSmithRow[] = [];
  const instances: ProceduralInstance[] = [];
  const mirrors: Array<{ image: string; repoDir: string }> = [];
  for (const v of kept) {
    const { row, repoDir } = await commitRepository(
      v,
      join(scratch, String(v.candidate.index)),
      options.signal,
    );
    const split = splitOf(v.candidate.family, { ...checked, key: row.instance_id });
    rows.push({ ...row, split });
    mirrors.push({ image: row.image_name, repoDir });
    const target = v.candidate.functions[v.candidate.target]!;
    instances.push({
      instanceId: row.instance_id,
      family: v.candidate.family,
      split,
      function: target.name,
      template: target.template,
      description: v.candidate.description,
      site: v.candidate.site,
    });
  }
  await publishDataset(dir, rows, mirrors);
  for (const [split, file] of Object.entries(SPLIT_FILES))
    await writeJsonl(
      join(dir, file),
      rows.filter((r) => r.split === split),
    );
  await rm(scratch, { recursive: true, force: true });
  const counts: Record<string, Record<string, number>> = {};
  for (const i of instances) {
    counts[i.family] ??= {};
    counts[i.family]![i.split] = (counts[i.family]![i.split] ?? 0) + 1;
  }
  await writeFile(
    manifestPath,
    `${JSON.stringify({ key, ...checked, concurrency: undefined, counts, instances }, null, 2)}\n`,
  );
  return loadProcedural(dir, started, true);
}

/**
 * Candidates in rounds, every family at once, until each family has `perFamily` kept; within a family the
 * first kept in attempt order, so the set does not depend on which worker ran faster.
 */
async function findInstances(
  checked: ReturnType<typeof checkOptions>,
  io: ProceduralSetOptions & { assets: string; python: string; scratch: string },
): Promise<Validated[]> {
  const { perFamily, seed, concurrency } = checked;
  const kept = new Map<OperatorFamily, Validated[]>(OPERATOR_FAMILIES.map((f) => [f, []]));
  // Attempt a of family f is candidate a * families + f: a larger set extends a smaller one family by family.
  const attempts = new Map<OperatorFamily, number>(OPERATOR_FAMILIES.map((f) => [f, 0]));
  let tried = 0;
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const wanting = OPERATOR_FAMILIES.filter((f) => kept.get(f)!.length < perFamily);
    if (wanting.length === 0) break;
    const candidates = wanting.flatMap((family) => {
      const fi = OPERATOR_FAMILIES.indexOf(family);
      const first = attempts.get(family)!;
      const count = Math.min(
        MAX_ATTEMPTS_PER_ROUND,
        Math.ceil((perFamily - kept.get(family)!.length) * 1.5) + 1,
      );
      attempts.set(family, first + count);
      return Array.from({ length: count }, (_, k) =>
        proceduralCandidate(seed, (first + k) * OPERATOR_FAMILIES.length + fi, family),
      );
    });
    const validated = await validateCandidates(candidates, io, concurrency);
    tried += candidates.length;
    for (const v of validated) {
      const list = kept.get(v.candidate.family)!;
      if (list.length < perFamily) list.push(v);
    }
    const total = [...kept.values()].reduce((n, l) => n + l.length, 0);
    io.onProgress?.({ kept: total, tried, target: perFamily * OPERATOR_FAMILIES.length });
  }
  const short = OPERATOR_FAMILIES.filter((f) => kept.get(f)!.length < perFamily);
  if (short.length > 0)
    throw new SandboxError(`procedural: too few bugs of ${short.join(', ')} validated; lower perFamily`);
  return OPERATOR_FAMILIES.flatMap((f) => kept.get(f)!);
}

/** Expected values from the clean code, test files, then a clean and a buggy pytest run per candidate. */
async function validateCandidates(
  candidates: readonly ProceduralCandidate[],
  io: { assets: string; python: string; scratch: string; signal?: AbortSignal | undefined },
  concurrency: number,
): Promise<Validated[]> {
  const entries = candidates.flatMap((c) =>
    c.functions.map((f) => ({ source: c.cleanFiles[f.file]!, function: f.name, cases: f.cases })),
  );
  const oracle = await runProcessOk(io.python, [join(io.assets, 'oracle.py')], {
    stdin: JSON.stringify(entries),
    maxOutputBytes: Number.POSITIVE_INFINITY,
    signal: io.signal,
  });
  const expected = JSON.parse(oracle.stdout) as string[][];
  let e = 0;
  const withFiles: Array<{ c: ProceduralCandidate; files: Record<string, string>; workdir: string }> = [];
  for (const c of candidates) {
    const files = { ...c.cleanFiles };
    for (const f of c.functions) files[f.testFile] = testFileText(f, expected[e++]!);
    const workdir = join(io.scratch, String(c.index));
    for (const [path, text] of Object.entries(files)) {
      await mkdir(dirname(join(workdir, path)), { recursive: true });
      await writeFile(join(workdir, path), text);
    }
    withFiles.push({ c, files, workdir });
  }
  const reports = new Map<number, [RunReport?, RunReport?]>();
  await Promise.all(
    Array.from({ length: concurrency }, (_, w) => {
      const mine = withFiles.filter((_, i) => i % concurrency === w);
      const runs: ValidationRun[] = mine.flatMap(({ c, workdir }) => [
        { workdir },
        { workdir, file: c.buggyFile.file, content: c.buggyFile.content },
      ]);
      return validateRuns(
        io.assets,
        io.scratch,
        io.python,
        runs,
        60_000,
        (index, report) => {
          const c = mine[Math.floor(index / 2)]!.c;
          const pair = reports.get(c.index) ?? [];
          pair[index % 2] = report;
          reports.set(c.index, pair);
          return true;
        },
        io.signal,
      );
    }),
  );
  const out: Validated[] = [];
  for (const { c, files } of withFiles) {
    const [clean, buggy] = reports.get(c.index) ?? [];
    if (!clean || !buggy) throw new SandboxError(`procedural: candidate ${c.index} was not validated`);
    const cases = c.functions.reduce((n, f) => n + f.cases.length, 0);
    if (!allPassed(clean.statusMap, cases))
      throw new SandboxError(
        `procedural: the clean repository of candidate ${c.index} does not pass its own tests:\n${clean.log.slice(-2000)}`,
      );
    const report = validReport(buggy.statusMap, clean.statusMap);
    const testFile = c.functions[c.target]!.testFile;
    if (
      buggy.timedOut ||
      report.FAIL_TO_PASS.length === 0 ||
      report.PASS_TO_PASS.length === 0 ||
      report.FAIL_TO_PASS.some((id) => !id.startsWith(`${testFile}::`))
    )
      continue;
    out.push({
      candidate: c,
      files,
      failToPass: report.FAIL_TO_PASS,
      passToPass: report.PASS_TO_PASS,
      failures: failureLines(buggy.log, report.FAIL_TO_PASS),
    });
  }
  return out;
}

function allPassed(map: StatusMap, expected: number): boolean {
  const statuses = Object.values(map);
  return statuses.length === expected && statuses.every((s) => s === 'PASSED');
}

/** The `FAILED id - message` lines of pytest's short summary for `ids`, as the agent's test run shows them. */
export function failureLines(log: string, ids: readonly string[]): string[] {
  return log
    .split('\n')
    .filter((line) => line.startsWith('FAILED ') && ids.includes(line.slice(7).split(' - ')[0]!))
    .map((line) => line.trim());
}

/** The issue text: the function, the failing tests, and what their failures print. */
export function proceduralStatement(v: Pick<Validated, 'candidate' | 'failToPass' | 'failures'>): string {
  const f = v.candidate.functions[v.candidate.target]!;
  return [
    `\`${f.module}.${f.name}\` returns wrong results.`,
    '',
    `${v.failToPass.length === 1 ? 'This test fails' : `These ${v.failToPass.length} tests fail`}:`,
    '',
    ...v.failToPass.map((t) => `- \`${t}\``),
    '',
    'The test run reports:',
    '',
    '```',
    ...v.failures.slice(0, 3),
    '```',
    '',
    `Please fix the library so that ${v.failToPass.length === 1 ? 'it passes' : 'they pass'} again without breaking the rest of the suite. The tests are correct; do not change them.`,
  ].join('\n');
}

/** The repository as a git mirror (main, and the instance branch), and its row. */
async function commitRepository(
  v: Validated,
  repoDir: string,
  signal: AbortSignal | undefined,
): Promise<{ row: SweSmithRow; repoDir: string }> {
  const env = { ...process.env, ...OFFLINE_GIT_ENV };
  const git = async (args: string[], stdin?: string) =>
    (
      await runProcessOk(
        'git',
        ['-c', 'init.defaultBranch=main', '-c', 'commit.gpgsign=false', '-c', 'core.autocrlf=false', ...args],
        { cwd: repoDir, env, stdin, maxOutputBytes: Number.POSITIVE_INFINITY, signal },
      )
    ).stdout;
  await writeFile(join(repoDir, '.gitignore'), LIBRARY_GITIGNORE);
  const files: Record<string, string> = { ...v.files, '.gitignore': LIBRARY_GITIGNORE };
  const when = `${Date.parse(OFFLINE_GIT_ENV.GIT_COMMITTER_DATE) / 1000} +0000`;
  const who = `${OFFLINE_GIT_ENV.GIT_COMMITTER_NAME} <${OFFLINE_GIT_ENV.GIT_COMMITTER_EMAIL}> ${when}`;
  const data = (text: string) => `data ${Buffer.byteLength(text)}\n${text}\n`;
  const commit = (ref: string, mark: number, subject: string, from: string, changes: string) =>
    `commit ${ref}\nmark :${mark}\nauthor ${who}\ncommitter ${who}\n${data(`${subject}\n`)}${from}${changes}\n`;
  const f2pFiles = [...new Set(v.failToPass.map((id) => id.split('::')[0]!))].sort();
  const paths = Object.keys(files).sort();
  let stream = paths.map((p, i) => `blob\nmark :${i + 1}\n${data(files[p]!)}`).join('');
  const n = paths.length;
  stream += `blob\nmark :${n + 1}\n${data(v.candidate.buggyFile.content)}`;
  stream += commit(
    'refs/heads/main',
    n + 2,
    'Initial commit',
    '',
    paths.map((p, i) => `M 100644 :${i + 1} ${p}\n`).join(''),
  );
  const bug = `M 100644 :${n + 1} ${v.candidate.buggyFile.file}\n`;
  stream += commit('refs/heads/instance', n + 3, BUG_PATCH_SUBJECT, `from :${n + 2}\n`, bug);
  stream += commit(
    'refs/heads/instance',
    n + 4,
    REMOVE_TESTS_SUBJECT,
    `from :${n + 3}\n`,
    f2pFiles.map((f) => `D ${f}\n`).join(''),
  );
  await git(['init', '-q', '--template=']);
  await git(['fast-import', '--quiet'], stream);
  // The work tree holds main's files already; the index is made to match.
  await git(['reset', '-q']);
  const sha = (await git(['rev-parse', 'main'])).trim();
  const repoName = `${OFFLINE_OWNER}__${PROCEDURAL_REPO}.${sha.slice(0, 8)}`;
  const hash8 = createHash('sha256')
    .update(v.candidate.buggyFile.file)
    .update(v.candidate.buggyFile.content)
    .digest('hex')
    .slice(0, 8);
  const instanceId = `${repoName}.${v.candidate.family}__${hash8}`;
  await git(['branch', '-q', '-m', 'instance', instanceId]);
  const patch = await git(['diff', '--no-color', '--no-ext-diff', 'main', `${instanceId}~1`]);
  const names = swesmithNames(instanceId, { org: OFFLINE_OWNER });
  return {
    repoDir,
    row: {
      instance_id: instanceId,
      repo: names.mirrorName,
      patch,
      FAIL_TO_PASS: v.failToPass,
      PASS_TO_PASS: v.passToPass,
      image_name: names.imageName,
      problem_statement: proceduralStatement(v),
      base_commit: sha,
      created_at: OFFLINE_GIT_ENV.GIT_COMMITTER_DATE,
    },
  };
}

async function loadProcedural(dir: string, started: number, built: boolean): Promise<ProceduralTaskSet> {
  const jsonlPath = join(dir, 'instances.jsonl');
  const { rows, issues } = await loadJsonl(jsonlPath, { onInvalid: 'fatal' });
  if (issues.length > 0 || rows.length === 0)
    throw new SandboxError(`procedural task set in ${dir} has malformed rows; rebuild with force: true`);
  const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as {
    heldoutFamily: OperatorFamily | null;
    instances: ProceduralInstance[];
  };
  const splitPaths = Object.fromEntries(
    Object.entries(SPLIT_FILES).map(([split, file]) => [split, join(dir, file)]),
  ) as Record<ProceduralSplit, string>;
  return {
    dir,
    jsonlPath,
    splitPaths,
    environmentsPath: join(dir, 'environments.json'),
    rows,
    tasks: rows.map((row) => rowToTask(row)),
    instances: manifest.instances,
    heldoutFamily: manifest.heldoutFamily,
    built,
    durationMs: performance.now() - started,
  };
}
