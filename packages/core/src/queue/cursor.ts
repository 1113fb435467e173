/**
 * The consumer cursor (`cursor.json`): where the committed position is on disk, checked on open so an
 * offset that is not a frame boundary is `queue_corrupt`, never a silent read of nothing.
 */
import type { FileHandle } from 'node:fs/promises';
import { open, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { listSegments, readIfExists, replaceQueueFile, writeAll } from './files.js';
import {
  CURSOR_FILE,
  type Cursor,
  corrupt,
  FILE_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  MAX_PAYLOAD_BYTES,
  parseCursor,
  QueueError,
  readFileHeader,
  readRecordHeader,
  SEGMENT_MAGIC,
  scanFrames,
  segmentName,
} from './format.js';

/** A byte position: a segment (by its first seq) and an offset in it. */
export interface Position {
  segment: number;
  offset: number;
}

/** An open segment and the next record to read from it. */
export interface ReadHead {
  base: number;
  handle: FileHandle;
  offset: number;
  seq: number;
}

export async function readCursor(dir: string): Promise<Cursor | undefined> {
  const path = join(dir, CURSOR_FILE);
  const raw = await readIfExists(path);
  return raw ? parseCursor(raw, path) : undefined;
}

export async function writeCursor(dir: string, cursor: Cursor): Promise<void> {
  await replaceQueueFile(join(dir, CURSOR_FILE), (h) =>
    writeAll(h, Buffer.from(`${JSON.stringify(cursor)}\n`), 0),
  );
}

/**
 * Open a read head at seq `target` (the committed position), checking the saved cursor against the
 * frames. Undefined when the queue has no segment yet. `before` is the start of the frame of seq
 * `target − 1` when the check found it.
 */
export async function openReadHead(
  dir: string,
  cursor: Cursor | undefined,
  target: number,
): Promise<{ head: ReadHead; before: Position | undefined } | undefined> {
  const bases = await listSegments(dir);
  if (bases.length === 0) return undefined;
  if (target < bases[0]!) {
    throw new QueueError(
      `the consumer cursor is at seq ${target} but the queue's first record is ${bases[0]}; records ${target}..${bases[0]! - 1} were deleted`,
      { code: 'queue_corrupt' },
    );
  }
  const base = bases.filter((b) => b <= target).at(-1)!;
  const path = join(dir, segmentName(base));
  const handle = await open(path, 'r');
  try {
    const head = Buffer.alloc(FILE_HEADER_BYTES);
    const { bytesRead } = await handle.read(head, 0, FILE_HEADER_BYTES, 0);
    if (bytesRead < FILE_HEADER_BYTES && base === bases.at(-1)) {
      // Created in place by an older producer that is writing (or died writing) its header.
      await handle.close();
      return undefined;
    }
    readFileHeader(head.subarray(0, bytesRead), SEGMENT_MAGIC, path);
    let offset = FILE_HEADER_BYTES;
    let before: Position | undefined;
    if (cursor && cursor.next === target && cursor.segment === base) {
      before = await checkCursor(handle, path, cursor, base);
      offset = cursor.offset;
    } else {
      if (cursor && cursor.next === target && bases.includes(cursor.segment)) {
        // The cursor is at the end of the previous segment: check it there all the same.
        const other = join(dir, segmentName(cursor.segment));
        const h = await open(other, 'r');
        await checkCursor(h, other, cursor, cursor.segment).finally(() => h.close());
      }
      if (target > base) offset = await endOf(path, target - 1);
    }
    return { head: { base, handle, offset, seq: target }, before };
  } catch (error) {
    await handle.close();
    throw error;
  }
}

/**
 * Check that the cursor's offset is the end of the frame holding seq `next − 1` (in O(1) with the
 * version-2 `last` field, else by walking the segment). Returns that frame's start when known.
 */
async function checkCursor(
  handle: FileHandle,
  path: string,
  cursor: Cursor,
  base: number,
): Promise<Position | undefined> {
  const bad = (why: string): never => {
    throw corrupt(path, cursor.offset, `the consumer cursor offset is not a frame boundary (${why})`);
  };
  if (cursor.next === base) {
    if (cursor.offset !== FILE_HEADER_BYTES) bad(`seq ${base} is the first in its segment`);
    return undefined;
  }
  const last = cursor.version === 2 ? cursor.last : undefined;
  if (last === undefined) {
    const end = await endOf(path, cursor.next - 1);
    if (end !== cursor.offset) bad(`seq ${cursor.next - 1} ends at byte ${end}`);
    return undefined;
  }
  const frameHead = Buffer.alloc(FRAME_HEADER_BYTES);
  await handle.read(frameHead, 0, FRAME_HEADER_BYTES, last);
  const length = frameHead.readUInt32LE(0);
  if (length === 0 || length > MAX_PAYLOAD_BYTES || last + FRAME_HEADER_BYTES + length !== cursor.offset) {
    bad(`the frame at byte ${last} does not end there`);
  }
  const buf = Buffer.alloc(FRAME_HEADER_BYTES + length);
  const { bytesRead } = await handle.read(buf, 0, buf.length, last);
  let seq: number | undefined;
  scanFrames(buf.subarray(0, bytesRead), 0, (payload) => {
    seq = readRecordHeader(payload, `${path}@${last}`).header.seq;
    return false;
  });
  if (seq !== cursor.next - 1) bad(`byte ${last} is not the start of seq ${cursor.next - 1}`);
  return { segment: base, offset: last };
}

/** Walk a segment's frames to the end of the one holding `seq`. */
async function endOf(path: string, seq: number): Promise<number> {
  const buf = await readFile(path);
  let found: number | undefined;
  scanFrames(buf, FILE_HEADER_BYTES, (payload, at, end) => {
    if (readRecordHeader(payload, `${path}@${at}`).header.seq !== seq) return true;
    found = end;
    return false;
  });
  if (found === undefined) throw corrupt(path, undefined, `no record ${seq} for the consumer cursor`);
  return found;
}
