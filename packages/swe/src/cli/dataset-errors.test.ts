// `vime-swe validate` on the dataset files a user really has when something is wrong with them: every
// case exits 2 with one line (or the table of every problem) naming the file, the row and instance id,
// the column and the fix; never a stack trace, and nothing graded.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { EXIT, memoryIo } from '@vime/core/utils';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { afterAll, describe, expect, it } from 'vitest';
import { swesmithNames } from '../dataset.js';
import { main } from './main.js';

const dir = mkdtempSync(join(tmpdir(), 'vime-swe-bad-data-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ID = 'pallets__markupsafe.620c06c9.lm_rewrite__abc1';
function row(i: number, over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    instance_id: `pallets__markupsafe.620c06c9.lm_rewrite__abc${i}`,
    repo: 'swesmith/pallets__markupsafe.620c06c9',
    patch: 'diff --git a/a.py b/a.py\n',
    FAIL_TO_PASS: [`tests/test_a.py::test_${i}`],
    PASS_TO_PASS: ['tests/test_b.py::test_ok'],
    image_name: swesmithNames('pallets__markupsafe.620c06c9.x').imageName,
    problem_statement: `issue ${i}`,
    ...over,
  };
}
const jsonl = (rows: unknown[]) => `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`;

/** A parquet file as the Hub publishes one, with columns replaced or left out. */
function parquet(rows: Array<Record<string, unknown>>, columns: Record<string, unknown[] | null> = {}) {
  const names = ['instance_id', 'repo', 'patch', 'image_name', 'problem_statement'];
  const data = [
    ...names.map((name) => ({ name, data: rows.map((r) => r[name] as string), type: 'STRING' as const })),
    { name: 'FAIL_TO_PASS', data: rows.map((r) => r.FAIL_TO_PASS) },
    { name: 'PASS_TO_PASS', data: rows.map((r) => r.PASS_TO_PASS) },
  ]
    .filter((c) => columns[c.name] !== null)
    .map((c) => (columns[c.name] ? { ...c, data: columns[c.name]!, type: undefined } : c));
  // biome-ignore lint/suspicious/noExplicitAny: the writer infers column types from the data
  return new Uint8Array(parquetWriteBuffer({ columnData: data as any }));
}

const good = parquet([row(1), row(2)]);
/** The metadata bytes of a whole parquet file overwritten: its footer's length still fits the file. */
function scrambled(file: Uint8Array): Uint8Array {
  const out = file.slice();
  const length = new DataView(out.buffer).getUint32(out.length - 8, true);
  for (let i = out.length - 8 - length; i < out.length - 8; i++) out[i] = (i * 131) % 256;
  return out;
}
const files: Record<string, string | Uint8Array> = {
  'empty.jsonl': '',
  'blank.jsonl': '\n\n  \n',
  'fake.parquet': Uint8Array.from({ length: 3000 }, (_, i) => (i * 7919 + 13) % 251),
  'zero-footer.parquet': Buffer.from('PAR1\0\0\0\0PAR1', 'latin1'),
  'truncated.parquet': good.subarray(0, Math.floor(good.length / 2)),
  'scrambled.parquet': scrambled(good),
  'rows.jsonl.gz': gzipSync(jsonl([row(1)])),
  'array.json': JSON.stringify([row(1)]),
  'binary.jsonl': Uint8Array.from({ length: 512 }, (_, i) => (i * 31) % 256),
  'notes.csv': 'instance_id,repo\nx,y\n',
  'rows-as.parquet': jsonl([row(1)]),
  'f2p-string.jsonl': jsonl([row(1), row(2, { FAIL_TO_PASS: 'tests/test_a.py::test_2' })]),
  'f2p-number.parquet': parquet([row(1)], { FAIL_TO_PASS: [7] }),
  'no-image.parquet': parquet([row(1)], { image_name: null }),
  'lowercase.jsonl': jsonl([
    Object.fromEntries(
      Object.entries(row(1)).map(([k, v]) => [k === 'FAIL_TO_PASS' ? 'fail_to_pass' : k, v]),
    ),
  ]),
  'duplicates.jsonl': jsonl([row(1), row(2), row(1)]),
  'not-object.jsonl': `${JSON.stringify(row(1))}\n[1, 2]\n`,
  'bad-line.jsonl': `${JSON.stringify(row(1))}\n{"instance_id": \n`,
};
for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, name), content);
mkdirSync(join(dir, 'folder'));
writeFileSync(join(dir, 'folder', 'rows.parquet'), good);

async function validate(file: string) {
  const io = memoryIo({ cwd: dir });
  const code = await main(['validate', file], io);
  return { code, ...io.output };
}

