/**
 * SWE-smith dataset rows: schema, selection (repo filter, caps, seeded shuffle), and the mapping of a row
 * to a dataset-agnostic `TaskSpec`. Reading files is `dataset-file.ts`; checking rows, `dataset-rows.ts`.
 */
import { ConfigError, type TaskSpec, TaskSpecSchema } from '@vime/core';
import { seededRandom, shellQuote } from '@vime/core/utils';
import { poolName } from '@vime/sandbox';
import { z } from 'zod';
import { resolveProfile, type SweProfile, testCommandFor } from './profiles.js';

/** HF parquet stores the test lists as `list<string>`; some exports store them JSON-encoded. */
const testList = z.preprocess((value) => {
  if (typeof value !== 'string') return value;
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}, z.array(z.string()));

/** Optional text that may be `null` in parquet exports; `null` is dropped. */
const optionalText = z.preprocess((v) => (v === null ? undefined : v), z.string().optional());

/** One SWE-smith task instance, as written by SWE-smith's `gather` and published on the Hub. */
export const SweSmithRowSchema = z.object({
  instance_id: z.string().regex(/^\S+\.\S+$/, 'must look like "<owner>__<repo>.<commit8>.<bug>"'),
  repo: z.string().min(1),
  /** The bug-inducing diff (clean → buggy); the gold fix is its reverse. */
  patch: z.string(),
  FAIL_TO_PASS: testList,
  PASS_TO_PASS: testList,
  image_name: z.string().min(1),
  problem_statement: z
    .union([z.string(), z.null()])
    .optional()
    .transform((v) => v ?? ''),
  base_commit: optionalText,
  created_at: optionalText,
  /**
   * The agent that runs this row (`mini-swe-agent`, `claude-code`, `codex`, `qwen-code`, `pi`, `opencode`, `gemini-cli`): what slime hands over as
   * `metadata.agent`, the row being the sample's metadata. Checked by the rollout that reads it.
   */
  agent: optionalText,
  /**
   * The project's extension for generated sets: which split the row belongs to (`train`, `heldout`, or
   * `heldout_family` for the operator family held out entirely), carried to `metadata.split`.
   */
  split: optionalText,
});
/** One SWE-smith dataset row. */
export type SweSmithRow = z.output<typeof SweSmithRowSchema>;

/** Filter by repo substring, shuffle (seeded), then apply the per-repo and global caps. */
export function selectRows<T extends { repo: string }>(
  rows: readonly T[],
  options: {
    repos?: readonly string[] | undefined;
    perRepo?: number | undefined;
    limit?: number | undefined;
    seed?: number | undefined;
  } = {},
): T[] {
  const { repos, perRepo, limit, seed } = options;
  for (const [name, v] of [
    ['perRepo', perRepo],
    ['limit', limit],
  ] as const) {
    if (v !== undefined && (!Number.isInteger(v) || v < 0)) {
      throw new ConfigError(`selectRows: ${name} must be a non-negative integer, got ${String(v)}`);
    }
  }
  // No filter (or an empty one) keeps every repo.
  const needles = repos?.length ? repos.map((r) => r.toLowerCase()) : undefined;
  let out = needles ? rows.filter((r) => needles.some((n) => r.repo.toLowerCase().includes(n))) : [...rows];
  if (seed !== undefined) {
    const next = seededRandom(seed);
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(next() * (i + 1));
      [out[i], out[j]] = [out[j]!, out[i]!];
    }
  }
  if (perRepo !== undefined) {
    const seen = new Map<string, number>();
    out = out.filter((r) => {
      const n = seen.get(r.repo) ?? 0;
      seen.set(r.repo, n + 1);
      return n < perRepo;
    });
  }
  return limit === undefined ? out : out.slice(0, limit);
}

// --- names ---------------------------------------------------------------------------------------------

/**
 * SWE-smith's names for an instance id `<owner>__<repo>.<commit8>.<bug>`: repo name (`owner__repo.commit8`),
 * mirror (`swesmith/…`) and image (`<org>/swesmith.<arch>.<owner>_1776_<repo>.<commit8>`, lower-cased; the
 * org is `swebench` for SWE-smith's own images).
 */
export function swesmithNames(
  instanceId: string,
  options: { arch?: 'x86_64' | 'arm64' | undefined; org?: string | undefined } = {},
) {
  const dot = instanceId.lastIndexOf('.');
  const repoName = dot > 0 ? instanceId.slice(0, dot) : instanceId;
  const arch = options.arch ?? 'x86_64';
  return {
    repoName,
    mirrorName: `swesmith/${repoName}`,
    imageName:
      `${options.org ?? 'swebench'}/swesmith.${arch}.${repoName.replace('__', '_1776_')}`.toLowerCase(),
  };
}

/**
 * The warm-pool name of a repo, as the reference setup names them: `swesmith-` + the row's `repo` (the
 * mirror, `swesmith/<owner>__<repo>.<commit8>`), Kubernetes-safe, with an optional run suffix that is
 * never cut (a long name is shortened and given a hash instead).
 */
export function repoPoolName(repo: string, runSuffix?: string): string {
  return poolName(`swesmith-${repo}`, runSuffix);
}

// --- rows → tasks ---------------------------------------------------------------------------------------

