/**
 * The consumer half of a `SampleQueue`: reads records from the committed cursor, commits positions
 * (with the caller's metadata) atomically, and deletes fully committed segments.
 */
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError, describeValue } from '../errors.js';
import type { Sample } from '../sample.js';
import { ChangeWaiters } from './changes.js';
import { openReadHead, type Position, type ReadHead, readCursor, writeCursor } from './cursor.js';
import { listSegments } from './files.js';
import {
  type Cursor,
  corrupt,
  decodeRecordSamples,
  FILE_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  findNextFrame,
  MAX_PAYLOAD_BYTES,
  plausibleRecord,
  QueueError,
  readRecordHeader,
  scanFrames,
  segmentName,
} from './format.js';
import { collectSegments, KeysLog } from './keys.js';

/** One record read from a `SampleQueue`. */
export interface QueueRecord {
  seq: number;
  key: string;
  /** Wall-clock ms (epoch) of the append. */
  time: number;
  meta: Record<string, unknown>;
  samples: Sample[];
}

/** Records read from a `SampleQueue` in one call, with the positions before and after them. */
export interface QueueBatch {
  records: QueueRecord[];
  /** The read position before this batch (the first record's seq, unless quarantined ones precede it). */
  from: number;
  /** The position after the last record: `commit(batch.next)`. */
  next: number;
}

/** Options of reading a `SampleQueue`. */
export interface ReadOptions {
  /** Most records to return. Default 1024. */
  max?: number | undefined;
  /** Stop after this many payload bytes (at least one record is returned). Default 64 MiB. */
  maxBytes?: number | undefined;
  /** Wait until at least one record is available. Default false. */
  wait?: boolean | undefined;
  signal?: AbortSignal | undefined;
}

/** Options of committing a read position. */
export interface CommitOptions {
  /** The caller's state, saved atomically with the position; kept until a commit replaces it. */
  metadata?: Record<string, unknown> | undefined;
}

export interface ReaderHooks {
  committed: (e: { next: number }) => void;
  collected: (e: { segment: string; records: number }) => void;
}

const READ_CHUNK = 4 << 20;

export class QueueReader {
  readonly #dir: string;
  readonly #pollMs: number;
  readonly #autoGc: boolean;
  readonly #hooks: ReaderHooks;
  #cursor: Cursor | undefined;
  #committed = 1;
  #cur: ReadHead | undefined;
  /** Start of each frame read but not committed (and of the one before the committed position), by seq. */
  readonly #starts = new Map<number, Position>();
  #reading: Promise<unknown> = Promise.resolve();
  #committing: Promise<unknown> = Promise.resolve();
  readonly #changes = new ChangeWaiters();
  #keysLog: KeysLog | undefined;
  #buffer: Buffer | undefined;
  /** The active segment's invalid tail last found to be torn (not damage), to not re-scan it. */
  #tornTail: { base: number; offset: number; size: number } | undefined;
  #closing = false;
  #opening: Promise<boolean> | undefined;

  private constructor(dir: string, options: { pollMs: number; autoGc: boolean }, hooks: ReaderHooks) {
    this.#dir = dir;
    this.#pollMs = options.pollMs;
    this.#autoGc = options.autoGc;
    this.#hooks = hooks;
  }

  static async open(
    dir: string,
    options: { pollMs: number; autoGc: boolean },
    hooks: ReaderHooks,
  ): Promise<QueueReader> {
    const reader = new QueueReader(dir, options, hooks);
    reader.#cursor = await readCursor(dir);
    if (reader.#cursor) reader.#committed = reader.#cursor.next;
    return reader;
  }

  get committed(): number {
    return this.#committed;
  }

  get readPosition(): number {
    return this.#cur?.seq ?? this.#committed;
  }

  /** The metadata of the last commit that carried some. */
  get metadata(): Record<string, unknown> | undefined {
    return this.#cursor?.version === 2 ? this.#cursor.metadata : undefined;
  }

  /** Wake waiting reads (records were appended through this process). */
  wake(): void {
    this.#changes.wake();
  }

  read(options: ReadOptions): Promise<QueueBatch> {
    const run = this.#reading.then(() => this.#read(options));
    this.#reading = run.catch(() => {});
    return run;
  }

  async #read(options: ReadOptions): Promise<QueueBatch> {
    const { max = 1024, maxBytes = 64 << 20, wait = false, signal } = options;
    if (!Number.isInteger(max) || max < 1) {
      throw new ConfigError(
        `SampleQueue.read options.max: expected an integer ≥ 1, found ${describeValue(max)}`,
      );
    }
    const from = this.readPosition;
    for (;;) {
      signal?.throwIfAborted();
      if (this.#closing) {
        throw new QueueError('SampleQueue.read: the queue was closed', { code: 'queue_closed' });
      }
      const cur = this.#cur;
      const before = cur && { base: cur.base, offset: cur.offset, seq: cur.seq };
      let records: QueueRecord[];
      try {
        records = await this.#readAvailable(max, maxBytes);
      } catch (error) {
        // Records decoded before the failure were not delivered: read them again next time.
        await this.#moveTo(before);
        throw error;
      }
      if (records.length > 0 || !wait) return { records, from, next: this.readPosition };
      await this.#changes.next(signal, this.#pollMs);
    }
  }

