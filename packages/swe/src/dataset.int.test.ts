import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VimeError } from '@vime/core';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { describe, expect, it } from 'vitest';
import {
  emitPools,
  reversePatch,
  rowToTask,
  type SweSmithRow,
  selectRows,
  swesmithNames,
} from './dataset.js';
import { loadJsonl, loadParquet, parseJsonlRows } from './dataset-file.js';

const dir = mkdtempSync(join(tmpdir(), 'vime-swe-dataset-'));

function row(i: number, repo = 'swesmith/mewwts__addict.75284f95'): SweSmithRow {
  const repoName = repo.replace('swesmith/', '');
  return {
    instance_id: `${repoName}.func_pm_op_change__${String(i).padStart(8, '0')}`,
    repo,
    patch: 'diff --git a/a.py b/a.py\n',
    FAIL_TO_PASS: [`tests/test_a.py::test_${i}`],
    PASS_TO_PASS: ['tests/test_b.py::test_ok'],
    image_name: swesmithNames(`${repoName}.x`).imageName,
    problem_statement: `issue ${i}`,
  };
}

describe('JSONL loading', () => {
  it('reports malformed rows by row number and field, keeps the rest', () => {
    const lines = [
      JSON.stringify(row(1)),
      '{not json',
      JSON.stringify({ ...row(2), FAIL_TO_PASS: 'oops' }),
      '',
      JSON.stringify({ ...row(3), image_name: undefined }),
      JSON.stringify(row(4)),
    ];
    const { rows, issues } = parseJsonlRows(lines.join('\n'));
    expect(rows.map((r) => r.instance_id)).toEqual([row(1).instance_id, row(4).instance_id]);
    expect(issues.map((i) => [i.row, i.field])).toEqual([
      [2, '(row)'],
      [3, 'FAIL_TO_PASS'],
      [5, 'image_name'],
    ]);
    expect(issues[1]!.instanceId).toBe(row(2).instance_id);
  });

  it('fails on the first malformed row with onInvalid "fatal", naming row, field and instance', () => {
    const text = [JSON.stringify(row(1)), JSON.stringify({ ...row(2), PASS_TO_PASS: [1] })].join('\n');
    let error: unknown;
    try {
      parseJsonlRows(text, { onInvalid: 'fatal' });
    } catch (e) {
      error = e;
    }
    expect(VimeError.isInstance(error)).toBe(true);
    expect((error as Error).message).toMatch(
      /row 2 \(instance .*\): column PASS_TO_PASS: .*item 0 is number 1/,
    );
    expect((error as Error).message).toContain(row(2).instance_id);
  });

  it('accepts JSON-encoded test lists, null problem statements and the optional fields', async () => {
    const raw = {
      ...row(1),
      FAIL_TO_PASS: '["x::y"]',
      problem_statement: null,
      base_commit: 'abc',
      created_at: '2025-01-01',
    };
    const path = join(dir, 'rows.jsonl');
    writeFileSync(path, `${JSON.stringify(raw)}\n`);
    const { rows, issues } = await loadJsonl(path);
    expect(issues).toEqual([]);
    expect(rows[0]).toMatchObject({
      FAIL_TO_PASS: ['x::y'],
      problem_statement: '',
      base_commit: 'abc',
      created_at: '2025-01-01',
    });
  });
});

describe('parquet loading', () => {
  it('reads the Hub layout (list<string> test columns) through hyparquet', async () => {
    const rows = [row(1), row(2, 'swesmith/paramiko__paramiko.23f92003')];
    const path = join(dir, 'rows.parquet');
    const columns = ['instance_id', 'repo', 'patch', 'image_name', 'problem_statement'] as const;
    const buffer = parquetWriteBuffer({
      columnData: [
        ...columns.map((name) => ({ name, data: rows.map((r) => r[name]), type: 'STRING' as const })),
        { name: 'FAIL_TO_PASS', data: rows.map((r) => r.FAIL_TO_PASS) },
        { name: 'PASS_TO_PASS', data: rows.map((r) => r.PASS_TO_PASS) },
      ],
    });
    writeFileSync(path, new Uint8Array(buffer));
    const loaded = await loadParquet(path, { repos: ['PARAMIKO'] });
    expect(loaded.issues).toEqual([]);
    expect(loaded.rows).toEqual([rows[1]]);
  });
});

