/**
 * `keys.log`: the keys of segments that GC deleted, so `has(key)` still knows every key ever appended.
 * The consumer appends one frame per deleted segment (flushed before the delete) and, once the log
 * has many frames, compacts it into a few deduplicated ones; creating and compacting it replace the
 * whole file (write, flush, rename), so it is never empty or half-written.
 */
import type { FileHandle } from 'node:fs/promises';
import { open, readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { syncDir } from '../utils/files.js';
import { ioError, listSegments, readIfExists, replaceQueueFile, writeAll } from './files.js';
import {
  corrupt,
  decodeKeyPairs,
  encodeKeyPairs,
  FILE_HEADER_BYTES,
  fileHeader,
  findNextFrame,
  frame,
  KEYS_FILE,
  KEYS_MAGIC,
  plausibleKeys,
  readFileHeader,
  readRecordHeader,
  scanFrames,
  segmentName,
} from './format.js';

/** Compact once the log holds this many frames. */
const COMPACT_AT_FRAMES = 64;
/** Pairs per frame of a compacted log. */
const PAIRS_PER_FRAME = 65_536;

export interface KeysScan {
  pairs: Array<[string, number]>;
  frames: number;
  /** End of the last valid frame; bytes after it are a torn tail. */
  end: number;
  size: number;
}

/**
 * Read a keys log. A torn tail (a GC killed while appending; that segment was not deleted, so its keys
 * are still there) is ignored; damage before the tail is `queue_corrupt`, since the keys in it would be
 * forgotten and appended again.
 */
export function scanKeys(buf: Buffer, path: string): KeysScan {
  // Cut short while being created in place (as older versions did, e.g. on a full disk): no keys yet.
  if (buf.length < FILE_HEADER_BYTES && fileHeader(KEYS_MAGIC, 0).subarray(0, buf.length).equals(buf)) {
    return { pairs: [], frames: 0, end: 0, size: buf.length };
  }
  readFileHeader(buf, KEYS_MAGIC, path);
  const pairs: Array<[string, number]> = [];
  let frames = 0;
  const { end, stop } = scanFrames(buf, FILE_HEADER_BYTES, (payload, offset) => {
    for (const pair of decodeKeyPairs(payload, `${path}@${offset}`)) pairs.push(pair);
    frames++;
    return true;
  });
  if (stop !== 'end') {
    const next = findNextFrame(buf, end + 1, plausibleKeys);
    if (next !== undefined) {
      throw corrupt(path, end, `invalid keys entry followed by a valid one at byte ${next}`);
    }
  }
  return { pairs, frames, end, size: buf.length };
}

/** Every key in `dir`'s keys log (none when there is no log). */
export async function loadKeys(dir: string): Promise<Array<[string, number]>> {
  const path = join(dir, KEYS_FILE);
  const buf = await readIfExists(path);
  return buf ? scanKeys(buf, path).pairs : [];
}

const encodeFrames = (pairs: ReadonlyArray<[string, number]>): Buffer[] => {
  const out: Buffer[] = [];
  for (let i = 0; i < pairs.length; i += PAIRS_PER_FRAME) {
    out.push(frame(encodeKeyPairs(pairs.slice(i, i + PAIRS_PER_FRAME))));
  }
  return out;
};

/** The consumer's handle on the keys log. */
export class KeysLog {
  readonly #path: string;
  #handle: FileHandle;
  #size: number;
  #frames: number;

  private constructor(path: string, handle: FileHandle, size: number, frames: number) {
    this.#path = path;
    this.#handle = handle;
    this.#size = size;
    this.#frames = frames;
  }

  /** Open (creating it whole if missing) and cut off a torn tail. */
  static async open(dir: string): Promise<KeysLog> {
    const path = join(dir, KEYS_FILE);
    const existing = await readIfExists(path);
    if (!existing || scanKeys(existing, path).end === 0) {
      const handle = await replaceQueueFile(path, (h) => writeAll(h, fileHeader(KEYS_MAGIC, 0), 0), {
        keepOpen: true,
      });
      return new KeysLog(path, handle!, FILE_HEADER_BYTES, 0);
    }
    const scan = scanKeys(existing, path);
    const handle = await open(path, 'r+');
    if (scan.end < scan.size) {
      try {
        await handle.truncate(scan.end);
        await handle.sync();
      } catch (error) {
        await handle.close();
        throw ioError(`cutting the torn tail of ${path}`, error);
      }
    }
    return new KeysLog(path, handle, scan.end, scan.frames);
  }

  /** Append the keys of one segment about to be deleted, flushed before this resolves. */
  async append(pairs: ReadonlyArray<[string, number]>): Promise<void> {
    if (pairs.length === 0) return;
    if (this.#frames + 1 >= COMPACT_AT_FRAMES) return this.#compact(pairs);
    const bytes = Buffer.concat(encodeFrames(pairs));
    try {
      await writeAll(this.#handle, bytes, this.#size);
      await this.#handle.sync();
    } catch (error) {
      // Cut back what was written (if that fails too, the next open cuts the torn tail).
      await this.#handle.truncate(this.#size).catch(() => {});
      throw ioError(`appending to ${this.#path}`, error);
    }
    this.#size += bytes.length;
    this.#frames++;
  }

  /** Rewrite the log as few deduplicated frames, with `more` added. */
  async #compact(more: ReadonlyArray<[string, number]>): Promise<void> {
    const current = await readFile(this.#path);
    const seen = new Map<string, number>();
    for (const [key, seq] of [...scanKeys(current, this.#path).pairs, ...more]) {
      if (!seen.has(key)) seen.set(key, seq);
    }
    const pairs = [...seen].sort((a, b) => a[1] - b[1]);
    const frames = encodeFrames(pairs);
    const bytes = Buffer.concat([fileHeader(KEYS_MAGIC, 0), ...frames]);
    const handle = await replaceQueueFile(this.#path, (h) => writeAll(h, bytes, 0), { keepOpen: true });
    await this.#handle.close();
    this.#handle = handle!;
    this.#size = bytes.length;
    this.#frames = frames.length;
  }

  async close(): Promise<void> {
    await this.#handle.close();
  }
}

/**
 * GC: delete the segments whose records are all before `committed`, each only after its keys are in
 * the keys log (flushed). Returns the deleted files.
 */
export async function collectSegments(
  dir: string,
  committed: number,
  keysLog: () => Promise<KeysLog>,
  collected: (e: { segment: string; records: number }) => void,
): Promise<string[]> {
  const bases = await listSegments(dir);
  const removed: string[] = [];
  try {
    for (let i = 0; i + 1 < bases.length && bases[i + 1]! <= committed; i++) {
      const path = join(dir, segmentName(bases[i]!));
      const buf = await readFile(path);
      const pairs: Array<[string, number]> = [];
      const { end, stop } = scanFrames(buf, FILE_HEADER_BYTES, (payload, at) => {
        const { header } = readRecordHeader(payload, `${path}@${at}`);
        if (header.lost === undefined) pairs.push([header.key, header.seq]);
        return true;
      });
      // Its keys would be forgotten with it.
      if (stop !== 'end') throw corrupt(path, end, 'invalid frame in a segment about to be collected');
      await (await keysLog()).append(pairs);
      await unlink(path);
      removed.push(path);
      collected({ segment: path, records: pairs.length });
    }
    if (removed.length > 0) await syncDir(dir);
  } catch (error) {
    throw ioError('collecting committed segments', error);
  }
  return removed;
}
