/**
 * Checking SWE-smith rows one by one: every problem of a row names its row, its instance id, the column
 * and what to write there instead, so a user fixes the file without reading code.
 */
import { describeValue, formatPath } from '@vime/core';
import { closest } from '@vime/core/utils';
import type { z } from 'zod';
import { type SweSmithRow, SweSmithRowSchema, selectRows } from './dataset.js';

/** A row that failed validation: where it was, which column, why, and the fix. */
export interface RowIssue {
  /** 1-based row number (line number for JSONL). */
  row: number;
  /** The column (`FAIL_TO_PASS`), or `(row)` when the row as a whole is wrong. */
  column: string;
  /** Where in the row, for values inside a column (`FAIL_TO_PASS[2]`); else the column. */
  field: string;
  /** What is wrong, with the value found. */
  message: string;
  /** What to do about it. */
  fix: string;
  instanceId?: string | undefined;
}

/** Options of loading a dataset: what a malformed row does, and which rows to keep. */
export interface LoadOptions {
  /** `skip` (default) reports malformed rows in `issues` and keeps the rest; `fatal` throws on the first. */
  onInvalid?: 'skip' | 'fatal' | undefined;
  /** Keep rows whose `repo` contains any of these (case-insensitive substring). */
  repos?: readonly string[] | undefined;
  /** At most this many rows per `repo` (taken after shuffling). */
  perRepo?: number | undefined;
  /** At most this many rows overall. */
  limit?: number | undefined;
  /** Shuffle with this seed before capping (deterministic; same seed, same order). */
  seed?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** The rows loaded and the rows that failed validation. */
export interface LoadResult {
  rows: SweSmithRow[];
  issues: RowIssue[];
}

const TEST_LIST = {
  expected: 'a list of test names',
  fix: 'write it as a list of strings (parquet list<string>, or a JSON array in JSONL), e.g. ["tests/test_a.py::test_one"]',
};
const OPTIONAL_TEXT = { expected: 'text or null', fix: 'write a string, or null' };

/** What each column holds, for messages: the type expected and how to write it. */
const COLUMNS: Record<string, { expected: string; fix: string }> = {
  instance_id: {
    expected: 'an instance id like "<owner>__<repo>.<commit8>.<bug>"',
    fix: 'set SWE-smith\'s instance id, e.g. "pallets__markupsafe.620c06c9.lm_rewrite__abc123"',
  },
  repo: {
    expected: 'the repository mirror name',
    fix: 'set the mirror, e.g. "swesmith/pallets__markupsafe.620c06c9"',
  },
  patch: { expected: 'the bug patch as text', fix: 'set the unified diff that introduces the bug' },
  FAIL_TO_PASS: TEST_LIST,
  PASS_TO_PASS: TEST_LIST,
  image_name: {
    expected: "the repository's Docker image name",
    fix: 'set the image, e.g. "swebench/swesmith.x86_64.pallets_1776_markupsafe.620c06c9"',
  },
  problem_statement: OPTIONAL_TEXT,
  base_commit: OPTIONAL_TEXT,
  created_at: OPTIONAL_TEXT,
  split: { expected: 'a split name or null', fix: 'write train, heldout or heldout_family, or null' },
  agent: {
    expected: 'an agent name or null',
    fix: 'write mini-swe-agent, claude-code, codex, qwen-code, pi, opencode or gemini-cli, or null',
  },
};

export const REQUIRED_COLUMNS = [
  'instance_id',
  'repo',
  'patch',
  'FAIL_TO_PASS',
  'PASS_TO_PASS',
  'image_name',
] as const;

/** The instance id of a raw row, when it has a usable one. */
export function instanceIdOf(value: unknown): string | undefined {
  const id =
    typeof value === 'object' && value !== null
      ? (value as { instance_id?: unknown }).instance_id
      : undefined;
  return typeof id === 'string' && id !== '' ? id : undefined;
}

/** One zod issue of a row, said in the row's terms: the column, what it should hold, what it holds. */
function issueOf(row: number, value: Record<string, unknown>, issue: z.core.$ZodIssue): RowIssue {
  const column = String(issue.path[0] ?? '(row)');
  const field = formatPath(issue.path) || '(row)';
  const spec = COLUMNS[column];
  const instanceId = instanceIdOf(value);
  const base = { row, column, field, instanceId };
  if (!(column in value)) {
    // A column spelled differently (`fail_to_pass`) is the likely cause: name it.
    const near = closest(
      column,
      Object.keys(value).filter((k) => !(k in COLUMNS)),
    );
    return {
      ...base,
      message: `is missing${near ? ` (the row has ${JSON.stringify(near)})` : ''}`,
      fix: near
        ? `rename ${JSON.stringify(near)} to ${column}`
        : `add it: ${spec?.expected ?? 'see the SWE-smith format'}`,
    };
  }
  const found = issue.path.reduce<unknown>((v, key) => (v as Record<PropertyKey, unknown>)?.[key], value);
  const expected = spec?.expected ?? issue.message;
  const got =
    issue.path.length > 1
      ? `but item ${issue.path.slice(1).map(String).join('.')} is ${describeValue(found)}`
      : `got ${describeValue(found)}`;
  const detail = issue.code === 'invalid_format' ? ` (${issue.message})` : '';
  return { ...base, message: `expected ${expected}, ${got}${detail}`, fix: spec?.fix ?? 'fix the value' };
}

/** Every problem of one raw row (one per column), or its parsed row. */
export function checkRow(row: number, value: unknown): { row: SweSmithRow } | { issues: RowIssue[] } {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return {
      issues: [
        {
          row,
          column: '(row)',
          field: '(row)',
          message: `expected an object with the SWE-smith columns, got ${describeValue(value)}`,
          fix: 'write one JSON object per line, e.g. {"instance_id": "…", "repo": "…", …}',
        },
      ],
    };
  }
  const parsed = SweSmithRowSchema.safeParse(value);
  if (parsed.success) return { row: parsed.data };
  const seen = new Set<string>();
  const issues: RowIssue[] = [];
  for (const issue of parsed.error.issues) {
    const found = issueOf(row, value as Record<string, unknown>, issue);
    if (seen.has(found.column)) continue; // one problem per column is enough to fix it
    seen.add(found.column);
    issues.push(found);
  }
  return { issues };
}

