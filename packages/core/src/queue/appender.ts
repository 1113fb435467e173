/**
 * The append half of a segment log, shared by `SampleQueue`'s producer and `GroupQueue`'s journal:
 * recover the segments on open (check the numbering, cut off a torn tail, refuse damage), then append
 * records with group commit (concurrent appends written together and flushed by one `fdatasync`).
 */
import type { FileHandle } from 'node:fs/promises';
import { open, readdir, truncate, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { ioError, listSegments, readIfExists, replaceQueueFile, writeAll } from './files.js';
import {
  corrupt,
  FILE_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  fileHeader,
  findNextFrame,
  frameHeader,
  plausibleRecord,
  QueueError,
  type RecordHeader,
  readFileHeader,
  readRecordHeader,
  SEGMENT_MAGIC,
  scanFrames,
  segmentName,
} from './format.js';

/** Where a record's frame is: its segment (by first seq) and byte offset. */
export interface RecordPosition {
  seq: number;
  segment: number;
  offset: number;
  /** Frame bytes (header included). */
  bytes: number;
}

/** One record waiting to be written. */
export interface AppendEntry {
  /** The payload parts (record header, then body) once the record's seq and time are known. */
  encode(seq: number, time: number): Uint8Array[];
  /** Rough payload size, to decide when to start a new segment. */
  estimate: number;
  /**
   * Nobody waits for this record: write it with the next one that is waited for (or within
   * `DEFER_MS`), so it costs no flush of its own.
   */
  defer?: boolean | undefined;
  /** Called in order, synchronously, once the record is written (and flushed with `sync`). */
  written(position: RecordPosition): void;
  rejected(error: unknown): void;
}

export interface FlushInfo {
  records: number;
  bytes: number;
  synced: boolean;
  durationMs: number;
}

interface ActiveSegment {
  base: number;
  handle: FileHandle;
  size: number;
}

export interface RecoverOptions {
  /** Only segments holding records at or after this seq are read (older ones may have gaps). Default 1. */
  from?: number | undefined;
  /**
   * Append to the last segment found (default), or leave it as it is and start a new segment with the
   * next record (a file that may be shared with a fork is never written again).
   */
  reopenLast?: boolean | undefined;
  /** Every intact record of the segments read, in seq order. */
  onRecord?: ((header: RecordHeader, payload: Buffer, position: RecordPosition) => void) | undefined;
}

// A deferred record waits at most this long for a record someone waits for.
const DEFER_MS = 20;
// Frames go out in writes of about 1 MiB: one huge write is slower to flush than several.
const WRITE_CHUNK = 1 << 20;

export class SegmentAppender {
  readonly #dir: string;
  readonly #segmentBytes: number;
  readonly #sync: boolean;
  readonly #flushed: (e: FlushInfo) => void;
  #pending: AppendEntry[] = [];
  #active: ActiveSegment | undefined;
  #nextSeq = 1;
  #flushing: Promise<void> | undefined;
  #deferred: NodeJS.Timeout | undefined;
  #broken: QueueError | undefined;
  #sealed = false;
  /** A torn tail cut off while opening. */
  recovered: { segment: string; truncatedBytes: number } | undefined;
  /** The seq after the last record found on open; `undefined` when there was no segment. */
  recoveredEnd: number | undefined;

  private constructor(
    dir: string,
    options: { segmentBytes: number; sync: boolean },
    flushed: (e: FlushInfo) => void,
  ) {
    this.#dir = dir;
    this.#segmentBytes = options.segmentBytes;
    this.#sync = options.sync;
    this.#flushed = flushed;
  }

  /** Read the segments (see `RecoverOptions`), cut off a torn tail of the last one, and reopen it for appending. */
  static async open(
    dir: string,
    options: { segmentBytes: number; sync: boolean } & RecoverOptions,
    flushed: (e: FlushInfo) => void,
  ): Promise<SegmentAppender> {
    const appender = new SegmentAppender(dir, options, flushed);
    try {
      await appender.#recover(options.from ?? 1, options.onRecord);
      if (options.reopenLast === false) await appender.seal();
    } catch (error) {
      await appender.close();
      throw error;
    }
    return appender;
  }

  /** The seq the next record gets. */
  get nextSeq(): number {
    return this.#nextSeq;
  }

  /** Number the next record when it starts a new segment (e.g. after every segment was collected). */
  startAt(seq: number): void {
    if ((this.#active === undefined || this.#sealed) && this.#pending.length === 0) this.#nextSeq = seq;
  }

  get broken(): QueueError | undefined {
    return this.#broken;
  }

  append(entry: AppendEntry): void {
    if (this.#broken) throw this.#broken;
    this.#pending.push(entry);
    if (!entry.defer) this.#flushing ??= this.#flush();
    else if (!this.#flushing && !this.#deferred) {
      this.#deferred = setTimeout(() => {
        this.#deferred = undefined;
        if (this.#pending.length > 0) this.#flushing ??= this.#flush();
      }, DEFER_MS);
      this.#deferred.unref();
    }
  }

  /** Wait for the appends queued so far. */
  async drain(): Promise<void> {
    if (this.#pending.length > 0) this.#flushing ??= this.#flush();
    while (this.#flushing) await this.#flushing;
  }

  /** Wait for queued appends, then seal the active segment: the next record starts a new one. */
  async seal(): Promise<void> {
    await this.drain();
    if (this.#active) this.#sealed = true;
  }

  /** First seq of the segment the next record goes to (undefined when none is open, or it is sealed). */
  get writableSegment(): number | undefined {
    return this.#sealed ? undefined : this.#active?.base;
  }

  async #flush(): Promise<void> {
    clearTimeout(this.#deferred);
    this.#deferred = undefined;
    // Appends issued while a write is in progress are collected and written together next round.
    await Promise.resolve();
    try {
      while (this.#pending.length > 0) {
        const batch = this.#pending;
        this.#pending = [];
        try {
          await this.#writeBatch(batch);
        } catch (error) {
          for (const p of batch) p.rejected(error);
        }
      }
    } finally {
      this.#flushing = undefined;
    }
  }

  async #writeBatch(batch: AppendEntry[]): Promise<void> {
    if (this.#broken) throw this.#broken;
    let estimate = 0;
    for (const p of batch) estimate += p.estimate + FRAME_HEADER_BYTES + 64;
    let active = this.#active;
    if (
      !active ||
      this.#sealed ||
      (active.size > FILE_HEADER_BYTES && active.size + estimate > this.#segmentBytes)
    ) {
      active = await this.#startSegment(this.#nextSeq);
    }
    const time = Date.now();
    const writes: Array<{ chunks: Uint8Array[]; bytes: number }> = [];
    const frames: number[] = [];
    let seq = this.#nextSeq;
    let total = 0;
    for (const p of batch) {
      const parts = p.encode(seq, time);
      const frame = frameHeader(parts);
      let bytes = frame.length;
      for (const part of parts) bytes += part.length;
      const last = writes.at(-1);
      if (last && last.bytes + bytes <= WRITE_CHUNK) {
        last.chunks.push(frame, ...parts);
        last.bytes += bytes;
      } else writes.push({ chunks: [frame, ...parts], bytes });
      frames.push(bytes);
      total += bytes;
      seq++;
    }
    const start = active.size;
    const path = this.#path(active.base);
    const t0 = performance.now();
    let written = false;
    try {
      let position = start;
      for (const write of writes) {
        let done = 0;
        while (done < write.bytes) {
          const buffers = done === 0 ? write.chunks : [Buffer.concat(write.chunks).subarray(done)];
          const { bytesWritten } = await active.handle.writev(buffers, position + done);
          done += bytesWritten;
        }
        position += write.bytes;
      }
      written = true;
      if (this.#sync) await active.handle.datasync();
    } catch (error) {
      const failure = ioError(`writing ${batch.length} record(s) to ${path}`, error);
      // After a failed flush the kernel may have dropped the dirty pages: only a reopen (which
      // re-reads the file) knows what is on disk.
      if (written)
        this.#broken = new QueueError(`${path}: a flush failed; reopen the queue`, { cause: failure });
      await active.handle.truncate(start).catch(() => {
        this.#broken = new QueueError(
          `${path} could not be cut back after a failed write; reopen the queue to recover it`,
          { cause: failure },
        );
      });
      throw failure;
    }
    active.size = start + total;
    this.#flushed({
      records: batch.length,
      bytes: total,
      synced: this.#sync,
      durationMs: performance.now() - t0,
    });
    seq = this.#nextSeq;
    let offset = start;
    for (const [i, p] of batch.entries()) {
      p.written({ seq, segment: active.base, offset, bytes: frames[i]! });
      offset += frames[i]!;
      seq++;
    }
    this.#nextSeq = seq;
  }

  /** Create segment `base` whole (header written, flushed, renamed into place). */
  async #startSegment(base: number): Promise<ActiveSegment> {
    if (this.#active) {
      await this.#active.handle.close();
      this.#active = undefined;
    }
    const path = this.#path(base);
    const handle = await replaceQueueFile(path, (h) => writeAll(h, fileHeader(SEGMENT_MAGIC, base), 0), {
      keepOpen: true,
    });
    this.#active = { base, handle: handle!, size: FILE_HEADER_BYTES };
    this.#sealed = false;
    return this.#active;
  }

  async #recover(from: number, onRecord: RecoverOptions['onRecord']): Promise<void> {
    // A segment being created when the last writer died (renamed into place only when complete).
    for (const name of await readdir(this.#dir)) {
      if (name.endsWith('.seg.tmp')) await unlink(join(this.#dir, name)).catch(() => {});
    }
    const bases = await listSegments(this.#dir);
    let expected: number | undefined;
    for (const [i, base] of bases.entries()) {
      const last = i === bases.length - 1;
      // Every record of this segment is older than `from`: not read (it may be kept for its data only).
      if (!last && bases[i + 1]! <= from) continue;
      const path = this.#path(base);
      const buf = await readIfExists(path);
      if (!buf) continue; // deleted by GC meanwhile
      if (expected !== undefined && base !== expected) {
        throw corrupt(path, 0, `starts at seq ${base} but the previous segment ends before ${expected}`);
      }
      if (
        last &&
        buf.length < FILE_HEADER_BYTES &&
        fileHeader(SEGMENT_MAGIC, base).subarray(0, buf.length).equals(buf)
      ) {
        // Written by an older version that created segments in place: killed while creating it.
        const handle = await open(path, 'r+');
        await handle.truncate(0);
        await writeAll(handle, fileHeader(SEGMENT_MAGIC, base), 0);
        await handle.sync();
        this.#active = { base, handle, size: FILE_HEADER_BYTES };
        this.recovered = { segment: path, truncatedBytes: buf.length };
        expected = base;
        break;
      }
      const headerBase = readFileHeader(buf, SEGMENT_MAGIC, path);
      if (headerBase !== base) {
        throw corrupt(path, 8, `header says first seq ${headerBase}, the file name says ${base}`);
      }
      let seq = base;
      const { end, stop } = scanFrames(buf, FILE_HEADER_BYTES, (payload, offset, frameEnd) => {
        const { header } = readRecordHeader(payload, `${path}@${offset}`);
        if (header.seq !== seq) throw corrupt(path, offset, `record has seq ${header.seq}, expected ${seq}`);
        onRecord?.(header, payload, { seq, segment: base, offset, bytes: frameEnd - offset });
        seq++;
        return true;
      });
      if (stop !== 'end') {
        if (!last) throw corrupt(path, end, 'invalid frame in a sealed segment');
        const next = findNextFrame(buf, end + 1, plausibleRecord);
        if (next !== undefined) {
          throw corrupt(
            path,
            end,
            `invalid frame followed by a valid one at byte ${next}: damage, not a torn tail`,
          );
        }
        await truncate(path, end);
        this.recovered = { segment: path, truncatedBytes: buf.length - end };
      }
      expected = seq;
      if (last) {
        const handle = await open(path, 'r+');
        if (stop !== 'end') await handle.sync();
        this.#active = { base, handle, size: end };
      }
    }
    this.recoveredEnd = expected;
    if (expected !== undefined) this.#nextSeq = expected;
  }

  /** Wait for pending appends, then close the active segment. */
  async close(): Promise<void> {
    await this.drain();
    clearTimeout(this.#deferred);
    await this.#active?.handle.close();
    this.#active = undefined;
  }

  #path(base: number): string {
    return join(this.#dir, segmentName(base));
  }
}
