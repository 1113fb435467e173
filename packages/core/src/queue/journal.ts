/**
 * The storage of a `GroupQueue`: a journal of events in segment files (the `SampleQueue` segment and
 * record format, unchanged), a snapshot of the state, and random-access reads of the records that
 * hold samples.
 *
 * Events are applied to the in-memory state as they are queued (so the next decision sees them) and
 * written in that order with group commit; a caller's promise resolves once its event is on disk,
 * which means every earlier event is too. A failed write leaves the state ahead of the disk, so the
 * journal refuses further work until it is reopened.
 *
 * Files: `<seq>.seg` segments; `state.snap` (magic `VIMEUST1`, u64 seq, one CRC frame of msgpack): the
 * state after record `seq`, so opening reads only later records. It is replaced whole (write, flush,
 * rename). A segment is never appended to after the owner that wrote it closes (the next owner starts
 * a new one), so a fork can share segments by hard links.
 */
import type { FileHandle } from 'node:fs/promises';
import { open, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Decoder, Encoder } from '@msgpack/msgpack';
import { z } from 'zod';
import { encodeSamples } from '../codec.js';
import type { Sample } from '../sample.js';
import { syncDir } from '../utils/files.js';
import { parseWith } from '../validate.js';
import { type FlushInfo, type RecordPosition, SegmentAppender } from './appender.js';
import { ioError, listSegments, readIfExists, replaceQueueFile, writeAll } from './files.js';
import {
  corrupt,
  decodeRecordSamples,
  encodeRecordHeader,
  FILE_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  fileHeader,
  frame,
  QueueError,
  type RecordHeader,
  readFileHeader,
  readRecordHeader,
  scanFrames,
  segmentName,
} from './format.js';
import { type DataRef, EventSchemas, isEventType, type UnitEvent } from './group-events.js';
import { applyEvent, emptyState, type GroupState, type UnitState } from './group-state.js';

const encoder = new Encoder({ ignoreUndefined: true });
const decoder = new Decoder();

export const STATE_MAGIC = Buffer.from('VIMEUST1', 'latin1');
export const STATE_FILE = 'state.snap';
const STATE_VERSION = 1;
/** Bytes of recent record payloads kept in memory for reads (see `Journal.read`). */
const CACHE_BYTES = 64 << 20;

// --- State snapshots ------------------------------------------------------------------------------

const nat = z.number().int().nonnegative();
const nullableNat = nat.nullable();
const Ref = z.tuple([nat, nat, nat]);
const SlotSchema = z.object({
  next: nat,
  tries: nat,
  lost: nat,
  live: z
    .object({
      attempt: nat,
      lease: nat,
      worker: z.string(),
      deadline: z.number(),
      at: z.number(),
      from: nat.optional(),
    })
    .optional(),
  done: z
    .object({
      attempt: nat,
      ref: Ref,
      status: z.enum(['completed', 'truncated']),
      reward: z.number(),
      lo: nullableNat,
      hi: nullableNat,
      at: z.number(),
    })
    .optional(),
  partial: z.object({ attempt: nat, ref: Ref, lo: nullableNat, hi: nullableNat, at: z.number() }).optional(),
});
const SnapshotSchema = z.object({
  version: z.literal(STATE_VERSION),
  seq: nat,
  session: nat,
  nextGroup: nat,
  nextLease: nat,
  keys: z.array(z.tuple([z.string(), nat])),
  groups: z.array(
    z.object({
      id: nat,
      key: z.string().optional(),
      n: nat,
      payload: z.unknown(),
      at: z.number(),
      status: z.enum(['open', 'complete', 'handed', 'dropped']),
      slots: z.array(SlotSchema),
      started: z.boolean(),
      reason: EventSchemas.drop.shape.reason.optional(),
      doneAt: z.number().optional(),
      doneSeq: nat.optional(),
      step: nat.optional(),
    }),
  ),
  steps: z.array(
    z.object({
      step: nat,
      version: nat,
      groups: z.array(nat),
      stale: z.array(z.tuple([nat, nat])),
      at: z.number(),
    }),
  ),
  trainer: z.object({ step: nat, version: nat }),
  checkpoints: z.array(z.object({ step: nat, version: nat, seq: nat, at: z.number() })),
  counts: z.object({
    created: nat,
    completed: nat,
    handed: nat,
    dropped: z.record(EventSchemas.drop.shape.reason, nat),
    started: nat,
    attempts: nat,
    failed: nat,
    expired: nat,
    lost: nat,
    partials: nat,
    restarted: nat,
  }),
  branch: z.object({ parent: z.string(), fromStep: nat, at: z.number() }).optional(),
  collected: z.object({ groups: nat, steps: nat }),
});