/** A later row with an instance id already seen: training would count that task twice. */
export function duplicateIssues(rows: ReadonlyArray<{ row: number; instanceId: string }>): RowIssue[] {
  const first = new Map<string, number>();
  const issues: RowIssue[] = [];
  for (const { row, instanceId } of rows) {
    const earlier = first.get(instanceId);
    if (earlier === undefined) {
      first.set(instanceId, row);
      continue;
    }
    issues.push({
      row,
      column: 'instance_id',
      field: 'instance_id',
      instanceId,
      message: `duplicates row ${earlier}`,
      fix: 'keep one of the two rows (or give this one its own instance id)',
    });
  }
  return issues;
}

/**
 * Check raw rows: the valid ones selected (`options`), every problem listed by row. Duplicate instance ids
 * are problems too; `onInvalid: 'fatal'` throws the first problem through `fail`.
 */
export function validateRows(
  raw: Iterable<{ row: number; value: unknown }>,
  options: LoadOptions,
  earlier: RowIssue[] = [],
): LoadResult {
  const checked: Array<{ row: number; parsed: SweSmithRow }> = [];
  const issues = [...earlier];
  for (const { row, value } of raw) {
    const result = checkRow(row, value);
    if ('row' in result) checked.push({ row, parsed: result.row });
    else issues.push(...result.issues);
  }
  const duplicates = duplicateIssues(checked.map((c) => ({ row: c.row, instanceId: c.parsed.instance_id })));
  issues.push(...duplicates);
  const dropped = new Set(duplicates.map((d) => d.row));
  const rows = checked.filter((c) => !dropped.has(c.row)).map((c) => c.parsed);
  issues.sort((a, b) => a.row - b.row);
  return { rows: selectRows(rows, options), issues };
}

/** One problem of a row as one line: row, instance, column, what is wrong and the fix. */
export function rowIssueLine(issue: RowIssue): string {
  const instance = issue.instanceId ? ` (instance ${issue.instanceId})` : '';
  const column = issue.column === '(row)' ? '' : ` column ${issue.column}:`;
  return `row ${issue.row}${instance}:${column} ${issue.message}; ${issue.fix}`;
}
