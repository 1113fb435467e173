/**
 * `SampleQueue`: a durable, append-only hand-off of rollout samples from a producer (the rollout side)
 * to a consumer (the trainer side), in a directory of msgpack segment files.
 *
 * - Each record has a caller-chosen unique key (e.g. `step-3/rollout-17`) and a dense sequence number.
 *   Appending a key the queue already holds is a no-op, so a restarted producer can simply append
 *   everything again, or skip what `has(key)` reports.
 * - An append resolves once its frame is written (and, with `sync`, flushed to disk). Concurrent
 *   appends are written and flushed together (group commit).
 * - The consumer reads from its committed cursor and commits when its output is safe. After a crash
 *   it reads again from the committed cursor, the same records in the same order; a consumer that names
 *   its output by the batch's `from` position is therefore exactly-once.
 * - On open, a torn tail left by a killed producer is cut off at the last complete frame. Segments the
 *   consumer has fully committed are deleted (their keys are kept in `keys.log` for `has`).
 */

import type { FileHandle } from 'node:fs/promises';
import { mkdir, open, readdir, readFile, rename, truncate, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { EventEmitter } from 'eventemitter3';
import { z } from 'zod';
import { encodeSamples } from '../codec.js';
import { ConfigError, describeValue, ValidationError } from '../errors.js';
import type { Sample } from '../sample.js';
import { parseWith } from '../validate.js';
import {
  decodeKeyPairs,
  decodeRecordSamples,
  encodeKeyPairs,
  encodeRecordHeader,
  FILE_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  fileHeader,
  frameHeader,
  KEYS_MAGIC,
  MAX_PAYLOAD_BYTES,
  QueueError,
  readFileHeader,
  readRecordHeader,
  SEGMENT_MAGIC,
  SEGMENT_NAME,
  scanFrames,
  segmentName,
} from './format.js';
import { acquireLock } from './lock.js';

export interface SampleQueueOptions {
  /** Which side this handle plays. Each side takes a lock: one producer and one consumer per queue. Default `both`. */
  mode?: 'producer' | 'consumer' | 'both';
  /** Start a new segment once the active one reaches this size. Default 64 MiB. */
  segmentBytes?: number;
  /** Flush every group commit to disk (`fdatasync`), so acknowledged appends survive a machine crash too. Default true. */
  sync?: boolean;
  /** How often a waiting `read` looks for records appended by another process, ms. Default 50. */
  pollMs?: number;
  /** Delete fully committed segments on `commit`. Default true. */
  autoGc?: boolean;
}

export interface QueueRecord {
  seq: number;
  key: string;
  /** Wall-clock ms (epoch) of the append. */
  time: number;
  meta: Record<string, unknown>;
  samples: Sample[];
}

export interface QueueBatch {
  records: QueueRecord[];
  /** Sequence number of the first record (the read position when empty). */
  from: number;
  /** The position after the last record: `commit(batch.next)`. */
  next: number;
}

export interface AppendResult {
  seq: number;
  /** The key was already in the queue; nothing was written. */
  duplicate: boolean;
}

export interface ReadOptions {
  /** Most records to return. Default 1024. */
  max?: number;
  /** Stop after this many payload bytes (at least one record is returned). Default 64 MiB. */
  maxBytes?: number;
  /** Wait until at least one record is available. Default false. */
  wait?: boolean;
  signal?: AbortSignal;
}

export interface QueueEvents {
  append: [{ seq: number; key: string; bytes: number }];
  /** One group commit: the records written together and, with `sync`, flushed by one `fdatasync`. */
  flush: [{ records: number; bytes: number; synced: boolean; durationMs: number }];
  commit: [{ next: number }];
  gc: [{ segment: string; records: number }];
}

const CursorSchema = z.object({
  version: z.literal(1),
  next: z.number().int().positive(),
  segment: z.number().int().positive(),
  offset: z.number().int().min(FILE_HEADER_BYTES),
});
type Cursor = z.infer<typeof CursorSchema>;

interface Pending {
  key: string;
  parts: Uint8Array[];
  bytes: number;
  meta: Record<string, unknown> | undefined;
  resolve: (result: AppendResult) => void;
  reject: (error: unknown) => void;
}

interface ActiveSegment {
  base: number;
  handle: FileHandle;
  size: number;
}

interface Reader {
  base: number;
  handle: FileHandle;
  offset: number;
  seq: number;
}

const KEYS_FILE = 'keys.log';
const CURSOR_FILE = 'cursor.json';
const READ_CHUNK = 4 << 20;
const WRITE_CHUNK = 1 << 20;

async function listSegments(dir: string): Promise<number[]> {
  const names = await readdir(dir);
  const bases: number[] = [];
  for (const name of names) {
    const m = SEGMENT_NAME.exec(name);
    if (m) bases.push(Number(m[1]));
  }
  return bases.sort((a, b) => a - b);
}

async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

const readIfExists = (path: string): Promise<Buffer | undefined> =>
  readFile(path).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });

export class SampleQueue extends EventEmitter<QueueEvents> {
  readonly dir: string;
  readonly mode: 'producer' | 'consumer' | 'both';
  #recovered: { segment: string; truncatedBytes: number } | undefined;

  readonly #segmentBytes: number;
  readonly #sync: boolean;
  readonly #pollMs: number;
  readonly #autoGc: boolean;
  readonly #releases: Array<() => Promise<void>> = [];
  #closed = false;
  #closing = false;

  // Producer state.
  readonly #index = new Map<string, number>();
  readonly #inflight = new Map<string, Promise<AppendResult>>();
  #pending: Pending[] = [];
  #active: ActiveSegment | undefined;
  #nextSeq = 1;
  #flushing: Promise<void> | undefined;
  #broken: QueueError | undefined;

  // Consumer state.
  #cursor: Cursor | undefined;
  #committed = 1;
  #reader: Reader | undefined;
  /** Start positions of records read but not committed, by seq. */
  readonly #starts = new Map<number, { segment: number; offset: number }>();
  #reading: Promise<unknown> = Promise.resolve();
  #committing: Promise<unknown> = Promise.resolve();
  /** Position after the last record handed to the caller (undefined: the committed one). */
  #delivered: number | undefined;
  readonly #wakeReaders = new Set<() => void>();
  #keysLog: FileHandle | undefined;
  #buffer: Buffer | undefined;

  private constructor(dir: string, options: SampleQueueOptions) {
    super();
    this.dir = dir;
    this.mode = options.mode ?? 'both';
    this.#segmentBytes = options.segmentBytes ?? 64 << 20;
    this.#sync = options.sync ?? true;
    this.#pollMs = options.pollMs ?? 50;
    this.#autoGc = options.autoGc ?? true;
  }

  /** Open (or create) the queue in `dir`, recovering from a crash of a previous producer or consumer. */
  static async open(dir: string, options: SampleQueueOptions = {}): Promise<SampleQueue> {
    if (typeof dir !== 'string' || dir === '') {
      throw new ConfigError(`SampleQueue.open dir: expected a directory path, found ${describeValue(dir)}`);
    }
    const { mode = 'both', segmentBytes = 64 << 20, pollMs = 50 } = options;
    if (!['producer', 'consumer', 'both'].includes(mode)) {
      throw new ConfigError(
        `SampleQueue.open options.mode: expected 'producer', 'consumer' or 'both', found ${describeValue(mode)}`,
      );
    }
    if (!Number.isInteger(segmentBytes) || segmentBytes < 4096) {
      throw new ConfigError(
        `SampleQueue.open options.segmentBytes: expected an integer ≥ 4096, found ${describeValue(segmentBytes)}`,
      );
    }
    if (!(pollMs > 0)) {
      throw new ConfigError(
        `SampleQueue.open options.pollMs: expected ms > 0, found ${describeValue(pollMs)}`,
      );
    }
    await mkdir(dir, { recursive: true });
    const queue = new SampleQueue(dir, options);
    try {
      if (mode !== 'consumer')
        queue.#releases.push(await acquireLock(join(dir, 'producer.lock'), 'producer'));
      if (mode !== 'producer')
        queue.#releases.push(await acquireLock(join(dir, 'consumer.lock'), 'consumer'));
      await queue.#loadCursor();
      if (mode !== 'consumer') await queue.#recoverProducer();
    } catch (error) {
      await queue.close().catch(() => {});
      throw error;
    }
    return queue;
  }

  /** A torn tail cut off while opening (the bytes of an append that never completed), if any. */
  get recovered(): { segment: string; truncatedBytes: number } | undefined {
    return this.#recovered;
  }