  async #moveTo(position: { base: number; offset: number; seq: number } | undefined): Promise<void> {
    const cur = this.#cur;
    if (!position) {
      await cur?.handle.close();
      this.#cur = undefined;
      return;
    }
    if (cur && cur.base === position.base) {
      cur.offset = position.offset;
      cur.seq = position.seq;
      return;
    }
    await cur?.handle.close();
    this.#cur = { ...position, handle: await open(this.#path(position.base), 'r') };
  }

  /** Open the reader at the committed cursor once (reads and commits may both ask). */
  #ensureCursor(): Promise<boolean> {
    if (this.#cur) return Promise.resolve(true);
    this.#opening ??= this.#openCursor().finally(() => {
      this.#opening = undefined;
    });
    return this.#opening;
  }

  async #readAvailable(max: number, maxBytes: number): Promise<QueueRecord[]> {
    if (!(await this.#ensureCursor())) return [];
    const records: QueueRecord[] = [];
    let bytes = 0;
    // Set once a later segment was seen: the current one was complete before that was created, so
    // after one more read whatever is left in it is garbage.
    let sealed = false;
    for (;;) {
      const cur = this.#cur!;
      const path = this.#path(cur.base);
      let tail = 0;
      for (;;) {
        const { buf, eof } = await this.#readChunk(cur, maxBytes - bytes);
        const { end, stop } = scanFrames(buf, 0, (payload, at) => {
          const where = `${path}@${cur.offset + at}`;
          const { header, bodyStart } = readRecordHeader(payload, where);
          if (header.seq !== cur.seq) {
            throw corrupt(path, cur.offset + at, `record has seq ${header.seq}, expected ${cur.seq}`);
          }
          this.#starts.set(header.seq, { segment: cur.base, offset: cur.offset + at });
          if (header.lost === undefined) {
            records.push({
              seq: header.seq,
              key: header.key,
              time: header.time,
              meta: header.meta ?? {},
              samples: decodeRecordSamples(payload, bodyStart, header, where),
            });
          }
          cur.seq++;
          bytes += payload.length;
          return records.length < max && bytes < maxBytes;
        });
        cur.offset += end;
        if (records.length >= max || bytes >= maxBytes) return records;
        if (eof || stop === 'corrupt') {
          tail = buf.length - end;
          break;
        }
      }
      const next = (await listSegments(this.#dir)).find((b) => b > cur.base);
      if (next === undefined) {
        // The active segment: an invalid tail is an append in progress or torn by a killed producer
        // (the next producer cuts it off), unless a valid frame follows it.
        if (tail > 0) await this.#checkTail(cur);
        return records;
      }
      if (!sealed) {
        sealed = true;
        continue; // read once more: anything written before the next segment appeared is there now
      }
      if (tail > 0) throw corrupt(path, cur.offset, 'invalid frame in a sealed segment');
      if (next !== cur.seq) {
        throw corrupt(path, cur.offset, `ends at seq ${cur.seq - 1} but the next segment starts at ${next}`);
      }
      await cur.handle.close();
      const base = cur.seq;
      this.#cur = { base, handle: await open(this.#path(base), 'r'), offset: FILE_HEADER_BYTES, seq: base };
      sealed = false;
    }
  }

  /** Throw `queue_corrupt` if a valid frame follows the invalid one at the reader's offset. */
  async #checkTail(cur: ReadHead): Promise<void> {
    const { size } = await cur.handle.stat();
    const t = this.#tornTail;
    if (t && t.base === cur.base && t.offset === cur.offset && t.size === size) return;
    const rest = Buffer.allocUnsafe(size - cur.offset);
    const { bytesRead } = await cur.handle.read(rest, 0, rest.length, cur.offset);
    // A valid frame where the invalid one was: the next producer cut the torn tail off and appended
    // since the read; the next read takes it.
    if (scanFrames(rest.subarray(0, bytesRead), 0, () => false).end > 0) return;
    const at = findNextFrame(rest.subarray(0, bytesRead), 1, plausibleRecord);
    if (at !== undefined) {
      throw corrupt(
        this.#path(cur.base),
        cur.offset,
        `invalid frame followed by a valid one at byte ${cur.offset + at}: damage, not a torn tail`,
      );
    }
    this.#tornTail = { base: cur.base, offset: cur.offset, size };
  }

  /**
   * Bytes from the reader's offset: a chunk, or the whole next frame when that is larger. The buffer is
   * reused by the next call; records are decoded (copied out) before that.
   */
  async #readChunk(cur: ReadHead, budget: number): Promise<{ buf: Buffer; eof: boolean }> {
    const want = Math.max(FRAME_HEADER_BYTES, Math.min(READ_CHUNK, budget));
    const buf = this.#readBuffer(want);
    const { bytesRead } = await cur.handle.read(buf, 0, want, cur.offset);
    if (bytesRead === want) {
      const frame = FRAME_HEADER_BYTES + buf.readUInt32LE(0);
      if (frame > want && frame <= MAX_PAYLOAD_BYTES + FRAME_HEADER_BYTES) {
        const big = this.#readBuffer(frame);
        const again = await cur.handle.read(big, 0, frame, cur.offset);
        return { buf: big.subarray(0, again.bytesRead), eof: again.bytesRead < frame };
      }
    }
    return { buf: buf.subarray(0, bytesRead), eof: bytesRead < want };
  }

  #readBuffer(size: number): Buffer {
    if (!this.#buffer || this.#buffer.length < size) {
      this.#buffer = Buffer.allocUnsafe(Math.max(size, READ_CHUNK));
    }
    return this.#buffer;
  }

  /** Position the reader at the committed cursor, checking it. False when the queue has no segment yet. */
  async #openCursor(): Promise<boolean> {
    const bases = await listSegments(this.#dir);
    // A consumer without a cursor starts at the oldest record.
    if (!this.#cursor && bases.length > 0 && this.#committed < bases[0]!) this.#committed = bases[0]!;
    const opened = await openReadHead(this.#dir, this.#cursor, this.#committed);
    if (!opened) return false;
    this.#cur = opened.head;
    if (opened.before) this.#starts.set(this.#committed - 1, opened.before);
    return true;
  }

  commit(next: number | undefined, options: CommitOptions): Promise<void> {
    // Commits are serialized; a read waiting for records does not hold them up.
    const run = this.#committing.then(() => this.#commit(next, options));
    this.#committing = run.catch(() => {});
    return run;
  }

  async #commit(next: number | undefined, { metadata }: CommitOptions): Promise<void> {
    // Positions the reader (and settles `committed` for a queue without a cursor) first.
    await this.#ensureCursor();
    const target = next ?? this.readPosition;
    if (!Number.isInteger(target) || target < this.#committed || target > this.readPosition) {
      throw new ConfigError(
        `SampleQueue.commit next: expected an integer between the committed position ${this.#committed} and the read position ${this.readPosition}, found ${describeValue(next)}`,
      );
    }
    if (target === this.#committed && metadata === undefined) return;
    const cursor = this.#cursorAt(target, metadata ?? this.metadata);
    await writeCursor(this.#dir, cursor);
    this.#cursor = cursor;
    this.#committed = target;
    for (const seq of this.#starts.keys()) if (seq < target - 1) this.#starts.delete(seq);
    this.#hooks.committed({ next: target });
    if (this.#autoGc) await this.gc();
  }

  #cursorAt(target: number, metadata: Record<string, unknown> | undefined): Cursor {
    const cur = this.#cur;
    const old = this.#cursor;
    let position: Position;
    let last: number | undefined;
    if (cur && target === cur.seq) position = { segment: cur.base, offset: cur.offset };
    else if (this.#starts.has(target)) position = this.#starts.get(target)!;
    else if (old && old.next === target) {
      position = { segment: old.segment, offset: old.offset };
      last = old.version === 2 ? old.last : undefined;
    } else position = { segment: target, offset: FILE_HEADER_BYTES }; // nothing read, no segment yet
    const before = this.#starts.get(target - 1);
    if (before && before.segment === position.segment) last = before.offset;
    const cursor: Cursor = { version: 2, next: target, ...position };
    if (last !== undefined) cursor.last = last;
    if (metadata !== undefined) cursor.metadata = metadata;
    return cursor;
  }

  /** Move the read position back to the committed one. */
  async rewind(): Promise<void> {
    await this.#reading;
    await this.#committing;
    await this.#cur?.handle.close();
    this.#cur = undefined;
    this.#starts.clear();
  }

  /** Delete segments whose records are all committed, keeping their keys in `keys.log`. */
  gc(): Promise<string[]> {
    return collectSegments(
      this.#dir,
      this.#committed,
      async () => {
        this.#keysLog ??= await KeysLog.open(this.#dir);
        return this.#keysLog;
      },
      this.#hooks.collected,
    );
  }

  async close(): Promise<void> {
    this.#closing = true;
    this.wake();
    await this.#reading;
    await this.#committing;
    await this.#cur?.handle.close();
    await this.#keysLog?.close();
    this.wake();
  }

  #path(base: number): string {
    return join(this.#dir, segmentName(base));
  }
}
