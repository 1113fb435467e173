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
 * - On open, a torn tail left by a killed producer is cut off at the last complete frame; damage
 *   anywhere else is refused (`queue_corrupt`) until `SampleQueue.repair` quarantines it. Segments the
 *   consumer has fully committed are deleted (their keys are kept in `keys.log` for `has`).
 *
 * The producer half lives in `writer.ts`, the consumer half in `reader.ts`, the bytes in `format.ts`.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { EventEmitter } from 'eventemitter3';
import { ConfigError, describeValue } from '../errors.js';
import type { Sample } from '../sample.js';
import { QueueError } from './format.js';
import { acquireLock } from './lock.js';
import { type CommitOptions, type QueueBatch, QueueReader, type ReadOptions } from './reader.js';
import { type RepairReport, repairQueue } from './repair.js';
import { type AppendResult, QueueWriter } from './writer.js';

/** Options of a `SampleQueue`. */
export interface SampleQueueOptions {
  /** Which side this handle plays. Each side takes a lock: one producer and one consumer per queue. Default `both`. */
  mode?: 'producer' | 'consumer' | 'both' | undefined;
  /** Start a new segment once the active one reaches this size. Default 64 MiB. */
  segmentBytes?: number | undefined;
  /** Flush every group commit to disk (`fdatasync`), so acknowledged appends survive a machine crash too. Default true. */
  sync?: boolean | undefined;
  /** How often a waiting `read` looks for records appended by another process, ms. Default 50. */
  pollMs?: number | undefined;
  /** Delete fully committed segments on `commit`. Default true. */
  autoGc?: boolean | undefined;
}

/** The events of a `SampleQueue`. */
export interface QueueEvents {
  append: [{ seq: number; key: string; bytes: number }];
  /** One group commit: the records written together and, with `sync`, flushed by one `fdatasync`. */
  flush: [{ records: number; bytes: number; synced: boolean; durationMs: number }];
  commit: [{ next: number }];
  gc: [{ segment: string; records: number }];
}

type Mode = 'producer' | 'consumer' | 'both';

/** A durable log of sample records: one producer appends, one consumer reads and commits its position. */
export class SampleQueue extends EventEmitter<QueueEvents> {
  readonly dir: string;
  readonly mode: Mode;
  readonly #releases: Array<() => Promise<void>> = [];
  #writer: QueueWriter | undefined;
  #reader: QueueReader | undefined;
  #closed = false;

  private constructor(dir: string, mode: Mode) {
    super();
    this.dir = dir;
    this.mode = mode;
  }

