/**
 * A dataset file as a user hands it over (SWE-smith rows in JSONL or parquet): read by what it holds,
 * whatever its name, and every problem said so the user can fix it: the file, the row and instance id,
 * the column, and the fix. A file that cannot be read at all is one `DatasetError`; its rows' problems
 * come back as `issues` (or, with `onInvalid: 'fatal'`, as a `DatasetError` listing them all).
 */
import { open, readdir, readFile, stat } from 'node:fs/promises';
import { basename, dirname, extname } from 'node:path';
import { ConfigError, errorMarker, hasErrorMarker, type VimeErrorOptions } from '@vime/core';
import { closest } from '@vime/core/utils';
import {
  type LoadOptions,
  type LoadResult,
  REQUIRED_COLUMNS,
  type RowIssue,
  rowIssueLine,
  validateRows,
} from './dataset-rows.js';

/** One problem of a dataset file; `row` absent for the file as a whole. */
export interface DatasetProblem extends Partial<RowIssue> {
  /** The file as the user named it. */
  file: string;
  message: string;
  fix: string;
}

const datasetMarker = errorMarker('DatasetError');

/** A dataset file a run cannot use, with every problem found (the message is the first, on one line). */
export class DatasetError extends ConfigError {
  readonly [datasetMarker] = true;
  readonly problems: DatasetProblem[];
  constructor(problems: DatasetProblem[], options: VimeErrorOptions & { more?: string | undefined } = {}) {
    const more =
      problems.length > 1 ? ` (and ${problems.length - 1} more: ${options.more ?? 'see `problems`'})` : '';
    super(`${problemLine(problems[0]!)}${more}`, { ...options, data: { problems } });
    this.problems = problems;
  }

  static override isInstance(value: unknown): value is DatasetError {
    return hasErrorMarker(value, datasetMarker);
  }
}

/** One problem as one line: `rows.jsonl: row 2 (instance …): column FAIL_TO_PASS: …; fix`. */
export function problemLine(p: DatasetProblem): string {
  if (p.row === undefined) return `${p.file}: ${p.message}; ${p.fix}`;
  return `${p.file}: ${rowIssueLine(p as RowIssue)}`;
}

const fileProblem = (file: string, message: string, fix: string) =>
  new DatasetError([{ file, message, fix }]);

/** A dataset file's format, told by its contents, not its name. */
export type DatasetFormat = 'jsonl' | 'parquet';

const HEAD_BYTES = 4096;

/** The file's first bytes, its last four and its size; problems that stop any reading are thrown. */
async function probe(path: string, shown: string): Promise<{ head: Buffer; tail: Buffer; size: number }> {
  let info: Awaited<ReturnType<typeof stat>>;
  try {
    info = await stat(path);
  } catch (error) {
    throw await missing(path, shown, error);
  }
  if (info.isDirectory()) {
    const inside = (await readdir(path).catch(() => [] as string[])).filter((f) =>
      /\.(jsonl|parquet)$/.test(f),
    );
    throw fileProblem(
      shown,
      'is a folder, not a dataset file',
      inside.length
        ? `give one of its files, e.g. ${shown.replace(/\/$/, '')}/${inside[0]}`
        : 'give the .jsonl or .parquet file of SWE-smith rows',
    );
  }
  const handle = await open(path, 'r').catch((error: NodeJS.ErrnoException) => {
    throw fileProblem(shown, `cannot be read (${error.code ?? error.message})`, 'check its permissions');
  });
  try {
    const head = Buffer.alloc(Math.min(HEAD_BYTES, info.size));
    await handle.read(head, 0, head.length, 0);
    const tail = Buffer.alloc(Math.min(4, info.size));
    await handle.read(tail, 0, tail.length, Math.max(0, info.size - 4));
    return { head, tail, size: info.size };
  } finally {
    await handle.close();
  }
}

