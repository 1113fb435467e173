import { type FileHandle, mkdir, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { ConfigError } from '../errors.js';

/** Failures that say the named path itself is wrong (missing, a directory, not writable), not the disk. */
const PATH_CODES = new Set([
  'ENOENT',
  'ENOTDIR',
  'EISDIR',
  'EEXIST',
  'EACCES',
  'EPERM',
  'EROFS',
  'ELOOP',
  'ENAMETOOLONG',
]);

/**
 * A filesystem failure on a path the caller named, as a `ConfigError` naming the field, the path and the
 * cause (`--token-file tok: cannot read it: ENOENT (no such file or directory)`). Failures of the disk
 * itself (ENOSPC, EIO) are returned unchanged.
 */
export function pathError(error: unknown, field: string, path: string, action: string): unknown {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  if (typeof code !== 'string' || !PATH_CODES.has(code)) return error;
  const detail = (error as Error).message.replace(/^[A-Z]+: /, '').replace(/, \w+(?: '.*')?$/s, '');
  return new ConfigError(`${field} ${path}: cannot ${action}: ${code} (${detail})`, {
    cause: error,
    data: { field, path, code },
  });
}

/** Options of reading a path a caller gave. */
export interface CallerPathOptions {
  /** Directory a relative path is resolved against (default: the process's). Messages show the path as given. */
  cwd?: string | undefined;
}

/** Read a UTF-8 text file the caller named; a missing, unreadable or directory path is a `ConfigError`. */
export async function readTextFile(
  path: string,
  field: string,
  options: CallerPathOptions = {},
): Promise<string> {
  try {
    return await readFile(resolve(options.cwd ?? '.', path), 'utf8');
  } catch (error) {
    throw pathError(error, field, path, 'read it');
  }
}

/**
 * Make sure `path` is a directory, creating it and its missing parents. Unlike `mkdir -p` in Node (which
 * retries forever where `mkdir` answers ENOENT under an existing parent, as in `/proc`), each missing
 * level is created once, and a path that cannot be a directory is a `ConfigError` naming `field`.
 */
export async function ensureDirectory(
  path: string,
  field: string,
  options: CallerPathOptions = {},
): Promise<void> {
  const missing: string[] = [];
  let dir = resolve(options.cwd ?? '.', path);
  for (;;) {
    const found = await stat(dir).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT' || error.code === 'ENOTDIR') return undefined;
      throw pathError(error, field, path, `use ${dir}`);
    });
    if (found) {
      if (!found.isDirectory()) {
        throw new ConfigError(`${field} ${path}: ${dir} is a file, not a directory; name a directory`, {
          data: { field, path },
        });
      }
      break;
    }
    missing.unshift(dir);
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  for (const level of missing) {
    try {
      await mkdir(level);
    } catch (error) {
      // Another process may have made it meanwhile.
      if ((error as NodeJS.ErrnoException).code === 'EEXIST' && (await stat(level)).isDirectory()) continue;
      throw pathError(error, field, path, `create ${level}`);
    }
  }
}

/** Flush a directory, so a file created, renamed or deleted in it stays so after a power loss. */
export async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Open `<path>.tmp`, let `fill` write it, flush it, and rename it over `path` (then flush the
 * directory): readers see the old file or the new one, never a mix, whatever fails or crashes. On
 * failure the temporary file is removed. Returns the handle, still open, when `keepOpen`.
 */
export async function replaceFile(
  path: string,
  fill: (handle: FileHandle) => Promise<void>,
  options: { keepOpen?: boolean | undefined } = {},
): Promise<FileHandle | undefined> {
  const tmp = `${path}.tmp`;
  let handle: FileHandle | undefined;
  try {
    handle = await open(tmp, 'w');
    await fill(handle);
    await handle.sync();
    await rename(tmp, path);
    await syncDir(join(path, '..'));
  } catch (error) {
    await handle?.close().catch(() => {});
    await unlink(tmp).catch(() => {});
    throw error;
  }
  if (options.keepOpen) return handle;
  await handle.close();
  return undefined;
}

/**
 * Write a whole file so that a reader, or a process killed at any moment, sees either the old content or
 * the new, never an empty or partial file (`replaceFile` with the data).
 */
export async function writeFileAtomic(path: string, data: string | Uint8Array): Promise<void> {
  await replaceFile(path, (handle) => handle.writeFile(data));
}