describe('vime-swe validate: a dataset file that cannot be used', () => {
  it.each([
    ['missing.jsonl', /^missing\.jsonl: does not exist; give a SWE-smith \.jsonl or \.parquet file$/],
    ['duplicate.jsonl', /^duplicate\.jsonl: does not exist; did you mean "duplicates\.jsonl"\?/],
    [
      'folder',
      /^folder: is a folder, not a dataset file; give one of its files, e\.g\. folder\/rows\.parquet$/,
    ],
    ['empty.jsonl', /^empty\.jsonl: is empty; /],
    ['blank.jsonl', /^blank\.jsonl: is empty; /],
    ['fake.parquet', /^fake\.parquet: is not a parquet file \(it does not start with PAR1\); /],
    [
      'zero-footer.parquet',
      /^zero-footer\.parquet: is a damaged parquet file: its footer gives the metadata as 0 bytes in a file of 12; download or export it again/,
    ],
    [
      'scrambled.parquet',
      /^scrambled\.parquet: is a damaged parquet file: its metadata \(the schema and row groups\) cannot be read.*; download or export it again$/,
    ],
    ['truncated.parquet', /^truncated\.parquet: is a truncated parquet file .*; download or export it again/],
    [
      'rows.jsonl.gz',
      /^rows\.jsonl\.gz: is gzip-compressed; decompress it first: gunzip -k rows\.jsonl\.gz$/,
    ],
    ['array.json', /^array\.json: is a JSON array, not JSON Lines; write one row per line, e\.g\. jq -c/],
    ['binary.jsonl', /^binary\.jsonl: is neither JSON Lines nor parquet \(it holds binary data\)/],
    ['notes.csv', /^notes\.csv: is not JSON Lines \(line 1: not valid JSON/],
    [
      'rows-as.parquet',
      /^rows-as\.parquet: is not a parquet file .*; it holds JSON lines: rename it to \.jsonl$/,
    ],
    [
      'no-image.parquet',
      /^no-image\.parquet: has no column image_name; add the column image_name \(its columns: /,
    ],
  ])('%s', async (file, message) => {
    const r = await validate(file);
    expect(r.code, r.stderr).toBe(EXIT.usage);
    expect(r.stderr.split('\n').filter(Boolean)).toHaveLength(1);
    expect(r.stderr.slice('vime-swe: '.length).trimEnd()).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at |TypeError|Cannot read properties/);
    expect(r.stdout).toBe('');
  });
});

describe('vime-swe validate: rows with problems', () => {
  it.each([
    [
      'f2p-string.jsonl',
      `row 2 (instance pallets__markupsafe.620c06c9.lm_rewrite__abc2): column FAIL_TO_PASS: expected a list of test names, got string "tests/test_a.py::test_2"`,
    ],
    [
      'f2p-number.parquet',
      `row 1 (instance ${ID}): column FAIL_TO_PASS: expected a list of test names, got number 7`,
    ],
    [
      'lowercase.jsonl',
      `row 1 (instance ${ID}): column FAIL_TO_PASS: is missing (the row has "fail_to_pass"); rename "fail_to_pass" to FAIL_TO_PASS`,
    ],
    [
      'duplicates.jsonl',
      `row 3 (instance ${ID}): column instance_id: duplicates row 1; keep one of the two rows`,
    ],
    ['not-object.jsonl', 'row 2: expected an object with the SWE-smith columns, got array(2)'],
    ['bad-line.jsonl', 'row 2: is not valid JSON'],
  ])('%s', async (file, line) => {
    const r = await validate(file);
    expect(r.code, r.stderr).toBe(EXIT.usage);
    expect(r.stderr).toContain(`vime-swe: ${file}: ${line}`);
    expect(r.stderr).not.toMatch(/\n\s+at |TypeError/);
    // The table on stdout lists the problem too, before anything is graded.
    expect(r.stdout).toMatch(
      new RegExp(`^${file.replace('.', '\\.')}: 1 problem\\nrow +instance +column +problem +fix\\n`),
    );
    expect(r.stdout).not.toMatch(/rows pass the baseline/);
  });

  it('lists every problem of the file in one table, not only the first', async () => {
    const rows = [
      row(1),
      row(2, { FAIL_TO_PASS: 'x' }),
      row(3, { image_name: 5, PASS_TO_PASS: [1] }),
      { repo: 'swesmith/x' },
      row(1),
    ];
    writeFileSync(join(dir, 'many.jsonl'), jsonl(rows));
    const r = await validate('many.jsonl');
    expect(r.code).toBe(EXIT.usage);
    const table = r.stdout.trimEnd().split('\n');
    expect(table[0]).toBe('many.jsonl: 9 problems');
    expect(table.slice(2).map((l) => l.split(/ {2,}/).slice(0, 3))).toEqual([
      ['2', 'pallets__markupsafe.620c06c9.lm_rewrite__abc2', 'FAIL_TO_PASS'],
      ['3', 'pallets__markupsafe.620c06c9.lm_rewrite__abc3', 'PASS_TO_PASS[0]'],
      ['3', 'pallets__markupsafe.620c06c9.lm_rewrite__abc3', 'image_name'],
      ['4', '-', 'instance_id'],
      ['4', '-', 'patch'],
      ['4', '-', 'FAIL_TO_PASS'],
      ['4', '-', 'PASS_TO_PASS'],
      ['4', '-', 'image_name'],
      ['5', ID, 'instance_id'],
    ]);
    expect(r.stderr).toMatch(
      /^vime-swe: many\.jsonl: row 2 .*\(and 8 more: the table above lists every one; nothing was graded\)\n$/,
    );
  });
});