/** The state as one msgpack value (maps as arrays). */
export function encodeState(state: UnitState): Uint8Array {
  const { groups, keys, steps, checkpoints, ...rest } = state;
  return encoder.encode({
    version: STATE_VERSION,
    ...rest,
    keys: [...keys],
    groups: [...groups.values()],
    steps: [...steps.values()],
    checkpoints: [...checkpoints.values()],
  });
}

export function decodeState(bytes: Uint8Array, where: string): UnitState {
  let raw: unknown;
  try {
    raw = decoder.decode(bytes);
  } catch (cause) {
    throw corrupt(where, undefined, 'the state snapshot is not msgpack', cause);
  }
  const s = parseWith(SnapshotSchema, raw, 'state snapshot', { root: where, code: 'queue_corrupt' });
  const state = emptyState();
  Object.assign(state, {
    seq: s.seq,
    session: s.session,
    nextGroup: s.nextGroup,
    nextLease: s.nextLease,
    trainer: s.trainer,
    counts: s.counts,
    branch: s.branch,
    collected: s.collected,
  });
  for (const g of s.groups) state.groups.set(g.id, g as GroupState);
  for (const [key, id] of s.keys) state.keys.set(key, id);
  for (const step of s.steps) state.steps.set(step.step, step);
  for (const c of s.checkpoints) state.checkpoints.set(c.step, c);
  return state;
}

/** Deep copy through the snapshot encoding. */
export const cloneState = (state: UnitState): UnitState => decodeState(encodeState(state), 'copy');

export async function writeStateFile(path: string, state: UnitState): Promise<void> {
  // Header and body from the same instant: the state moves on while the file is being opened.
  const bytes = Buffer.concat([fileHeader(STATE_MAGIC, state.seq), frame(encodeState(state))]);
  await replaceQueueFile(path, (h) => writeAll(h, bytes, 0));
}

export async function readStateFile(path: string): Promise<UnitState | undefined> {
  const buf = await readIfExists(path);
  if (!buf) return undefined;
  const seq = readFileHeader(buf, STATE_MAGIC, path);
  let payload: Buffer | undefined;
  const { stop } = scanFrames(buf, FILE_HEADER_BYTES, (p) => {
    payload = p;
    return false;
  });
  if (!payload || stop !== 'end')
    throw corrupt(path, FILE_HEADER_BYTES, 'the state snapshot frame is damaged');
  const state = decodeState(payload, path);
  if (state.seq !== seq) throw corrupt(path, 8, `the header says seq ${seq}, the state ${state.seq}`);
  return state;
}

// --- The journal ----------------------------------------------------------------------------------

export interface JournalHooks {
  flushed: (e: FlushInfo) => void;
  /** Groups an applied event touched (for the owner's indexes). */
  touched: (groups: number[]) => void;
}

export interface StoredRecord {
  type: string;
  meta: Record<string, unknown>;
  samples: Sample[];
}

/** An event queued for writing: its seq, where its record will be, and when it is on disk. */
export interface Appended {
  seq: number;
  ref: DataRef;
  time: number;
  written: Promise<void>;
}

