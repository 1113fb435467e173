// Bug injection for the offline task set: candidate mutations, their order, and validation runs with pytest.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cp, readdir, readFile, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { createInterface } from 'node:readline';
import { SandboxError } from '@vime/core';
import { runProcessOk, seededRandom } from '@vime/core/utils';
import { validReport } from '../eval-report.js';
import { parsePythonProfile } from '../parsers/swesmith.js';
import type { StatusMap } from '../parsers/types.js';
import { PYTHON_TEST_CMD } from '../profiles.js';
import {
  type BugKind,
  GENERATOR_VERSION,
  LIBRARY_GITIGNORE,
  OFFLINE_REPO,
  OFFLINE_TEST_COMMAND,
} from './assets.js';

export interface Candidate {
  kind: BugKind;
  file: string;
  function: string;
  start: number;
  end: number;
  replacement: string;
  description: string;
}

export async function listFiles(root: string, dir = root): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.name === '__pycache__' || entry.name === '.pytest_cache') continue;
    const full = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await listFiles(root, full)));
    else out.push(relative(root, full));
  }
  return out.sort();
}

export async function sourceKey(
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
export function orderCandidates(candidates: Candidate[], seed: number): Candidate[] {
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

/** One validation run: a file's content swapped in, in the worker's folder or its own `workdir`. */
export type ValidationRun =
  | { file: string; content: string; workdir?: string | undefined }
  | { workdir: string; file?: undefined; content?: undefined };

export interface RunReport {
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
export function validateRuns(
  assets: string,
  workdir: string,
  python: string,
  runs: ReadonlyArray<ValidationRun | null>,
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
export function firstFailure(log: string, ids: readonly string[]): string | undefined {
  for (const line of log.split('\n')) {
    if (!line.startsWith('FAILED ')) continue;
    const [id, ...rest] = line.slice(7).split(' - ');
    if (id && ids.includes(id) && rest.length > 0) return rest.join(' - ').trim();
  }
  return undefined;
}

export function problemStatement(
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

/** A bug that validated: its mutation, its F2P/P2P tests and the first failure message. */
export interface Kept {
  candidate: Candidate;
  mutated: string;
  failToPass: string[];
  passToPass: string[];
  message: string | undefined;
  order: number;
}

export interface FindBugsOptions {
  assets: string;
  library: string;
  scratchRoot: string;
  python: string;
  concurrency: number;
  timeoutMs: number;
  count: number;
  combined: number;
  seed: number;
  onProgress?: ((event: { kept: number; tried: number; target: number }) => void) | undefined;
  signal?: AbortSignal | undefined;
}

/** A kept bug made of two kept bugs in one file (`combine_file`). */
type CombinedKept = Kept & { parts: [Kept, Kept] };

/** What every stage of the search shares. */
interface BugSearch {
  options: FindBugsOptions;
  /** One scratch copy of the library per worker (plain folders; the repo itself stays clean). */
  scratch: string[];
  /** Every test of the clean library, all PASSED. */
  cleanMap: StatusMap;
  /** The library's source files (the mutation candidates' files), by path. */
  original: Map<string, string>;
}

/**
 * Validate the clean library, then try candidate bugs in a fixed order until `count` validate (F2P ≥ 1,
 * P2P ≥ 1, as SWE-smith keeps them), then combine pairs in one file (`combine_file`).
 */
export async function findBugs(
  options: FindBugsOptions,
): Promise<{ kept: Kept[]; combinedKept: CombinedKept[] }> {
  const scratch = await scratchCopies(options);
  const cleanMap = await cleanBaseline(options, scratch[0]!);
  const { ordered, original } = await listCandidates(options);
  const search: BugSearch = { options, scratch, cleanMap, original };
  const kept = await keepBugs(search, ordered);
  // A worker stopped early may have been killed with a candidate applied: restore the scratch copies.
  for (const workdir of scratch)
    for (const [file, text] of original) await writeFile(join(workdir, file), text);
  const combinedKept = await keepCombinedBugs(search, kept, pairsInOneFile(kept, original, options.combined));
  return { kept, combinedKept };
}

async function scratchCopies(options: FindBugsOptions): Promise<string[]> {
  const filter = (src: string) => !/__pycache__|\.pytest_cache/.test(src);
  const scratch: string[] = [];
  for (let i = 0; i < options.concurrency; i++) {
    const s = join(options.scratchRoot, `w${i}`);
    await cp(options.library, s, { recursive: true, filter });
    scratch.push(s);
  }
  return scratch;
}

/** The clean library's test results; it must pass every one of its (at least 60) tests. */
async function cleanBaseline(options: FindBugsOptions, workdir: string): Promise<StatusMap> {
  const { assets, python, timeoutMs, signal } = options;
  let clean: RunReport | undefined;
  await validateRuns(
    assets,
    workdir,
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
  return clean.statusMap;
}

/** The mutations `mutations.py` proposes for the library's modules, in search order, and their sources. */
async function listCandidates(
  options: FindBugsOptions,
): Promise<{ ordered: Candidate[]; original: Map<string, string> }> {
  const { assets, library, python, seed, signal } = options;
  const sources = (await listFiles(library)).filter(
    (f) => f.startsWith(`${OFFLINE_REPO}/`) && f.endsWith('.py') && !f.endsWith('__init__.py'),
  );
  const listed = await runProcessOk(python, [join(assets, 'mutations.py'), library, ...sources], {
    cwd: library,
    maxOutputBytes: Number.POSITIVE_INFINITY,
    signal,
  });
  const ordered = orderCandidates(JSON.parse(listed.stdout) as Candidate[], seed);
  const original = new Map<string, string>();
  for (const f of sources) original.set(f, await readFile(join(library, f), 'utf8'));
  return { ordered, original };
}

/**
 * Validate candidates on every worker (candidate i on worker i % concurrency) until `count` are kept;
 * the first `count` in candidate order, whichever worker found them (deterministic output).
 */
async function keepBugs(search: BugSearch, ordered: Candidate[]): Promise<Kept[]> {
  const { options, scratch, cleanMap, original } = search;
  const { assets, python, concurrency, timeoutMs, count, signal } = options;
  const kept: Kept[] = [];
  let tried = 0;
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
  kept.sort((a, b) => a.order - b.order);
  kept.length = Math.min(kept.length, count);
  return kept;
}

/**
 * combine_file: two kept bugs in different functions of one file, with disjoint F2P tests and
 * non-overlapping edits; each bug in one pair at most, at most two pairs per file.
 */
function pairsInOneFile(
  kept: Kept[],
  original: Map<string, string>,
  combined: number,
): Array<{ a: Kept; b: Kept; content: string }> {
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
  return combos;
}

/** The pairs that validate: every F2P test of both parts fails, and some test still passes. */
async function keepCombinedBugs(
  search: BugSearch,
  kept: Kept[],
  combos: Array<{ a: Kept; b: Kept; content: string }>,
): Promise<CombinedKept[]> {
  const { assets, python, timeoutMs, signal } = search.options;
  const combinedKept: CombinedKept[] = [];
  await validateRuns(
    assets,
    search.scratch[0]!,
    python,
    combos.map((c) => ({ file: c.a.candidate.file, content: c.content })),
    timeoutMs,
    (index, buggy) => {
      const { a, b, content } = combos[index]!;
      const report = validReport(buggy.statusMap, search.cleanMap);
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
  return combinedKept;
}