/** A missing file, with the nearest name in its folder when one is a likely typo. */
async function missing(path: string, shown: string, error: unknown): Promise<DatasetError> {
  const code = (error as NodeJS.ErrnoException).code;
  if (code !== 'ENOENT' && code !== 'ENOTDIR')
    return fileProblem(shown, `cannot be read (${code ?? (error as Error).message})`, 'check the path');
  const siblings = await readdir(dirname(path)).catch(() => [] as string[]);
  const near = closest(basename(path), siblings);
  return fileProblem(
    shown,
    'does not exist',
    near
      ? `did you mean ${JSON.stringify(near)}? give a SWE-smith .jsonl or .parquet file`
      : 'give a SWE-smith .jsonl or .parquet file',
  );
}

/** What the first bytes say the file is; anything that is no dataset is thrown, with how to make it one. */
function formatOf(shown: string, head: Buffer, tail: Buffer, size: number): DatasetFormat {
  const ext = extname(shown).toLowerCase();
  if (size === 0 || (head.toString('utf8').trim() === '' && size <= HEAD_BYTES))
    throw fileProblem(
      shown,
      'is empty',
      'write one SWE-smith row per line (JSONL), or give the parquet file',
    );
  if (head.subarray(0, 4).toString('latin1') === 'PAR1') {
    if (tail.toString('latin1') !== 'PAR1' || size < 12)
      throw fileProblem(
        shown,
        'is a truncated parquet file (it starts with PAR1 but does not end with it)',
        'download or export it again: the copy stopped part way',
      );
    return 'parquet';
  }
  if (head[0] === 0x1f && head[1] === 0x8b)
    throw fileProblem(shown, 'is gzip-compressed', `decompress it first: gunzip -k ${shown}`);
  if (ext === '.parquet')
    throw fileProblem(
      shown,
      'is not a parquet file (it does not start with PAR1)',
      head.toString('utf8').trimStart().startsWith('{')
        ? 'it holds JSON lines: rename it to .jsonl'
        : 'give the parquet file as published (e.g. downloaded from the Hugging Face Hub)',
    );
  if (head.includes(0) || !isUtf8Prefix(head))
    throw fileProblem(
      shown,
      'is neither JSON Lines nor parquet (it holds binary data)',
      'give SWE-smith rows as .jsonl (one JSON object per line) or .parquet',
    );
  if (head.toString('utf8').trimStart().startsWith('['))
    throw fileProblem(
      shown,
      'is a JSON array, not JSON Lines',
      `write one row per line, e.g. jq -c '.[]' ${shown} > rows.jsonl`,
    );
  return 'jsonl';
}

/** Whether the bytes are UTF-8, allowing a character cut at the end of the sample. */
function isUtf8Prefix(bytes: Buffer): boolean {
  for (let cut = 0; cut < 4 && cut <= bytes.length; cut++) {
    try {
      new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, bytes.length - cut));
      return true;
    } catch {}
  }
  return false;
}

/** JSONL text to raw rows; lines that are not JSON are problems, and a file where no line is, one problem. */
function jsonlRows(
  text: string,
  shown: string,
): { raw: Array<{ row: number; value: unknown }>; bad: RowIssue[] } {
  const raw: Array<{ row: number; value: unknown }> = [];
  const bad: RowIssue[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (!line) continue;
    try {
      raw.push({ row: i + 1, value: JSON.parse(line) });
    } catch (error) {
      bad.push({
        row: i + 1,
        column: '(row)',
        field: '(row)',
        message: `is not valid JSON (${(error as Error).message})`,
        fix: 'write the row as one JSON object on one line',
      });
    }
  }
  if (raw.length === 0 && bad.length > 0)
    throw fileProblem(
      shown,
      `is not JSON Lines (line ${bad[0]!.row}: ${bad[0]!.message.replace(/^is /, '')})`,
      'give SWE-smith rows as .jsonl (one JSON object per line) or .parquet',
    );
  return { raw, bad };
}

/** Parse JSONL text (one row per line; blank lines ignored). */
export function parseJsonlRows(text: string, options: LoadOptions = {}, shown = 'rows.jsonl'): LoadResult {
  const { raw, bad } = jsonlRows(text, shown);
  return finish(shown, validateRows(raw, options, bad), options);
}