  // ------------------------------------------------------------------------------------------------
  // Producer

  /** Sequence number the next new record gets. */
  get nextSeq(): number {
    this.#need('producer', 'nextSeq');
    return this.#nextSeq;
  }

  /** Whether a record with `key` was appended (consumed or not). */
  has(key: string): boolean {
    this.#need('producer', 'has');
    return this.#index.has(key);
  }

  /** The sequence number of the record with `key`, if it was appended. */
  seqOf(key: string): number | undefined {
    this.#need('producer', 'seqOf');
    return this.#index.get(key);
  }

  /** Every key appended so far (consumed or not). */
  keys(): IterableIterator<string> {
    this.#need('producer', 'keys');
    return this.#index.keys();
  }

  /**
   * Append one record: `samples` (any number, including none) under a unique `key`, with optional JSON-like
   * `meta`. Resolves when the record is durable. A key already in the queue is not written again.
   */
  append(
    key: string,
    samples: ReadonlyArray<Sample>,
    options: { meta?: Record<string, unknown> } = {},
  ): Promise<AppendResult> {
    try {
      this.#need('producer', 'append');
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
      if (options.meta !== undefined) {
        // Encode once here so a bad value fails this append alone, not the whole group commit.
        try {
          encodeRecordHeader({ seq: 1, key, time: 0, meta: options.meta });
        } catch (cause) {
          throw new ValidationError('meta', `cannot encode ${describeValue(options.meta)} as msgpack`, {
            cause,
          });
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
        this.#pending.push({ key, parts: [body], bytes: body.length, meta: options.meta, resolve, reject });
      });
      this.#inflight.set(key, promise);
      const forget = () => this.#inflight.delete(key);
      promise.then(forget, forget);
      this.#flushing ??= this.#flush();
      return promise;
    } catch (error) {
      return Promise.reject(error);
    }
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
    let bytes = 0;
    for (const p of batch) bytes += p.bytes + FRAME_HEADER_BYTES + 64;
    let active = this.#active;
    if (!active || (active.size > FILE_HEADER_BYTES && active.size + bytes > this.#segmentBytes)) {
      active = await this.#startSegment(this.#nextSeq);
    }
    const time = Date.now();
    // Frames go out in writes of about 1 MiB: one huge write is slower to flush than several.
    const writes: Array<{ chunks: Uint8Array[]; bytes: number }> = [];
    let seq = this.#nextSeq;
    let total = 0;
    for (const p of batch) {
      const header = encodeRecordHeader(
        p.meta === undefined ? { seq, key: p.key, time } : { seq, key: p.key, time, meta: p.meta },
      );
      const parts = [header, ...p.parts];
      const frame = frameHeader(parts);
      const bytes = frame.length + header.length + p.bytes;
      const last = writes.at(-1);
      if (last && last.bytes + bytes <= WRITE_CHUNK) {
        last.chunks.push(frame, ...parts);
        last.bytes += bytes;
      } else writes.push({ chunks: [frame, ...parts], bytes });
      total += bytes;
      seq++;
    }
    const start = active.size;
    const t0 = performance.now();
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
      if (this.#sync) await active.handle.datasync();
    } catch (error) {
      const failure = new QueueError(
        `writing ${batch.length} record(s) to ${this.#path(active.base)} failed`,
        {
          cause: error,
        },
      );
      await active.handle.truncate(start).catch(() => {
        this.#broken = new QueueError(
          `${this.#path(active.base)} could not be cut back after a failed write; reopen the queue to recover it`,
          { cause: failure },
        );
      });
      throw failure;
    }
    active.size = start + total;
    this.emit('flush', {
      records: batch.length,
      bytes: total,
      synced: this.#sync,
      durationMs: performance.now() - t0,
    });
    seq = this.#nextSeq;
    for (const p of batch) {
      this.#index.set(p.key, seq);
      p.resolve({ seq, duplicate: false });
      this.emit('append', { seq, key: p.key, bytes: p.bytes });
      seq++;
    }
    this.#nextSeq = seq;
    for (const wake of this.#wakeReaders) wake();
  }

  async #startSegment(base: number): Promise<ActiveSegment> {
    if (this.#active) {
      await this.#active.handle.close();
      this.#active = undefined;
    }
    const path = this.#path(base);
    const handle = await open(path, 'wx');
    try {
      await handle.write(fileHeader(SEGMENT_MAGIC, base), 0, FILE_HEADER_BYTES, 0);
      await handle.sync();
      await syncDir(this.dir);
    } catch (error) {
      await handle.close();
      throw error;
    }
    this.#active = { base, handle, size: FILE_HEADER_BYTES };
    return this.#active;
  }

