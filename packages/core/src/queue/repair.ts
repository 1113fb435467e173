/**
 * `SampleQueue.repair`: make a queue that opening refused (`queue_corrupt`) openable again without
 * dropping an intact record. Every damaged byte range is copied to `quarantine/<file>@<offset>.bin`
 * before the file is rewritten (write, flush, rename), and the records it held are replaced by
 * stand-ins (`lost` in the record header) so sequence numbers, the cursor and later segments stay
 * valid. Runs with both locks held (see `queue.ts`).
 */
import { mkdir, readdir, readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { encodeSamples } from '../codec.js';
import { listSegments, readIfExists, replaceQueueFile, writeAll } from './files.js';
import {
  CURSOR_FILE,
  type Cursor,
  encodeRecordHeader,
  FILE_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  fileHeader,
  findNextFrame,
  frameHeader,
  KEYS_FILE,
  KEYS_MAGIC,
  parseCursor,
  plausibleKeys,
  plausibleRecord,
  QUARANTINE_DIR,
  readRecordHeader,
  SEGMENT_MAGIC,
  scanFrames,
  segmentName,
} from './format.js';

/** What repairing a queue cut out and kept. */
export interface RepairReport {
  /** Damaged byte ranges, each copied to `quarantine/` (path relative to the queue) and cut out. */
  quarantined: Array<{
    file: string;
    offset: number;
    bytes: number;
    to: string;
    /** Sequence numbers of the records lost with it (first, last), when it held any. */
    lost: [number, number] | undefined;
  }>;
  /** Torn tails cut off (appends that were never acknowledged). */
  truncated: Array<{ file: string; bytes: number }>;
  /** Files rewritten. */
  rewritten: string[];
  /** The consumer cursor: unchanged, moved to a valid position, reset to the oldest record, or absent. */
  cursor: 'kept' | 'moved' | 'reset' | 'none';
  /** keys.log lost entries: keys of deleted segments that `has` no longer knows. */
  keysForgotten: boolean;
}

type Piece = { frame: Buffer } | { lost: [number, number]; to: string };

/** Stand-ins for records whose bytes are gone altogether (a file or whole frames cut out). */
const MISSING = '(missing)';

function seqOf(payload: Buffer): number | undefined {
  try {
    return readRecordHeader(payload, '').header.seq;
  } catch {
    return undefined;
  }
}

const EMPTY_BATCH = encodeSamples([]);

function standIn(seq: number, to: string): Buffer {
  const header = encodeRecordHeader({ seq, key: '', time: Date.now(), n: 0, lost: to });
  return Buffer.concat([frameHeader([header, EMPTY_BATCH]), header, EMPTY_BATCH]);
}

export async function repairQueue(dir: string): Promise<RepairReport> {
  const report: RepairReport = {
    quarantined: [],
    truncated: [],
    rewritten: [],
    cursor: 'none',
    keysForgotten: false,
  };
  for (const name of await readdir(dir)) {
    if (name.endsWith('.tmp')) await unlink(join(dir, name)).catch(() => {});
  }
  const quarantine = async (file: string, buf: Buffer, offset: number, end: number) => {
    await mkdir(join(dir, QUARANTINE_DIR), { recursive: true });
    const to = `${QUARANTINE_DIR}/${file}@${offset}.bin`;
    await replaceQueueFile(join(dir, to), (h) => writeAll(h, buf.subarray(offset, end), 0));
    return to;
  };

  const bases = await listSegments(dir);
  let expected = bases[0] ?? 1;
  for (const [i, base] of bases.entries()) {
    const name = segmentName(base);
    const path = join(dir, name);
    const buf = await readFile(path);
    const last = i === bases.length - 1;
    // Where the records of this segment must end: the next segment's first seq.
    const until = last ? undefined : bases[i + 1]!;
    const pieces: Piece[] = [];
    let changed = false;
    let pos = FILE_HEADER_BYTES;
    const header = fileHeader(SEGMENT_MAGIC, base);
    if (buf.length < FILE_HEADER_BYTES || !buf.subarray(0, FILE_HEADER_BYTES).equals(header)) {
      const to = await quarantine(name, buf, 0, Math.min(buf.length, FILE_HEADER_BYTES));
      report.quarantined.push({
        file: name,
        offset: 0,
        bytes: Math.min(buf.length, FILE_HEADER_BYTES),
        to,
        lost: undefined,
      });
      changed = true;
    }
    if (base > expected) {
      // A missing stretch before this segment (a deleted file): stand-ins keep the numbering dense.
      pieces.push({ lost: [expected, base - 1], to: MISSING });
      changed = true;
    }
    expected = base;
    while (pos < buf.length) {
      let rejected: number | undefined;
      const { end } = scanFrames(buf, pos, (payload, offset, frameEnd) => {
        const seq = seqOf(payload);
        // An unreadable header, or a record from before this point (bytes copied around), is damage.
        if (seq === undefined || seq < expected) {
          rejected = offset;
          return false;
        }
        if (seq > expected) {
          pieces.push({ lost: [expected, seq - 1], to: MISSING }); // whole frames cut out
          changed = true;
          expected = seq;
        }
        pieces.push({ frame: buf.subarray(offset, frameEnd) });
        expected++;
        return true;
      });
      const damageAt = rejected ?? end;
      if (damageAt === buf.length) break;
      const next = findNextFrame(buf, damageAt + 1, plausibleRecord);
      changed = true;
      if (next === undefined && last) {
        report.truncated.push({ file: name, bytes: buf.length - damageAt });
        break;
      }
      const stopAt = next ?? buf.length;
      const to = await quarantine(name, buf, damageAt, stopAt);
      const resume =
        next === undefined
          ? (until ?? expected)
          : (seqOf(
              buf.subarray(next + FRAME_HEADER_BYTES, next + FRAME_HEADER_BYTES + buf.readUInt32LE(next)),
            ) ?? expected);
      const lost: [number, number] | undefined = resume > expected ? [expected, resume - 1] : undefined;
      if (lost) {
        pieces.push({ lost, to });
        expected = resume;
      }
      report.quarantined.push({ file: name, offset: damageAt, bytes: stopAt - damageAt, to, lost });
      pos = stopAt;
    }
    if (until !== undefined && expected < until) {
      pieces.push({ lost: [expected, until - 1], to: MISSING });
      expected = until;
      changed = true;
    }
    if (!changed) continue;
    const first = pieces.length > 0 && 'lost' in pieces[0]! ? pieces[0].lost[0] : base;
    const parts: Buffer[] = [fileHeader(SEGMENT_MAGIC, first)];
    for (const piece of pieces) {
      if ('frame' in piece) parts.push(piece.frame);
      else for (let s = piece.lost[0]; s <= piece.lost[1]; s++) parts.push(standIn(s, piece.to));
    }
    const bytes = Buffer.concat(parts);
    const target = join(dir, segmentName(first));
    await replaceQueueFile(target, (h) => writeAll(h, bytes, 0));
    if (first !== base) await unlink(path);
    report.rewritten.push(segmentName(first));
  }

  await repairKeys(dir, report, quarantine);
  await repairCursor(dir, report, quarantine, expected);
  return report;
}

async function repairKeys(
  dir: string,
  report: RepairReport,
  quarantine: (file: string, buf: Buffer, offset: number, end: number) => Promise<string>,
): Promise<void> {
  const path = join(dir, KEYS_FILE);
  const buf = await readIfExists(path);
  if (!buf) return;
  const header = fileHeader(KEYS_MAGIC, 0);
  const frames: Buffer[] = [];
  let changed = false;
  let pos = FILE_HEADER_BYTES;
  if (buf.length < FILE_HEADER_BYTES || !buf.subarray(0, FILE_HEADER_BYTES).equals(header)) {
    // Without its header the file may still hold valid frames: find the first one.
    const next = findNextFrame(buf, 0, plausibleKeys);
    pos = next ?? buf.length;
    const to = await quarantine(KEYS_FILE, buf, 0, pos);
    report.quarantined.push({ file: KEYS_FILE, offset: 0, bytes: pos, to, lost: undefined });
    report.keysForgotten = pos > FILE_HEADER_BYTES;
    changed = true;
  }
  while (pos < buf.length) {
    const { end } = scanFrames(buf, pos, (_payload, offset, frameEnd) => {
      frames.push(buf.subarray(offset, frameEnd));
      return true;
    });
    if (end === buf.length) break;
    const next = findNextFrame(buf, end + 1, plausibleKeys);
    if (next === undefined) {
      report.truncated.push({ file: KEYS_FILE, bytes: buf.length - end }); // a GC killed mid-append
      changed = true;
      break;
    }
    const to = await quarantine(KEYS_FILE, buf, end, next);
    report.quarantined.push({ file: KEYS_FILE, offset: end, bytes: next - end, to, lost: undefined });
    report.keysForgotten = true;
    changed = true;
    pos = next;
  }
  if (!changed) return;
  const bytes = Buffer.concat([header, ...frames]);
  await replaceQueueFile(path, (h) => writeAll(h, bytes, 0));
  report.rewritten.push(KEYS_FILE);
}

async function repairCursor(
  dir: string,
  report: RepairReport,
  quarantine: (file: string, buf: Buffer, offset: number, end: number) => Promise<string>,
  nextSeq: number,
): Promise<void> {
  const path = join(dir, CURSOR_FILE);
  const raw = await readIfExists(path);
  if (!raw) return;
  const bases = await listSegments(dir);
  const oldest = bases[0] ?? nextSeq;
  let cursor: Cursor | undefined;
  try {
    cursor = parseCursor(raw, path);
  } catch {
    const to = await quarantine(CURSOR_FILE, raw, 0, raw.length);
    report.quarantined.push({ file: CURSOR_FILE, offset: 0, bytes: raw.length, to, lost: undefined });
  }
  // The position is the seq; segment and offset are derived from it by walking the frames.
  const next = cursor ? Math.min(Math.max(cursor.next, oldest), nextSeq) : oldest;
  const base = bases.filter((b) => b <= next).at(-1) ?? next;
  let offset = FILE_HEADER_BYTES;
  let last: number | undefined;
  if (next > base) {
    const buf = await readFile(join(dir, segmentName(base)));
    scanFrames(buf, FILE_HEADER_BYTES, (payload, at, end) => {
      if (readRecordHeader(payload, `${segmentName(base)}@${at}`).header.seq !== next - 1) return true;
      offset = end;
      last = at;
      return false;
    });
  }
  const fixed: Cursor = { version: 2, next, segment: base, offset };
  if (last !== undefined) fixed.last = last;
  if (cursor?.version === 2 && cursor.metadata !== undefined) fixed.metadata = cursor.metadata;
  const same =
    cursor !== undefined &&
    cursor.next === fixed.next &&
    cursor.segment === fixed.segment &&
    cursor.offset === fixed.offset &&
    (cursor.version === 1 || cursor.last === fixed.last);
  report.cursor = !cursor ? 'reset' : same ? 'kept' : 'moved';
  if (same) return;
  await replaceQueueFile(path, (h) => writeAll(h, Buffer.from(`${JSON.stringify(fixed)}\n`), 0));
  report.rewritten.push(CURSOR_FILE);
}