/** Options of `rowToTask`. */
export interface RowToTaskOptions {
  /** Appended to every pool name (e.g. a run id), so runs do not share warm pools. */
  runSuffix?: string | undefined;
  /** Profiles for repositories SWE-smith's built-ins do not cover (e.g. the offline task set). */
  profiles?: readonly SweProfile[] | undefined;
  /** Replace the profile's test command (e.g. without the conda prefix). */
  testCommand?: string | undefined;
  /** Image to use instead of the row's `image_name` (e.g. a local rootfs). */
  image?: string | undefined;
  /** Extra files staged before setup (e.g. a repository bundle for images without the repo). */
  files?: TaskSpec['files'] | undefined;
  /** Command run before the checkout (e.g. unpacking a staged repository). */
  setupPrefix?: string | undefined;
}

/** The prompt given to the agent: the problem statement, or a neutral fallback naming the failing tests. */
export function taskPrompt(row: SweSmithRow): string {
  if (row.problem_statement.trim()) return row.problem_statement;
  return `Some tests in this repository fail. Make these tests pass without breaking the others:\n${row.FAIL_TO_PASS.map((t) => `- ${t}`).join('\n')}`;
}

/**
 * The reverse of SWE-smith's bug patch (the gold fix) as a unified diff `git apply` takes: headers and
 * hunk ranges swapped, `+`/`-` swapped, and within each run of changes the removals put first again.
 */
export function reversePatch(patch: string): string {
  const out: string[] = [];
  let removed: string[] = [];
  let added: string[] = [];
  const flush = () => {
    out.push(...removed, ...added);
    removed = [];
    added = [];
  };
  const lines = patch.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const next = lines[i + 1];
    // "\ No newline at end of file" belongs to the line before it and moves with it.
    const tail = next?.startsWith('\\') ? `\n${next}` : '';
    if (line.startsWith('+') && !line.startsWith('+++ ')) {
      removed.push(`-${line.slice(1)}${tail}`);
      if (tail) i++;
      continue;
    }
    if (line.startsWith('-') && !line.startsWith('--- ')) {
      added.push(`+${line.slice(1)}${tail}`);
      if (tail) i++;
      continue;
    }
    flush();
    const diff = /^diff --git a\/(.*) b\/(.*)$/.exec(line);
    const index = /^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$/.exec(line);
    const hunk = /^@@ -(\S+) \+(\S+) @@(.*)$/.exec(line);
    if (diff) out.push(`diff --git a/${diff[2]} b/${diff[1]}`);
    else if (index) out.push(`index ${index[2]}..${index[1]}${index[3]}`);
    else if (hunk) out.push(`@@ -${hunk[2]} +${hunk[1]} @@${hunk[3]}`);
    else if (line.startsWith('--- ') && next?.startsWith('+++ ')) {
      out.push(`--- ${next.slice(4)}`, `+++ ${line.slice(4)}`);
      i++;
    } else if (line.startsWith('new file mode ')) out.push(`deleted file mode ${line.slice(14)}`);
    else if (line.startsWith('deleted file mode ')) out.push(`new file mode ${line.slice(18)}`);
    else out.push(line);
  }
  flush();
  return out.join('\n');
}

/**
 * Map a SWE-smith row to a `TaskSpec`: prompt, image, per-repo pool, `/testbed`, setup (check out the
 * instance branch), the profile's test command, a `swesmith` grader with the F2P/P2P lists, and the gold
 * patch (the reverse of the bug patch) for self-checks.
 */
export function rowToTask(row: SweSmithRow, options: RowToTaskOptions = {}): TaskSpec {
  const profile = resolveProfile(row.repo, options.profiles);
  const [f2pFiles, p2pFiles] = profile.testFiles(row);
  const checkout = `git checkout -f -q ${shellQuote(row.instance_id)}`;
  return TaskSpecSchema.parse({
    id: row.instance_id,
    prompt: taskPrompt(row),
    image: options.image ?? row.image_name,
    pool: repoPoolName(row.repo, options.runSuffix),
    workdir: '/testbed',
    setupCommand: options.setupPrefix ? `${options.setupPrefix} && ${checkout}` : checkout,
    files: options.files ?? [],
    hiddenFiles: [],
    testCommand: options.testCommand ?? testCommandFor(profile, row),
    grader: {
      kind: 'swesmith',
      failToPass: row.FAIL_TO_PASS,
      passToPass: row.PASS_TO_PASS,
      parser: `swesmith:${row.repo}`,
    },
    goldPatch: reversePatch(row.patch),
    metadata: {
      repo: row.repo,
      instance_id: row.instance_id,
      image_name: row.image_name,
      bug_patch: row.patch,
      test_files: { FAIL_TO_PASS: f2pFiles, PASS_TO_PASS: p2pFiles },
      ...(profile.env ? { sandbox_env: { ...profile.env } } : {}),
      ...(row.base_commit ? { base_commit: row.base_commit } : {}),
      ...(row.created_at ? { created_at: row.created_at } : {}),
      ...(row.agent !== undefined ? { agent: row.agent } : {}),
      ...(row.split !== undefined ? { split: row.split } : {}),
    },
  });
}

/** Distinct pool/image pairs of a task list, in first-seen order (what warm pools to create). */
export function emitPools(
  tasks: readonly TaskSpec[],
): Array<{ pool: string; image: string | undefined; tasks: number }> {
  const pools = new Map<string, { pool: string; image: string | undefined; tasks: number }>();
  for (const task of tasks) {
    const pool = task.pool ?? task.id;
    const key = `${pool}\u0000${task.image ?? ''}`;
    const entry = pools.get(key);
    if (entry) entry.tasks++;
    else pools.set(key, { pool, image: task.image, tasks: 1 });
  }
  return [...pools.values()];
}