  /** Index every record, cut off a torn tail of the last segment, and reopen it for appending. */
  async #recoverProducer(): Promise<void> {
    const bases = await listSegments(this.dir);
    let expected: number | undefined;
    for (const [i, base] of bases.entries()) {
      const path = this.#path(base);
      const last = i === bases.length - 1;
      const buf = await readIfExists(path);
      if (!buf) continue; // deleted by the consumer's GC meanwhile; its keys are in keys.log
      if (expected !== undefined && base !== expected) {
        throw new QueueError(
          `${path}: starts at seq ${base} but the previous segment ends before ${expected}; records are missing`,
          { code: 'queue_corrupt' },
        );
      }
      if (last && buf.length < FILE_HEADER_BYTES) {
        // Killed while creating the segment: it holds no record yet. Rewrite its header in place (a
        // consumer may already have it open).
        const handle = await open(path, 'r+');
        await handle.truncate(0);
        await handle.write(fileHeader(SEGMENT_MAGIC, base), 0, FILE_HEADER_BYTES, 0);
        await handle.sync();
        this.#active = { base, handle, size: FILE_HEADER_BYTES };
        this.#recovered = { segment: path, truncatedBytes: buf.length };
        expected = base;
        break;
      }
      const headerBase = readFileHeader(buf, SEGMENT_MAGIC, path);
      if (headerBase !== base) {
        throw new QueueError(`${path}: header says first seq ${headerBase}, the name says ${base}`, {
          code: 'queue_corrupt',
        });
      }
      let seq = base;
      const { end, stop } = scanFrames(buf, FILE_HEADER_BYTES, (payload, offset) => {
        const { header } = readRecordHeader(payload, `${path}@${offset}`);
        if (header.seq !== seq) {
          throw new QueueError(`${path}@${offset}: record has seq ${header.seq}, expected ${seq}`, {
            code: 'queue_corrupt',
          });
        }
        this.#index.set(header.key, seq);
        seq++;
        return true;
      });
      if (stop !== 'end') {
        if (!last) {
          throw new QueueError(`${path}: invalid frame at byte ${end} in a sealed segment`, {
            code: 'queue_corrupt',
            data: { path, offset: end },
          });
        }
        await truncate(path, end);
        this.#recovered = { segment: path, truncatedBytes: buf.length - end };
      }
      expected = seq;
      if (last) {
        const handle = await open(path, 'r+');
        if (stop !== 'end') await handle.sync();
        this.#active = { base, handle, size: end };
      }
    }
    this.#nextSeq = expected ?? Math.max(1, this.#cursor?.next ?? 1);
    // Keys of segments the consumer already deleted. Read after the segments, so none is missed.
    const keys = await readIfExists(join(this.dir, KEYS_FILE));
    if (keys) {
      readFileHeader(keys, KEYS_MAGIC, join(this.dir, KEYS_FILE));
      scanFrames(keys, FILE_HEADER_BYTES, (payload, offset) => {
        for (const [key, seq] of decodeKeyPairs(payload, `${KEYS_FILE}@${offset}`)) {
          if (!this.#index.has(key)) this.#index.set(key, seq);
        }
        return true;
      });
      // A torn keys tail is the consumer's to cut off; those keys are still in their segment.
    }
  }

  // ------------------------------------------------------------------------------------------------
  // Consumer

  /** The committed position: the sequence number the consumer reads first after a restart. */
  get committed(): number {
    this.#need('consumer', 'committed');
    return this.#committed;
  }

  /** The position after the last record returned by `read` (≥ committed). */
  get readPosition(): number {
    this.#need('consumer', 'readPosition');
    return this.#delivered ?? this.#committed;
  }

  /**
   * Read the next records after the read position. Returns an empty batch when nothing is available,
   * unless `wait` is set. Reads are serialized.
   */
  read(options: ReadOptions = {}): Promise<QueueBatch> {
    const run = this.#reading.then(() => this.#read(options));
    this.#reading = run.catch(() => {});
    return run;
  }