/** Parquet rows as objects; a damaged footer or unreadable column data is one problem of the file. */
async function parquetRows(path: string, shown: string, signal?: AbortSignal): Promise<unknown[]> {
  const { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects, parquetSchema } = await import(
    'hyparquet'
  );
  const { compressors } = await import('hyparquet-compressors');
  const file = await asyncBufferFromFile(path);
  // The footer: the metadata's length, then PAR1. A length that cannot be right is said as such.
  const tail = new DataView(await file.slice(file.byteLength - 8, file.byteLength));
  const metaLength = tail.getUint32(0, true);
  if (metaLength === 0 || metaLength > file.byteLength - 12)
    throw fileProblem(
      shown,
      `is a damaged parquet file: its footer gives the metadata as ${metaLength} bytes in a file of ${file.byteLength}`,
      'download or export it again: the file is truncated or was not written completely',
    );
  let metadata: Awaited<ReturnType<typeof parquetMetadataAsync>>;
  try {
    metadata = await parquetMetadataAsync(file);
    // A footer too damaged to describe its columns fails here rather than in the middle of the read.
    parquetSchema(metadata);
  } catch (error) {
    // A library's own words help only when it says what it found (not a TypeError from inside it).
    const why = error instanceof TypeError ? '' : ` (${(error as Error).message})`;
    throw fileProblem(
      shown,
      `is a damaged parquet file: its metadata (the schema and row groups) cannot be read${why}`,
      'download or export it again',
    );
  }
  const columns = new Set(metadata.schema.slice(1).map((s) => s.name));
  const absent = REQUIRED_COLUMNS.filter((c) => !columns.has(c));
  if (absent.length > 0) {
    throw new DatasetError(
      absent.map((column) => {
        const near = closest(column, [...columns]);
        return {
          file: shown,
          column,
          message: `has no column ${column}${near ? ` (it has ${JSON.stringify(near)})` : ''}`,
          fix: near
            ? `rename ${JSON.stringify(near)} to ${column}`
            : `add the column ${column} (its columns: ${[...columns].join(', ')})`,
        };
      }),
      { more: 'each is listed in `problems`' },
    );
  }
  signal?.throwIfAborted();
  try {
    return await parquetReadObjects({ file, metadata, compressors });
  } catch (error) {
    const why = error instanceof TypeError ? '' : ` (${(error as Error).message})`;
    throw fileProblem(
      shown,
      `is a damaged parquet file: its column data cannot be read${why}`,
      'download or export it again',
    );
  }
}

/** With `onInvalid: 'fatal'`, every row problem at once; else the result as it is. */
function finish(shown: string, result: LoadResult, options: LoadOptions): LoadResult {
  if (options.onInvalid === 'fatal' && result.issues.length > 0)
    throw new DatasetError(
      result.issues.map((i) => ({ ...i, file: shown })),
      { more: 'fix them, or load with onInvalid: skip' },
    );
  return result;
}

/**
 * Load SWE-smith rows from a dataset file, JSONL or parquet by what it holds. `shown` is the name the user
 * gave (for messages; default the path).
 */
export async function loadDataset(
  path: string,
  options: LoadOptions & { shown?: string | undefined } = {},
): Promise<LoadResult & { format: DatasetFormat }> {
  const shown = options.shown ?? path;
  const { head, tail, size } = await probe(path, shown);
  const format = formatOf(shown, head, tail, size);
  options.signal?.throwIfAborted();
  if (format === 'parquet') {
    const objects = await parquetRows(path, shown, options.signal);
    options.signal?.throwIfAborted();
    const raw = objects.map((value, i) => ({ row: i + 1, value }));
    return { ...finish(shown, validateRows(raw, options), options), format };
  }
  const text = await readFile(path, { encoding: 'utf8', signal: options.signal });
  return { ...parseJsonlRows(text, options, shown), format };
}

/** Load SWE-smith rows from a JSONL file. */
export function loadJsonl(path: string, options: LoadOptions = {}): Promise<LoadResult> {
  return loadDataset(path, options);
}

/** Load SWE-smith rows from a parquet file (as published on the Hugging Face Hub). */
export function loadParquet(path: string, options: LoadOptions = {}): Promise<LoadResult> {
  return loadDataset(path, options);
}