export class Journal {
  readonly dir: string;
  readonly state: UnitState;
  /** Undefined for a read-only journal (`inspect`). */
  readonly #log: SegmentAppender | undefined;
  readonly #hooks: JournalHooks;
  #next: number;
  #durable: number;
  #broken: QueueError | undefined;
  readonly #waiters: Array<{ seq: number; wake: () => void }> = [];
  readonly #handles = new Map<number, Promise<FileHandle>>();
  /**
   * The payloads of recent records that hold samples, by seq: the trainer reads a result soon after it
   * was written, and decoding it from memory saves two reads per sibling (bounded: `CACHE_BYTES`).
   */
  readonly #recent = new Map<number, { header: Buffer; body: Uint8Array }>();
  #recentBytes = 0;

  private constructor(dir: string, state: UnitState, log: SegmentAppender | undefined, hooks: JournalHooks) {
    this.dir = dir;
    this.state = state;
    this.#log = log;
    this.#hooks = hooks;
    this.#next = log?.nextSeq ?? state.seq + 1;
    this.#durable = this.#next - 1;
  }

  /** Read the snapshot, then every later record, cutting off a torn tail. */
  static async open(
    dir: string,
    options: { segmentBytes: number; sync: boolean },
    hooks: JournalHooks,
  ): Promise<Journal> {
    const statePath = join(dir, STATE_FILE);
    let state = await readStateFile(statePath);
    if (!state) {
      if ((await listSegments(dir)).length > 0) {
        throw new QueueError(
          `${dir} holds segment files but no ${STATE_FILE}: it is not a GroupQueue (a SampleQueue directory?), or its snapshot was deleted. Open it with the class that wrote it`,
          { code: 'queue_corrupt', data: { path: statePath } },
        );
      }
      state = emptyState();
      await writeStateFile(statePath, state);
    }
    const s = state;
    const log = await SegmentAppender.open(
      dir,
      {
        ...options,
        from: s.seq + 1,
        reopenLast: false,
        onRecord: (header, _payload, position) => replayRecord(dir, s, header, position),
      },
      hooks.flushed,
    );
    log.startAt(Math.max(log.nextSeq, s.seq + 1));
    return new Journal(dir, s, log, hooks);
  }

  /**
   * The state of a queue directory read without taking it over (no lock, nothing written): for a
   * debug replay while its owner runs, or after. A torn tail is ignored, not cut off.
   */
  static async inspect(dir: string): Promise<Journal> {
    const statePath = join(dir, STATE_FILE);
    const state = await readStateFile(statePath);
    if (!state) {
      throw new QueueError(`${dir} holds no ${STATE_FILE}: it is not a GroupQueue directory`, {
        code: 'queue_corrupt',
        data: { path: statePath },
      });
    }
    const bases = await listSegments(dir);
    for (const [i, base] of bases.entries()) {
      if (i < bases.length - 1 && bases[i + 1]! <= state.seq + 1) continue;
      const buf = await readIfExists(join(dir, segmentName(base)));
      if (!buf || buf.length < FILE_HEADER_BYTES) continue;
      scanFrames(buf, FILE_HEADER_BYTES, (payload, offset, end) => {
        const { header } = readRecordHeader(payload, `${segmentName(base)}@${offset}`);
        replayRecord(dir, state, header, { seq: header.seq, segment: base, offset, bytes: end - offset });
        return true;
      });
    }
    return new Journal(dir, state, undefined, { flushed: () => {}, touched: () => {} });
  }

  get recovered(): { segment: string; truncatedBytes: number } | undefined {
    return this.#log?.recovered;
  }

  #writer(): SegmentAppender {
    if (!this.#log) throw new QueueError(`${this.dir} was opened read-only`, { code: 'queue_closed' });
    return this.#log;
  }

  /** Highest seq on disk. */
  get durable(): number {
    return this.#durable;
  }