  async #read(options: ReadOptions): Promise<QueueBatch> {
    this.#need('consumer', 'read');
    const { max = 1024, maxBytes = 64 << 20, wait = false, signal } = options;
    if (!Number.isInteger(max) || max < 1) {
      throw new ConfigError(
        `SampleQueue.read options.max: expected an integer ≥ 1, found ${describeValue(max)}`,
      );
    }
    for (;;) {
      signal?.throwIfAborted();
      if (this.#closing)
        throw new QueueError('SampleQueue.read: the queue was closed', { code: 'queue_closed' });
      const from = this.readPosition;
      const records = await this.#readAvailable(max, maxBytes);
      if (records.length > 0) this.#delivered = records.at(-1)!.seq + 1;
      if (records.length > 0 || !wait) return { records, from, next: this.readPosition };
      await this.#waitForAppend(signal);
    }
  }

  #waitForAppend(signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.#wakeReaders.delete(done);
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = () => {
        done();
        reject(signal?.reason);
      };
      const timer = setTimeout(done, this.#pollMs);
      this.#wakeReaders.add(done);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  async #readAvailable(max: number, maxBytes: number): Promise<QueueRecord[]> {
    if (!this.#reader && !(await this.#openReader())) return [];
    const records: QueueRecord[] = [];
    let bytes = 0;
    // Set once a later segment was seen: the current one was complete before that was created, so
    // after one more read whatever is left in it is garbage.
    let sealed = false;
    for (;;) {
      const reader = this.#reader!;
      const path = this.#path(reader.base);
      let tail = 0;
      for (;;) {
        const { buf, eof } = await this.#readChunk(reader, maxBytes - bytes);
        const { end, stop } = scanFrames(buf, 0, (payload, at) => {
          const where = `${path}@${reader.offset + at}`;
          const { header, bodyStart } = readRecordHeader(payload, where);
          if (header.seq !== reader.seq) {
            throw new QueueError(`${where}: record has seq ${header.seq}, expected ${reader.seq}`, {
              code: 'queue_corrupt',
            });
          }
          this.#starts.set(header.seq, { segment: reader.base, offset: reader.offset + at });
          records.push({
            seq: header.seq,
            key: header.key,
            time: header.time,
            meta: header.meta ?? {},
            samples: decodeRecordSamples(payload, bodyStart),
          });
          reader.seq++;
          bytes += payload.length;
          return records.length < max && bytes < maxBytes;
        });
        reader.offset += end;
        if (records.length >= max || bytes >= maxBytes) return records;
        // On the active segment an incomplete or unverifiable tail is an append still in progress
        // (or one a restarted producer will cut off): stop there for now.
        if (eof || stop === 'corrupt') {
          tail = buf.length - end;
          break;
        }
      }
      const next = (await listSegments(this.dir)).find((b) => b > reader.base);
      if (next === undefined) return records;
      if (!sealed) {
        sealed = true;
        continue; // read once more: anything written before the next segment appeared is there now
      }
      if (tail > 0 || next !== reader.seq) {
        const why =
          tail > 0
            ? `invalid frame at byte ${reader.offset} in a sealed segment`
            : `ends at seq ${reader.seq - 1} but the next segment starts at ${next}; records are missing`;
        throw new QueueError(`${path}: ${why}`, {
          code: 'queue_corrupt',
          data: { path, offset: reader.offset },
        });
      }
      await reader.handle.close();
      const base = reader.seq;
      this.#reader = {
        base,
        handle: await open(this.#path(base), 'r'),
        offset: FILE_HEADER_BYTES,
        seq: base,
      };
      sealed = false;
    }
  }

  /**
   * Bytes from the reader's offset: a chunk, or the whole next frame when that is larger. The buffer is
   * reused by the next call; records are decoded (copied out) before that.
   */
  async #readChunk(reader: Reader, budget: number): Promise<{ buf: Buffer; eof: boolean }> {
    const want = Math.max(FRAME_HEADER_BYTES, Math.min(READ_CHUNK, budget));
    const buf = this.#readBuffer(want);
    const { bytesRead } = await reader.handle.read(buf, 0, want, reader.offset);
    if (bytesRead === want) {
      const frame = FRAME_HEADER_BYTES + buf.readUInt32LE(0);
      if (frame > want && frame <= MAX_PAYLOAD_BYTES + FRAME_HEADER_BYTES) {
        const big = this.#readBuffer(frame);
        const again = await reader.handle.read(big, 0, frame, reader.offset);
        return { buf: big.subarray(0, again.bytesRead), eof: again.bytesRead < frame };
      }
    }
    return { buf: buf.subarray(0, bytesRead), eof: bytesRead < want };
  }

