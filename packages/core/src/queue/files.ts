/** File-system steps the queue's writer, reader and repair share. */
import type { FileHandle } from 'node:fs/promises';
import { readdir, readFile } from 'node:fs/promises';
import { replaceFile } from '../utils/files.js';
import { QueueError, SEGMENT_NAME } from './format.js';

/** First seqs of the segments in `dir`, ascending. */
export async function listSegments(dir: string): Promise<number[]> {
  const bases: number[] = [];
  for (const name of await readdir(dir)) {
    const m = SEGMENT_NAME.exec(name);
    if (m) bases.push(Number(m[1]));
  }
  return bases.sort((a, b) => a - b);
}

export const readIfExists = (path: string): Promise<Buffer | undefined> =>
  readFile(path).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });

const FULL = new Set(['ENOSPC', 'EDQUOT']);

/**
 * A failed file operation as a `QueueError`: a full disk (or quota) gets code `queue_disk_full` and says
 * that the queue is intact, anything else `queue_error`.
 */
export function ioError(what: string, error: unknown): QueueError {
  if (error instanceof QueueError) return error;
  const code = (error as NodeJS.ErrnoException).code;
  if (code !== undefined && FULL.has(code)) {
    return new QueueError(
      `${what}: the disk is full (${code}); nothing partial was kept and every acknowledged record is intact. Free space and retry; the queue opens as before`,
      { code: 'queue_disk_full', cause: error },
    );
  }
  return new QueueError(`${what}: ${(error as Error).message}`, { cause: error });
}

/** `replaceFile` with failures as `QueueError`s (a full disk says the queue is intact). */
export async function replaceQueueFile(
  path: string,
  fill: (handle: FileHandle) => Promise<void>,
  options: { keepOpen?: boolean | undefined } = {},
): Promise<FileHandle | undefined> {
  try {
    return await replaceFile(path, fill, options);
  } catch (error) {
    throw ioError(`writing ${path}`, error);
  }
}

/** Write all of `data` at `position` (a write may be short, e.g. on a nearly full disk). */
export async function writeAll(handle: FileHandle, data: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await handle.write(data, done, data.length - done, position + done);
    done += bytesWritten;
  }
}
