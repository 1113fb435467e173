/**
 * The offline task set, built from source with real git and real pytest on this machine: SWE-smith's row
 * schema and branch layout, at least 30 validated instances over at least 5 bug kinds, reproducible output.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SweSmithRowSchema } from './dataset.js';
import { loadJsonl, loadParquet } from './dataset-file.js';
import { SweEnvironments } from './environment.js';
import { readTestOutput, validReport } from './eval-report.js';
import { evalScript } from './eval-script.js';
import { BUG_PATCH_SUBJECT, REMOVE_TESTS_SUBJECT } from './layout.js';
import { bugKindOf } from './offline/assets.js';
import { buildOfflineTaskSet, type OfflineTaskSet } from './offline/build.js';
import { parseTestLog } from './parsers/index.js';
import { OFFLINE_TEST_COMMAND } from './profiles.js';

const work = mkdtempSync(join(tmpdir(), 'vime-swe-offline-'));
let set: OfflineTaskSet;
const git = (args: string[], cwd = set.repoDir) => execFileSync('git', args, { cwd, encoding: 'utf8' });

beforeAll(async () => {
  set = await buildOfflineTaskSet({ dir: join(work, 'a') });
}, 300_000);

afterAll(() => {
  execFileSync('rm', ['-rf', work]);
});

describe('offline task set', () => {
  it('has at least 30 instances over at least 5 bug kinds, in SWE-smith row format', async () => {
    expect(set.built).toBe(true);
    expect(set.rows.length).toBeGreaterThanOrEqual(30);
    const kinds = new Set(set.rows.map((r) => bugKindOf(r.instance_id)));
    expect(kinds.size).toBeGreaterThanOrEqual(5);
    const { rows, issues } = await loadJsonl(set.jsonlPath, { onInvalid: 'fatal' });
    expect(issues).toEqual([]);
    expect(rows).toEqual(set.rows);
    for (const row of rows) {
      expect(SweSmithRowSchema.parse(row)).toEqual(row);
      expect(row.instance_id).toMatch(
        new RegExp(`^${set.repoName.replace('.', '\\.')}\\.[a-z_]+__[0-9a-f]{8}$`),
      );
      expect(row.repo).toBe(`swesmith/${set.repoName}`);
      expect(row.image_name).toBe(`vime/swesmith.x86_64.${set.repoName.replace('__', '_1776_')}`);
      expect(row.image_name).toBe(set.image);
      expect(row.FAIL_TO_PASS.length, row.instance_id).toBeGreaterThan(0);
      expect(row.PASS_TO_PASS.length, row.instance_id).toBeGreaterThan(0);
      expect(row.problem_statement).toContain(row.FAIL_TO_PASS[0]!);
    }
    // The library's own suite has 60+ tests, all in every instance's F2P ∪ P2P.
    expect(set.rows[0]!.FAIL_TO_PASS.length + set.rows[0]!.PASS_TO_PASS.length).toBeGreaterThanOrEqual(60);
  });

  it('lays each branch out as SWE-smith does: "Bug Patch", then "Remove F2P Tests" deleting the F2P files', () => {
    for (const row of set.rows) {
      const subjects = git(['log', '--format=%s', '-3', row.instance_id]).trim().split('\n');
      expect(subjects, row.instance_id).toEqual([REMOVE_TESTS_SUBJECT, BUG_PATCH_SUBJECT, 'Initial commit']);
      const f2pFiles = [...new Set(row.FAIL_TO_PASS.map((id) => id.split('::')[0]!))].sort();
      const removed = git(['diff', '--name-only', '--diff-filter=D', `${row.instance_id}~1`, row.instance_id])
        .trim()
        .split('\n');
      expect(removed, row.instance_id).toEqual(f2pFiles);
      expect(
        git(['diff', '--name-only', `${row.instance_id}~1`, row.instance_id])
          .trim()
          .split('\n'),
      ).toEqual(f2pFiles);
      expect(git(['diff', 'main', `${row.instance_id}~1`]), row.instance_id).toBe(row.patch);
    }
  });

  it('re-checks instances with plain pytest: F2P fails on the bug and passes with the gold patch', () => {
    // One git worktree; for each instance: the bug (HEAD~1), then the gold patch (reverse of the bug patch).
    const tree = join(work, 'tree');
    git(['worktree', 'add', '-q', '--detach', tree, 'main']);
    const runSuite = () => {
      let log: string;
      try {
        log = execFileSync('bash', ['-c', 'bash "$0" 2>&1', join(tree, '.git-eval.sh')], {
          cwd: tree,
          encoding: 'utf8',
        });
      } catch (error) {
        log = String((error as { stdout?: string }).stdout ?? '');
      }
      return parseTestLog(readTestOutput(log).content ?? '', { parser: `swesmith:${set.rows[0]!.repo}` });
    };
    execFileSync('sh', ['-c', `cat > .git-eval.sh`], {
      cwd: tree,
      input: evalScript({ workdir: tree, testCommand: `PYTHONDONTWRITEBYTECODE=1 ${OFFLINE_TEST_COMMAND}` }),
    });
    const clean = runSuite();
    for (const row of set.rows.slice(0, 12)) {
      git(['checkout', '-q', '--detach', `${row.instance_id}~1`], tree);
      const buggy = runSuite();
      const report = validReport(buggy, clean);
      expect(report.FAIL_TO_PASS, row.instance_id).toEqual(row.FAIL_TO_PASS);
      expect(report.PASS_TO_PASS, row.instance_id).toEqual(row.PASS_TO_PASS);
      execFileSync('git', ['apply', '-R', '-'], { cwd: tree, input: row.patch });
      const fixed = runSuite();
      for (const id of [...row.FAIL_TO_PASS, ...row.PASS_TO_PASS])
        expect(fixed[id], `${row.instance_id} ${id}`).toBe('PASSED');
      git(['checkout', '-q', '-f', '--', '.'], tree);
    }
    git(['worktree', 'remove', '--force', tree]);
  }, 300_000);

  it('is reproducible and reuses a matching build', async () => {
    const again = await buildOfflineTaskSet({ dir: join(work, 'a') });
    expect(again.built).toBe(false);
    expect(again.rows).toEqual(set.rows);
    const fresh = await buildOfflineTaskSet({ dir: join(work, 'b') });
    expect(fresh.built).toBe(true);
    expect(readFileSync(fresh.jsonlPath, 'utf8')).toBe(readFileSync(set.jsonlPath, 'utf8'));
  }, 300_000);

  it('publishes the rows as JSONL and parquet, and the mirror as the image environment', async () => {
    const parquet = await loadParquet(set.parquetPath, { onInvalid: 'fatal' });
    expect(parquet.rows).toEqual(set.rows);
    const environments = await SweEnvironments.forDataset(set.jsonlPath);
    expect(environments.images).toEqual([set.image]);
    expect(environments.get(set.image)?.template).toBe(set.repoDir);
    // The mirror holds every instance as a branch named instance_id, as SWE-smith's images do.
    const branches = git(['for-each-ref', '--format=%(refname:short)', 'refs/heads']).trim().split('\n');
    expect(branches.sort()).toEqual(['main', ...set.rows.map((r) => r.instance_id)].sort());
  });

  it('maps rows to tasks that check the instance branch out at /testbed, as SWE-smith does', () => {
    const task = set.tasks[0]!;
    expect(task.workdir).toBe('/testbed');
    expect(task.files).toEqual([]);
    expect(task.image).toBe(set.image);
    expect(task.setupCommand).toBe(`git checkout -f -q ${set.rows[0]!.instance_id}`);
    expect(task.testCommand).toBe(OFFLINE_TEST_COMMAND);
    expect(task.grader).toMatchObject({ kind: 'swesmith', failToPass: set.rows[0]!.FAIL_TO_PASS });
  });
});
