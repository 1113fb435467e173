/**
 * The producer half of a `SampleQueue`: recovers the segments on open (index every key, cut off a torn
 * tail, refuse damage) and appends keyed records with group commit, both through `SegmentAppender`.
 */
import { encodeSamples } from '../codec.js';
import { describeValue, ValidationError } from '../errors.js';
import type { Sample } from '../sample.js';
import { type FlushInfo, SegmentAppender } from './appender.js';
import { encodeRecordHeader, MAX_PAYLOAD_BYTES, QueueError } from './format.js';
import { loadKeys } from './keys.js';

/** What appending a record did: its sequence number, or nothing when its key was already there. */
export interface AppendResult {
  seq: number;
  /** The key was already in the queue; nothing was written. */
  duplicate: boolean;
}

export interface WriterHooks {
  /** One group commit was written (and flushed with `sync`). */
  flushed: (e: FlushInfo) => void;
  appended: (e: { seq: number; key: string; bytes: number }) => void;
}

export class QueueWriter {
  readonly #hooks: WriterHooks;
  readonly #index = new Map<string, number>();
  readonly #inflight = new Map<string, Promise<AppendResult>>();
  readonly #log: SegmentAppender;

  private constructor(log: SegmentAppender, hooks: WriterHooks) {
    this.#log = log;
    this.#hooks = hooks;
  }

  /** Index every record, cut off a torn tail of the last segment, and reopen it for appending. */
  static async open(
    dir: string,
    options: { segmentBytes: number; sync: boolean; committed: number },
    hooks: WriterHooks,
  ): Promise<QueueWriter> {
    const index = new Map<string, number>();
    const log = await SegmentAppender.open(
      dir,
      {
        segmentBytes: options.segmentBytes,
        sync: options.sync,
        onRecord: (header) => {
          if (header.lost === undefined) index.set(header.key, header.seq);
        },
      },
      hooks.flushed,
    );
    try {
      const end = log.recoveredEnd;
      if (end !== undefined && options.committed > end) {
        throw new QueueError(
          `the consumer cursor is at seq ${options.committed} but the queue's records end before ${end}; records were removed`,
          { code: 'queue_corrupt', data: { committed: options.committed, next: end } },
        );
      }
      if (end === undefined) log.startAt(Math.max(1, options.committed));
      // Keys of segments the consumer already deleted. Read after the segments, so none is missed.
      for (const [key, seq] of await loadKeys(dir)) {
        if (!index.has(key)) index.set(key, seq);
      }
    } catch (error) {
      await log.close();
      throw error;
    }
    const writer = new QueueWriter(log, hooks);
    for (const [key, seq] of index) writer.#index.set(key, seq);
    return writer;
  }

  get recovered(): { segment: string; truncatedBytes: number } | undefined {
    return this.#log.recovered;
  }

  get nextSeq(): number {
    return this.#log.nextSeq;
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
    const broken = this.#log.broken;
    if (broken) throw broken;
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
    const n = samples.length;
    const promise = new Promise<AppendResult>((resolve, reject) => {
      this.#log.append({
        estimate: body.length,
        encode: (seq, time) => [
          encodeRecordHeader(meta === undefined ? { seq, key, time, n } : { seq, key, time, n, meta }),
          body,
        ],
        written: ({ seq }) => {
          this.#index.set(key, seq);
          resolve({ seq, duplicate: false });
          this.#hooks.appended({ seq, key, bytes: body.length });
        },
        rejected: reject,
      });
    });
    this.#inflight.set(key, promise);
    const forget = () => this.#inflight.delete(key);
    promise.then(forget, forget);
    return promise;
  }

  /** Wait for pending appends, then close the active segment. */
  async close(): Promise<void> {
    await this.#log.close();
  }
}