  /** Throws when a failed write left the state ahead of the disk. */
  check(): void {
    if (this.#broken) throw this.#broken;
  }

  /**
   * Apply `event` now and queue it (with `samples` as the record body) for writing. `defer`: nobody
   * waits for it, so it goes to disk with the next record someone does wait for (see `AppendEntry`).
   */
  append(
    event: UnitEvent,
    samples?: ReadonlyArray<Sample>,
    options: { defer?: boolean | undefined } = {},
  ): Appended {
    this.check();
    const log = this.#writer();
    const { type, ...meta } = event;
    const body = encodeSamples(samples ?? []);
    const n = samples?.length ?? 0;
    const seq = this.#next++;
    const time = Date.now();
    const ref: DataRef = [0, 0, seq];
    const header = encodeRecordHeader({ seq, key: type, time, n, meta });
    const written = new Promise<void>((resolve, reject) => {
      log.append({
        defer: options.defer,
        estimate: body.length + header.length,
        encode: (at) => {
          if (at !== seq) throw new QueueError(`journal record numbered ${at}, expected ${seq}`);
          return [header, body];
        },
        written: (position) => {
          ref[0] = position.segment;
          ref[1] = position.offset;
          if (n > 0) this.#remember(seq, header, body);
          this.#durable = seq;
          this.#wake();
          resolve();
        },
        rejected: (error) => {
          this.#broken ??= new QueueError(
            `a GroupQueue write failed, so its state is ahead of its files; close and reopen the queue (it recovers what is on disk): ${(error as Error).message}`,
            { code: (error as QueueError).code ?? 'queue_error', cause: error },
          );
          this.#wake();
          reject(this.#broken);
        },
      });
    });
    written.catch(() => {});
    this.#hooks.touched(applyEvent(this.state, event, seq, time, ref));
    return { seq, ref, time, written };
  }

  /** Wait until record `seq` is on disk. */
  async writtenThrough(seq: number): Promise<void> {
    while (this.#durable < seq) {
      this.check();
      await new Promise<void>((wake) => this.#waiters.push({ seq, wake }));
    }
  }

  #wake(): void {
    for (let i = this.#waiters.length - 1; i >= 0; i--) {
      const w = this.#waiters[i]!;
      if (w.seq <= this.#durable || this.#broken) {
        this.#waiters.splice(i, 1);
        w.wake();
      }
    }
  }

  #remember(seq: number, header: Buffer, body: Uint8Array): void {
    // The very buffers that were written (nothing copies them after this).
    this.#recent.set(seq, { header, body });
    this.#recentBytes += header.length + body.length;
    // Oldest first (a Map iterates in insertion order).
    for (const [old, parts] of this.#recent) {
      if (this.#recentBytes <= CACHE_BYTES) break;
      this.#recent.delete(old);
      this.#recentBytes -= parts.header.length + parts.body.length;
    }
  }

  /** Read the record at `ref`: its event type, meta and samples. */
  async read(ref: DataRef): Promise<StoredRecord> {
    await this.writtenThrough(ref[2]);
    const [segment, offset, seq] = ref;
    const path = join(this.dir, segmentName(segment));
    const cached = this.#recent.get(seq);
    // Decoded like a record read from disk: the caller gets its own objects either way.
    if (cached) return decodeParts(cached.header, cached.body, seq, path, offset);
    const handle = await this.#handle(segment);
    try {
      const head = Buffer.alloc(FRAME_HEADER_BYTES);
      await handle.read(head, 0, FRAME_HEADER_BYTES, offset);
      const length = head.readUInt32LE(0);
      const buf = Buffer.allocUnsafe(FRAME_HEADER_BYTES + length);
      const { bytesRead } = await handle.read(buf, 0, buf.length, offset);
      let out: StoredRecord | undefined;
      scanFrames(buf.subarray(0, bytesRead), 0, (payload) => {
        out = decodeRecord(payload, seq, path, offset);
        return false;
      });
      if (!out) throw corrupt(path, offset, `no intact record ${seq} where the state points`);
      return out;
    } catch (error) {
      throw ioError(`reading record ${seq} of ${path}`, error);
    }
  }

  #handle(segment: number): Promise<FileHandle> {
    let h = this.#handles.get(segment);
    if (!h) {
      h = open(join(this.dir, segmentName(segment)), 'r');
      h.catch(() => this.#handles.delete(segment));
      this.#handles.set(segment, h);
    }
    return h;
  }

  /** Wait for queued events, then write the state snapshot (opening then reads only later records); returns its seq. */
  async snapshot(): Promise<number> {
    // Appends queued while waiting are applied already: wait until the disk has caught up with them.
    do {
      await this.#writer().drain();
      this.check();
    } while (this.#durable !== this.state.seq);
    const seq = this.state.seq;
    await writeStateFile(join(this.dir, STATE_FILE), this.state);
    return seq;
  }

  /** Seal the active segment: every record so far is then in a file that is never written again. */
  async seal(): Promise<void> {
    await this.#writer().seal();
    this.check();
  }

  /** The segment the next record goes to, if it is open (not sealed). */
  get writableSegment(): number | undefined {
    return this.#log?.writableSegment;
  }

  /** Delete segment files (GC). */
  async deleteSegments(bases: number[]): Promise<void> {
    if (bases.length > 0) this.#forgetRecent();
    for (const base of bases) {
      const h = this.#handles.get(base);
      this.#handles.delete(base);
      await h?.then((x) => x.close()).catch(() => {});
      await unlink(join(this.dir, segmentName(base))).catch((error: NodeJS.ErrnoException) => {
        if (error.code !== 'ENOENT') throw ioError(`deleting ${segmentName(base)}`, error);
      });
    }
    if (bases.length > 0) await syncDir(this.dir);
  }

  #forgetRecent(): void {
    this.#recent.clear();
    this.#recentBytes = 0;
  }

  async close(): Promise<void> {
    this.#forgetRecent();
    await this.#log?.close();
    for (const h of this.#handles.values()) await h.then((x) => x.close()).catch(() => {});
    this.#handles.clear();
  }
}

function decodeRecord(payload: Buffer, seq: number, path: string, offset: number): StoredRecord {
  const where = `${path}@${offset}`;
  const { header, bodyStart } = readRecordHeader(payload, where);
  if (header.seq !== seq) throw corrupt(path, offset, `record has seq ${header.seq}, expected ${seq}`);
  const samples = decodeRecordSamples(payload, bodyStart, header, where);
  return { type: header.key, meta: header.meta ?? {}, samples };
}

function decodeParts(
  headerBytes: Buffer,
  body: Uint8Array,
  seq: number,
  path: string,
  offset: number,
): StoredRecord {
  const where = `${path}@${offset}`;
  const { header } = readRecordHeader(headerBytes, where);
  if (header.seq !== seq) throw corrupt(path, offset, `record has seq ${header.seq}, expected ${seq}`);
  const samples = decodeRecordSamples(
    Buffer.from(body.buffer, body.byteOffset, body.byteLength),
    0,
    header,
    where,
  );
  return { type: header.key, meta: header.meta ?? {}, samples };
}

/** Apply record `header` (found at `position`) to `state` if it follows the state's last record. */
function replayRecord(dir: string, state: UnitState, header: RecordHeader, position: RecordPosition): void {
  if (header.seq <= state.seq) return;
  const where = `${segmentName(position.segment)}@${position.offset}`;
  if (header.seq !== state.seq + 1) {
    throw corrupt(
      join(dir, segmentName(position.segment)),
      position.offset,
      `journal jumps from record ${state.seq} to ${header.seq}`,
    );
  }
  const event = parseEvent(header.key, header.meta, where);
  applyEvent(state, event, header.seq, header.time, [position.segment, position.offset, header.seq]);
}

/** A journal record back as a typed event (`queue_corrupt` when it is not one). */
export function parseEvent(key: string, meta: unknown, where: string): UnitEvent {
  if (!isEventType(key)) {
    throw new QueueError(`${where}: record type ${JSON.stringify(key)} is not a GroupQueue event`, {
      code: 'queue_corrupt',
    });
  }
  const fields = parseWith(EventSchemas[key], meta ?? {}, `${key} event`, {
    root: where,
    code: 'queue_corrupt',
  });
  return { type: key, ...fields } as UnitEvent;
}