describe('selection', () => {
  const rows = [
    ...Array.from({ length: 6 }, (_, i) => row(i)),
    ...Array.from({ length: 4 }, (_, i) => row(10 + i, 'swesmith/pallets__click.fde47b4b')),
  ];

  it('filters repos by case-insensitive substring', () => {
    expect(selectRows(rows, { repos: ['CLICK'] }).length).toBe(4);
    expect(selectRows(rows, { repos: ['click', 'addict'] }).length).toBe(10);
  });

  it('caps per repo and overall, after a seeded shuffle that is reproducible', () => {
    const a = selectRows(rows, { seed: 7, perRepo: 2, limit: 3 });
    expect(a.length).toBe(3);
    expect(selectRows(rows, { seed: 7, perRepo: 2, limit: 3 })).toEqual(a);
    const counts = new Map<string, number>();
    for (const r of selectRows(rows, { seed: 7, perRepo: 2 }))
      counts.set(r.repo, (counts.get(r.repo) ?? 0) + 1);
    expect([...counts.values()]).toEqual([2, 2]);
    expect(selectRows(rows, { seed: 8 }).map((r) => r.instance_id)).not.toEqual(
      rows.map((r) => r.instance_id),
    );
  });

  it('rejects a bad cap with the value in the message', () => {
    expect(() => selectRows(rows, { limit: -1 })).toThrow(/limit must be a non-negative integer, got -1/);
  });
});

describe('rows to tasks', () => {
  it('maps a row to a TaskSpec with the profile command, pool, grader and gold patch', () => {
    const r = row(1, 'swesmith/paramiko__paramiko.23f92003');
    const task = rowToTask(r, { runSuffix: 'run-7' });
    expect(task).toMatchObject({
      id: r.instance_id,
      prompt: 'issue 1',
      image: 'swebench/swesmith.x86_64.paramiko_1776_paramiko.23f92003',
      pool: 'swesmith-swesmith-paramiko-paramiko-23f92003-run-7',
      workdir: '/testbed',
      setupCommand: `git checkout -f -q ${r.instance_id}`,
      testCommand:
        'source /opt/miniconda3/bin/activate; conda activate testbed; pytest -rA --color=no --disable-warnings',
      grader: {
        kind: 'swesmith',
        failToPass: r.FAIL_TO_PASS,
        passToPass: r.PASS_TO_PASS,
        parser: `swesmith:${r.repo}`,
      },
    });
    expect(task.metadata.test_files).toEqual({
      FAIL_TO_PASS: ['tests/test_a.py'],
      PASS_TO_PASS: ['tests/test_b.py'],
    });
  });

  it('runs only the F2P and P2P test files for min_testing repositories, as SWE-smith does', () => {
    const task = rowToTask(row(1, 'swesmith/pandas-dev__pandas.95280573'));
    expect(task.testCommand).toBe(
      'source /opt/miniconda3/bin/activate; conda activate testbed; pytest --disable-warnings --color=no --tb=no --verbose tests/test_a.py tests/test_b.py',
    );
  });

  it('writes a fallback prompt from the failing tests when the problem statement is empty', () => {
    const task = rowToTask({ ...row(1), problem_statement: '' });
    expect(task.prompt).toContain('tests/test_a.py::test_1');
  });

  it('lists distinct pool/image pairs', () => {
    const tasks = [row(1), row(2), row(3, 'swesmith/pallets__click.fde47b4b')].map((r) => rowToTask(r));
    expect(emitPools(tasks)).toEqual([
      {
        pool: 'swesmith-swesmith-mewwts-addict-75284f95',
        image: 'swebench/swesmith.x86_64.mewwts_1776_addict.75284f95',
        tasks: 2,
      },
      {
        pool: 'swesmith-swesmith-pallets-click-fde47b4b',
        image: 'swebench/swesmith.x86_64.pallets_1776_click.fde47b4b',
        tasks: 1,
      },
    ]);
  });

  it('reverses a bug patch into a gold patch git applies (real git)', () => {
    const repo = join(dir, 'rev');
    const git = (...args: string[]) =>
      execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], {
        cwd: repo,
        encoding: 'utf8',
      });
    execFileSync('mkdir', ['-p', repo]);
    git('init', '-q');
    writeFileSync(join(repo, 'm.py'), 'def f(a, b):\n    return a - b\n\n\ndef g():\n    return 1\n');
    writeFileSync(join(repo, 'old.py'), 'x = 1\n');
    git('add', '-A');
    git('commit', '-qm', 'clean');
    writeFileSync(join(repo, 'm.py'), 'def f(a, b):\n    return b - a\n\n\ndef g():\n    return 2\n');
    execFileSync('rm', [join(repo, 'old.py')]);
    writeFileSync(join(repo, 'new.py'), 'y = 2');
    git('add', '-A');
    git('commit', '-qm', 'bug');
    const bug = git('diff', 'HEAD~1', 'HEAD');
    writeFileSync(join(repo, 'gold.diff'), reversePatch(bug));
    git('apply', 'gold.diff');
    execFileSync('rm', [join(repo, 'gold.diff')]);
    git('add', '-A');
    expect(git('diff', '--cached', 'HEAD', '--stat')).not.toBe('');
    expect(git('diff', '--cached', 'HEAD~1', '--stat')).toBe('');
  });
});