  /** Open (or create) the queue in `dir`, recovering from a crash of a previous producer or consumer. */
  static async open(dir: string, options: SampleQueueOptions = {}): Promise<SampleQueue> {
    if (typeof dir !== 'string' || dir === '') {
      throw new ConfigError(`SampleQueue.open dir: expected a directory path, found ${describeValue(dir)}`);
    }
    const { mode = 'both', segmentBytes = 64 << 20, sync = true, pollMs = 50, autoGc = true } = options;
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
    const queue = new SampleQueue(dir, mode);
    try {
      if (mode !== 'consumer') {
        queue.#releases.push(await acquireLock(join(dir, 'producer.lock'), 'producer'));
      }
      if (mode !== 'producer') {
        queue.#releases.push(await acquireLock(join(dir, 'consumer.lock'), 'consumer'));
      }
      // The cursor is read first: the producer checks that no committed record is missing.
      const reader = await QueueReader.open(
        dir,
        { pollMs, autoGc },
        {
          committed: (e) => queue.emit('commit', e),
          collected: (e) => queue.emit('gc', e),
        },
      );
      if (mode !== 'producer') queue.#reader = reader;
      if (mode !== 'consumer') {
        queue.#writer = await QueueWriter.open(
          dir,
          { segmentBytes, sync, committed: reader.committed },
          {
            flushed: (e) => queue.emit('flush', e),
            appended: (e) => {
              queue.emit('append', e);
              queue.#reader?.wake();
            },
          },
        );
      }
    } catch (error) {
      await queue.close().catch(() => {});
      throw error;
    }
    return queue;
  }

  /**
   * Make a damaged queue openable again, keeping every intact record: each damaged byte range is moved
   * to `quarantine/` and the records it held are replaced by stand-ins that keep sequence numbers
   * dense (their keys are forgotten, so a producer appends them again). Takes both locks: no producer
   * or consumer may have the queue open. Safe to run on a healthy queue (it changes nothing).
   */
  static async repair(dir: string): Promise<RepairReport> {
    if (typeof dir !== 'string' || dir === '') {
      throw new ConfigError(`SampleQueue.repair dir: expected a directory path, found ${describeValue(dir)}`);
    }
    const releases = [await acquireLock(join(dir, 'producer.lock'), 'producer')];
    try {
      releases.push(await acquireLock(join(dir, 'consumer.lock'), 'consumer'));
    } catch (error) {
      await releases[0]!();
      throw error;
    }
    try {
      return await repairQueue(dir);
    } finally {
      for (const release of releases) await release();
    }
  }

  /** A torn tail cut off while opening (the bytes of an append that never completed), if any. */
  get recovered(): { segment: string; truncatedBytes: number } | undefined {
    return this.#writer?.recovered;
  }

  // Producer ------------------------------------------------------------------------------------

  /** Sequence number the next new record gets. */
  get nextSeq(): number {
    return this.#producer('nextSeq').nextSeq;
  }

  /** Whether a record with `key` was appended (consumed or not). */
  has(key: string): boolean {
    return this.#producer('has').has(key);
  }

  /** The sequence number of the record with `key`, if it was appended. */
  seqOf(key: string): number | undefined {
    return this.#producer('seqOf').seqOf(key);
  }

  /** Every key appended so far (consumed or not). */
  keys(): IterableIterator<string> {
    return this.#producer('keys').keys();
  }

  /**
   * Append one record: `samples` (any number, including none) under a unique `key`, with optional JSON-like
   * `meta`. Resolves when the record is durable. A key already in the queue is not written again.
   */
  append(
    key: string,
    samples: ReadonlyArray<Sample>,
    options: { meta?: Record<string, unknown> | undefined } = {},
  ): Promise<AppendResult> {
    try {
      return this.#producer('append').append(key, samples, options.meta);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  // Consumer ------------------------------------------------------------------------------------

  /** The committed position: the sequence number the consumer reads first after a restart. */
  get committed(): number {
    return this.#consumer('committed').committed;
  }

  /** The position after the last record returned by `read` (≥ committed). */
  get readPosition(): number {
    return this.#consumer('readPosition').readPosition;
  }

  /** The `metadata` of the last commit that carried some (e.g. the last step handed off). */
  get committedMetadata(): Record<string, unknown> | undefined {
    return this.#consumer('committedMetadata').metadata;
  }

  /**
   * Read the next records after the read position. Returns an empty batch when nothing is available,
   * unless `wait` is set. Reads are serialized.
   */
  read(options: ReadOptions = {}): Promise<QueueBatch> {
    try {
      return this.#consumer('read').read(options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Persist the consumer position: records before `next` (default: everything read) are done and will
   * not be read again after a restart; `metadata` is saved with it, atomically. With `autoGc`, fully
   * committed segments are then deleted.
   */
  commit(next?: number, options: CommitOptions = {}): Promise<void> {
    try {
      return this.#consumer('commit').commit(next, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Move the read position back to the committed one, so uncommitted records are read again. */
  async rewind(): Promise<void> {
    await this.#consumer('rewind').rewind();
  }

  /** Delete segments whose records are all committed, keeping their keys in `keys.log`. Returns the deleted files. */
  async gc(): Promise<string[]> {
    return this.#consumer('gc').gc();
  }

  // ---------------------------------------------------------------------------------------------

  /** Wait for pending appends, then release files and locks. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#writer?.close();
    await this.#reader?.close();
    for (const release of this.#releases.splice(0)) await release();
  }

  #producer(what: string): QueueWriter {
    this.#open(what);
    if (!this.#writer) throw this.#wrongSide('producer', what);
    return this.#writer;
  }

  #consumer(what: string): QueueReader {
    this.#open(what);
    if (!this.#reader) throw this.#wrongSide('consumer', what);
    return this.#reader;
  }

  #open(what: string): void {
    if (this.#closed) {
      throw new QueueError(`SampleQueue.${what}: the queue is closed`, { code: 'queue_closed' });
    }
  }

  #wrongSide(role: string, what: string): ConfigError {
    return new ConfigError(
      `SampleQueue.${what} is a ${role} operation; open the queue with mode '${role}' or 'both' (it was opened as '${this.mode}')`,
    );
  }
}
