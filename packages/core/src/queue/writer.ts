/**
 * The producer half of a `SampleQueue`: recovers the segments on open (index every key, cut off a torn
 * tail, refuse damage), then appends records with group commit.
 */
import type { FileHandle } from 'node:fs/promises';
import { open, readdir, truncate, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { encodeSamples } from '../codec.js';
import { describeValue, ValidationError } from '../errors.js';
import type { Sample } from '../sample.js';
import { ioError, listSegments, readIfExists, replaceFile, writeAll } from './files.js';
import {
  corrupt,
  encodeRecordHeader,
  FILE_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  fileHeader,
  findNextFrame,
  frameHeader,
  MAX_PAYLOAD_BYTES,
  plausibleRecord,
  QueueError,
  readFileHeader,
  readRecordHeader,
  SEGMENT_MAGIC,
  scanFrames,
  segmentName,
} from './format.js';
import { loadKeys } from './keys.js';

export interface AppendResult {
  seq: number;
  /** The key was already in the queue; nothing was written. */
  duplicate: boolean;
}

export interface WriterHooks {
  /** One group commit was written (and flushed with `sync`). */
  flushed: (e: { records: number; bytes: number; synced: boolean; durationMs: number }) => void;
  appended: (e: { seq: number; key: string; bytes: number }) => void;
}

interface Pending {
  key: string;
  body: Uint8Array;
  n: number;
  meta: Record<string, unknown> | undefined;
  resolve: (result: AppendResult) => void;
  reject: (error: unknown) => void;
}

interface ActiveSegment {
  base: number;
  handle: FileHandle;
  size: number;
}

// Frames go out in writes of about 1 MiB: one huge write is slower to flush than several.
const WRITE_CHUNK = 1 << 20;

export class QueueWriter {
  readonly #dir: string;
  readonly #segmentBytes: number;
  readonly #sync: boolean;
  readonly #hooks: WriterHooks;
  readonly #index = new Map<string, number>();
  readonly #inflight = new Map<string, Promise<AppendResult>>();
  #pending: Pending[] = [];
  #active: ActiveSegment | undefined;
  #nextSeq = 1;
  #flushing: Promise<void> | undefined;
  #broken: QueueError | undefined;
  /** A torn tail cut off while opening. */
  recovered: { segment: string; truncatedBytes: number } | undefined;

  private constructor(dir: string, options: { segmentBytes: number; sync: boolean }, hooks: WriterHooks) {
    this.#dir = dir;
    this.#segmentBytes = options.segmentBytes;
    this.#sync = options.sync;
    this.#hooks = hooks;
  }

  /** Index every record, cut off a torn tail of the last segment, and reopen it for appending. */
  static async open(
    dir: string,
    options: { segmentBytes: number; sync: boolean; committed: number },
    hooks: WriterHooks,
  ): Promise<QueueWriter> {
    const writer = new QueueWriter(dir, options, hooks);
    try {
      await writer.#recover(options.committed);
    } catch (error) {
      await writer.close();
      throw error;
    }
    return writer;
  }

  get nextSeq(): number {
    return this.#nextSeq;
  }

  has(key: string): boolean {
    return this.#index.has(key);
  }

  seqOf(key: string): number | undefined {
    return this.#index.get(key);
  }

  keys(): IterableIterator<string> {
    return this.#index.keys();
  }

  append(
    key: string,
    samples: ReadonlyArray<Sample>,
    meta: Record<string, unknown> | undefined,
  ): Promise<AppendResult> {
    if (this.#broken) throw this.#broken;
    if (typeof key !== 'string' || key.length === 0 || key.length > 4096) {
      throw new ValidationError(
        'key',
        `expected a non-empty string of at most 4096 characters, found ${describeValue(key)}`,
      );
    }
    if (!Array.isArray(samples)) {
      throw new ValidationError('samples', `expected an array of Sample, found ${describeValue(samples)}`);
    }
    const existing = this.#index.get(key);
    if (existing !== undefined) return Promise.resolve({ seq: existing, duplicate: true });
    const inflight = this.#inflight.get(key);
    if (inflight) return inflight.then((r) => ({ seq: r.seq, duplicate: true }));
    if (meta !== undefined) {
      // Encode once here so a bad value fails this append alone, not the whole group commit.
      try {
        encodeRecordHeader({ seq: 1, key, time: 0, meta });
      } catch (cause) {
        throw new ValidationError('meta', `cannot encode ${describeValue(meta)} as msgpack`, { cause });
      }
    }
    const body = encodeSamples(samples);
    if (body.length > MAX_PAYLOAD_BYTES - 64 * 1024) {
      throw new ValidationError(
        'samples',
        `record ${JSON.stringify(key)} encodes to ${body.length} bytes; the limit is 1 GiB per record, so split it`,
      );
    }
    const promise = new Promise<AppendResult>((resolve, reject) => {
      this.#pending.push({ key, body, n: samples.length, meta, resolve, reject });
    });
    this.#inflight.set(key, promise);
    const forget = () => this.#inflight.delete(key);
    promise.then(forget, forget);
    this.#flushing ??= this.#flush();
    return promise;
  }

  async #flush(): Promise<void> {
    // Appends issued while a write is in progress are collected and written together next round.
    await Promise.resolve();
    try {
      while (this.#pending.length > 0) {
        const batch = this.#pending;
        this.#pending = [];
        try {
          await this.#writeBatch(batch);
        } catch (error) {
          for (const p of batch) p.reject(error);
        }
      }
    } finally {
      this.#flushing = undefined;
    }
  }

  async #writeBatch(batch: Pending[]): Promise<void> {
    if (this.#broken) throw this.#broken;
    let estimate = 0;
    for (const p of batch) estimate += p.body.length + FRAME_HEADER_BYTES + 64;
    let active = this.#active;
    if (!active || (active.size > FILE_HEADER_BYTES && active.size + estimate > this.#segmentBytes)) {
      active = await this.#startSegment(this.#nextSeq);
    }
    const time = Date.now();
    const writes: Array<{ chunks: Uint8Array[]; bytes: number }> = [];
    let seq = this.#nextSeq;
    let total = 0;
    for (const p of batch) {
      const header = encodeRecordHeader(
        p.meta === undefined
          ? { seq, key: p.key, time, n: p.n }
          : { seq, key: p.key, time, n: p.n, meta: p.meta },
      );
      const parts = [header, p.body];
      const frame = frameHeader(parts);
      const bytes = frame.length + header.length + p.body.length;
      const last = writes.at(-1);
      if (last && last.bytes + bytes <= WRITE_CHUNK) {
        last.chunks.push(frame, ...parts);
        last.bytes += bytes;
      } else writes.push({ chunks: [frame, ...parts], bytes });
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
    this.#hooks.flushed({
      records: batch.length,
      bytes: total,
      synced: this.#sync,
      durationMs: performance.now() - t0,
    });
    seq = this.#nextSeq;
    for (const p of batch) {
      this.#index.set(p.key, seq);
      p.resolve({ seq, duplicate: false });
      this.#hooks.appended({ seq, key: p.key, bytes: p.body.length });
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
    const handle = await replaceFile(path, (h) => writeAll(h, fileHeader(SEGMENT_MAGIC, base), 0), {
      keepOpen: true,
    });
    this.#active = { base, handle: handle!, size: FILE_HEADER_BYTES };
    return this.#active;
  }

  async #recover(committed: number): Promise<void> {
    // A segment being created when the last producer died (renamed into place only when complete).
    for (const name of await readdir(this.#dir)) {
      if (name.endsWith('.seg.tmp')) await unlink(join(this.#dir, name)).catch(() => {});
    }
    const bases = await listSegments(this.#dir);
    let expected: number | undefined;
    for (const [i, base] of bases.entries()) {
      const path = this.#path(base);
      const last = i === bases.length - 1;
      const buf = await readIfExists(path);
      if (!buf) continue; // deleted by the consumer's GC meanwhile; its keys are in keys.log
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
      const { end, stop } = scanFrames(buf, FILE_HEADER_BYTES, (payload, offset) => {
        const { header } = readRecordHeader(payload, `${path}@${offset}`);
        if (header.seq !== seq) throw corrupt(path, offset, `record has seq ${header.seq}, expected ${seq}`);
        if (header.lost === undefined) this.#index.set(header.key, seq);
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
    if (expected !== undefined && committed > expected) {
      throw new QueueError(
        `the consumer cursor is at seq ${committed} but the queue's records end before ${expected}; records were removed`,
        { code: 'queue_corrupt', data: { committed, next: expected } },
      );
    }
    this.#nextSeq = expected ?? Math.max(1, committed);
    // Keys of segments the consumer already deleted. Read after the segments, so none is missed.
    for (const [key, seq] of await loadKeys(this.#dir)) {
      if (!this.#index.has(key)) this.#index.set(key, seq);
    }
  }

  /** Wait for pending appends, then close the active segment. */
  async close(): Promise<void> {
    await this.#flushing;
    await this.#active?.handle.close();
    this.#active = undefined;
  }

  #path(base: number): string {
    return join(this.#dir, segmentName(base));
  }
}