  #readBuffer(size: number): Buffer {
    if (!this.#buffer || this.#buffer.length < size)
      this.#buffer = Buffer.allocUnsafe(Math.max(size, READ_CHUNK));
    return this.#buffer;
  }

  /** Position the reader at the committed cursor. False when the queue has no segment yet. */
  async #openReader(): Promise<boolean> {
    const bases = await listSegments(this.dir);
    if (bases.length === 0) return false;
    const cursor = this.#cursor;
    // A consumer without a cursor starts at the oldest record.
    if (!cursor && this.#committed < bases[0]!) this.#committed = bases[0]!;
    const target = this.#committed;
    if (target < bases[0]!) {
      throw new QueueError(
        `the consumer cursor is at seq ${target} but the queue's first record is ${bases[0]}; records ${target}..${bases[0]! - 1} were deleted`,
        { code: 'queue_corrupt' },
      );
    }
    const base = bases.filter((b) => b <= target).at(-1)!;
    const path = this.#path(base);
    const handle = await open(path, 'r');
    try {
      const head = Buffer.alloc(FILE_HEADER_BYTES);
      const { bytesRead } = await handle.read(head, 0, FILE_HEADER_BYTES, 0);
      if (bytesRead < FILE_HEADER_BYTES && base === bases.at(-1)) {
        // The producer is creating this segment right now.
        await handle.close();
        return false;
      }
      readFileHeader(head.subarray(0, bytesRead), SEGMENT_MAGIC, path);
      let offset = FILE_HEADER_BYTES;
      if (cursor && cursor.segment === base && cursor.next === target) offset = cursor.offset;
      else if (target > base) {
        // No saved offset for this position: walk the segment's frames up to it.
        const buf = await readFile(path);
        let found: number | undefined;
        scanFrames(buf, FILE_HEADER_BYTES, (payload, at, end) => {
          const { header } = readRecordHeader(payload, `${path}@${at}`);
          if (header.seq === target - 1) {
            found = end;
            return false;
          }
          return true;
        });
        if (found === undefined) {
          throw new QueueError(`${path}: no record before seq ${target} for the consumer cursor`, {
            code: 'queue_corrupt',
          });
        }
        offset = found;
      }
      this.#reader = { base, handle, offset, seq: target };
      return true;
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  /**
   * Persist the consumer position: records before `next` (default: everything read) are done and will
   * not be read again after a restart. With `autoGc`, fully committed segments are then deleted.
   */
  commit(next?: number): Promise<void> {
    // Commits are serialized; a read waiting for records does not hold them up.
    const run = this.#committing.then(() => this.#commit(next));
    this.#committing = run.catch(() => {});
    return run;
  }

  async #commit(next: number | undefined): Promise<void> {
    this.#need('consumer', 'commit');
    const target = next ?? this.readPosition;
    if (!Number.isInteger(target) || target < this.#committed || target > this.readPosition) {
      throw new ConfigError(
        `SampleQueue.commit next: expected an integer between the committed position ${this.#committed} and the read position ${this.readPosition}, found ${describeValue(next)}`,
      );
    }
    if (target === this.#committed) return;
    const reader = this.#reader!;
    const position =
      target === reader.seq ? { segment: reader.base, offset: reader.offset } : this.#starts.get(target)!;
    const cursor: Cursor = { version: 1, next: target, ...position };
    const path = join(this.dir, CURSOR_FILE);
    const tmp = `${path}.tmp`;
    const handle = await open(tmp, 'w');
    try {
      await handle.writeFile(`${JSON.stringify(cursor)}\n`);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, path);
    await syncDir(this.dir);
    this.#cursor = cursor;
    this.#committed = target;
    for (const seq of this.#starts.keys()) if (seq < target) this.#starts.delete(seq);
    this.emit('commit', { next: target });
    if (this.#autoGc) await this.gc();
  }

  /** Move the read position back to the committed one, so uncommitted records are read again. */
  async rewind(): Promise<void> {
    await this.#reading;
    this.#need('consumer', 'rewind');
    await this.#committing;
    await this.#reader?.handle.close();
    this.#reader = undefined;
    this.#delivered = undefined;
    this.#starts.clear();
  }

  /**
   * Delete segments whose records are all committed, keeping their keys in `keys.log`. Returns the
   * deleted files.
   */
  async gc(): Promise<string[]> {
    this.#need('consumer', 'gc');
    const bases = await listSegments(this.dir);
    const removed: string[] = [];
    for (let i = 0; i + 1 < bases.length && bases[i + 1]! <= this.#committed; i++) {
      const path = this.#path(bases[i]!);
      const buf = await readFile(path);
      const pairs: Array<[string, number]> = [];
      scanFrames(buf, FILE_HEADER_BYTES, (payload, at) => {
        const { header } = readRecordHeader(payload, `${path}@${at}`);
        pairs.push([header.key, header.seq]);
        return true;
      });
      await this.#appendKeys(pairs);
      await unlink(path);
      removed.push(path);
      this.emit('gc', { segment: path, records: pairs.length });
    }
    if (removed.length > 0) await syncDir(this.dir);
    return removed;
  }

  async #appendKeys(pairs: Array<[string, number]>): Promise<void> {
    if (!this.#keysLog) {
      const path = join(this.dir, KEYS_FILE);
      const existing = await readIfExists(path);
      const handle = await open(path, existing ? 'r+' : 'w');
      let size = FILE_HEADER_BYTES;
      if (existing && existing.length >= FILE_HEADER_BYTES) {
        readFileHeader(existing, KEYS_MAGIC, path);
        // Cut off an entry torn by a crash; its segment was not deleted, so its keys come again.
        size = scanFrames(existing, FILE_HEADER_BYTES, () => true).end;
        await handle.truncate(size);
      } else {
        await handle.truncate(0);
        await handle.write(fileHeader(KEYS_MAGIC, 0), 0, FILE_HEADER_BYTES, 0);
      }
      await handle.sync();
      if (!existing) await syncDir(this.dir);
      this.#keysLog = handle;
    }
    const payload = encodeKeyPairs(pairs);
    const { size } = await this.#keysLog.stat();
    const frame = Buffer.concat([frameHeader([payload]), payload]);
    await this.#keysLog.write(frame, 0, frame.length, size);
    await this.#keysLog.sync();
  }

  async #loadCursor(): Promise<void> {
    const path = join(this.dir, CURSOR_FILE);
    const raw = await readIfExists(path);
    if (!raw) return;
    let json: unknown;
    try {
      json = JSON.parse(raw.toString('utf8'));
    } catch (cause) {
      throw new QueueError(
        `${path} is not JSON; it is written atomically, so the file was edited or damaged`,
        {
          code: 'queue_corrupt',
          cause,
        },
      );
    }
    this.#cursor = parseWith(CursorSchema, json, 'consumer cursor', {
      root: CURSOR_FILE,
      code: 'queue_corrupt',
    });
    this.#committed = this.#cursor.next;
  }

  // ------------------------------------------------------------------------------------------------

  /** Wait for pending appends, then release files and locks. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closing = true;
    for (const wake of this.#wakeReaders) wake();
    await this.#flushing;
    await this.#reading;
    await this.#committing;
    this.#closed = true;
    await this.#active?.handle.close();
    await this.#reader?.handle.close();
    await this.#keysLog?.close();
    for (const wake of this.#wakeReaders) wake();
    for (const release of this.#releases.splice(0)) await release();
  }

  #path(base: number): string {
    return join(this.dir, segmentName(base));
  }

  #need(role: 'producer' | 'consumer', what: string): void {
    if (this.#closed)
      throw new QueueError(`SampleQueue.${what}: the queue is closed`, { code: 'queue_closed' });
    if (this.mode !== 'both' && this.mode !== role) {
      throw new ConfigError(
        `SampleQueue.${what} is a ${role} operation; open the queue with mode '${role}' or 'both' (it was opened as '${this.mode}')`,
      );
    }
  }
}
