/**
 * On-disk format of a `SampleQueue` (all integers little-endian).
 *
 * Segment file `<first seq, 20 digits>.seg`:
 *   16-byte header: magic `VIMEQSG1` (8 bytes), u64 first seq.
 *   frames, back to back. Records carry dense sequence numbers starting at the first seq.
 * Frame: u32 payload length (> 0), u32 CRC-32 (zlib) of the payload, payload.
 * Record payload: u32 header length, header (msgpack map `{ seq, key, time, n?, meta?, lost? }`), then
 *   the record's `n` samples as one `encodeSamples` batch (a msgpack array of slime `Sample.to_dict()`
 *   maps). A record with `lost` (key `''`, no samples) stands for a record whose bytes `repair` moved to
 *   the quarantine file it names; it keeps the sequence numbers dense.
 * Keys file `keys.log` (keys of segments already deleted by GC): 16-byte header, magic `VIMEQKY1` and
 *   8 zero bytes, then frames whose payload is a msgpack array of `[key, seq]` pairs.
 * Cursor file `cursor.json`: the consumer's committed position (see `CursorSchema`).
 *
 * A frame is valid only if it is complete and its CRC matches. An invalid frame with nothing valid
 * after it is a torn tail (a write cut short by a crash: it was never acknowledged) and is cut off; an
 * invalid frame followed by a valid one is damage, which is refused, never cut off.
 */
import { crc32 } from 'node:zlib';
import { Decoder, Encoder } from '@msgpack/msgpack';
import { z } from 'zod';
import { decodeSamples } from '../codec.js';
import { errorMarker, hasErrorMarker, VimeError, type VimeErrorOptions } from '../errors.js';
import type { Sample } from '../sample.js';
import { parseWith } from '../validate.js';

// Shared instances: `encode()` / `decode()` build a new (de)coder with its own buffer on every call.
const encoder = new Encoder({ ignoreUndefined: true });
const decoder = new Decoder();

export const SEGMENT_MAGIC = Buffer.from('VIMEQSG1', 'latin1');
export const KEYS_MAGIC = Buffer.from('VIMEQKY1', 'latin1');
export const FILE_HEADER_BYTES = 16;
export const FRAME_HEADER_BYTES = 8;
/** Largest payload one frame may carry (1 GiB). */
export const MAX_PAYLOAD_BYTES = 1 << 30;
/** Sample cap for records written before headers carried their sample count `n`. */
const LEGACY_MAX_SAMPLES = 65_536;

export const KEYS_FILE = 'keys.log';
export const CURSOR_FILE = 'cursor.json';
export const QUARANTINE_DIR = 'quarantine';

const queueMarker = errorMarker('QueueError');

/** The queue's files could not be used as they are: corrupt, locked, full, or misused. */
export class QueueError extends VimeError {
  readonly [queueMarker] = true;
  constructor(message: string, options: VimeErrorOptions & { code?: string | undefined } = {}) {
    super(options.code ?? 'queue_error', message, options);
  }

  /** Whether `value` is a `QueueError`, from any copy of this package. */
  static override isInstance(value: unknown): value is QueueError {
    return hasErrorMarker(value, queueMarker);
  }
}

/** A `queue_corrupt` error naming the file and byte offset, with the way out. */
export function corrupt(path: string, offset: number | undefined, why: string, cause?: unknown): QueueError {
  const where = offset === undefined ? path : `${path} at byte ${offset}`;
  return new QueueError(
    `${where}: ${why}. Nothing was changed; SampleQueue.repair(dir) moves the damaged bytes to ${QUARANTINE_DIR}/ and keeps every intact record`,
    { code: 'queue_corrupt', cause, data: { path, offset } },
  );
}

export const segmentName = (firstSeq: number): string => `${String(firstSeq).padStart(20, '0')}.seg`;
export const SEGMENT_NAME = /^(\d{20})\.seg$/;

export function fileHeader(magic: Buffer, value: number): Buffer {
  const header = Buffer.alloc(FILE_HEADER_BYTES);
  magic.copy(header, 0);
  header.writeBigUInt64LE(BigInt(value), 8);
  return header;
}

/** Validate a 16-byte file header; returns its u64 value. */
export function readFileHeader(buf: Buffer, magic: Buffer, path: string): number {
  if (buf.length < FILE_HEADER_BYTES || !buf.subarray(0, 8).equals(magic)) {
    throw corrupt(path, 0, `not a ${magic.toString('latin1')} file header`);
  }
  return Number(buf.readBigUInt64LE(8));
}

/** The frame header for `parts` (concatenated they form the payload). */
export function frameHeader(parts: ReadonlyArray<Uint8Array>): Buffer {
  let length = 0;
  let crc = 0;
  for (const part of parts) {
    length += part.length;
    crc = crc32(part, crc);
  }
  const header = Buffer.allocUnsafe(FRAME_HEADER_BYTES);
  header.writeUInt32LE(length, 0);
  header.writeUInt32LE(crc, 4);
  return header;
}

export const frame = (payload: Uint8Array): Buffer => Buffer.concat([frameHeader([payload]), payload]);

export type ScanStop = 'end' | 'partial' | 'corrupt';

/**
 * Walk the frames of `buf` from `start`. Calls `onFrame` for every valid frame (returning false stops
 * the walk after it) and returns where the valid frames end and why scanning stopped: `end` (exactly at
 * the end of `buf`, or stopped by `onFrame`), `partial` (a frame starts but is cut off by the end of
 * `buf`), `corrupt` (a complete frame whose CRC does not match, or an impossible length).
 */
export function scanFrames(
  buf: Buffer,
  start: number,
  onFrame: (payload: Buffer, offset: number, end: number) => boolean | undefined,
): { end: number; stop: ScanStop } {
  let pos = start;
  for (;;) {
    if (pos === buf.length) return { end: pos, stop: 'end' };
    if (pos + FRAME_HEADER_BYTES > buf.length) return { end: pos, stop: 'partial' };
    const length = buf.readUInt32LE(pos);
    // No frame is empty: a run of zeros (space allocated but never written) is not a frame.
    if (length === 0 || length > MAX_PAYLOAD_BYTES) return { end: pos, stop: 'corrupt' };
    const endOfFrame = pos + FRAME_HEADER_BYTES + length;
    if (endOfFrame > buf.length) return { end: pos, stop: 'partial' };
    const payload = buf.subarray(pos + FRAME_HEADER_BYTES, endOfFrame);
    if (crc32(payload) !== buf.readUInt32LE(pos + 4)) return { end: pos, stop: 'corrupt' };
    if (onFrame(payload, pos, endOfFrame) === false) return { end: endOfFrame, stop: 'end' };
    pos = endOfFrame;
  }
}

/**
 * The offset of the first valid frame that starts at or after `from`, looking at every byte offset
 * (after damage the frame boundaries are unknown). `plausible` is a cheap structural check run before
 * the CRC. Decides between a torn tail (nothing valid follows) and damage (something does).
 */
export function findNextFrame(
  buf: Buffer,
  from: number,
  plausible: (payload: Buffer) => boolean,
): number | undefined {
  for (let pos = from; pos + FRAME_HEADER_BYTES < buf.length; pos++) {
    const length = buf.readUInt32LE(pos);
    if (length === 0 || pos + FRAME_HEADER_BYTES + length > buf.length) continue;
    const payload = buf.subarray(pos + FRAME_HEADER_BYTES, pos + FRAME_HEADER_BYTES + length);
    if (plausible(payload) && crc32(payload) === buf.readUInt32LE(pos + 4)) return pos;
  }
  return undefined;
}

/** Shape of a record payload: a header length that fits, then a msgpack map. */
export function plausibleRecord(payload: Buffer): boolean {
  if (payload.length < 5) return false;
  const headerLength = payload.readUInt32LE(0);
  return headerLength > 0 && 4 + headerLength <= payload.length && (payload[4]! & 0xf0) === 0x80;
}

/** Shape of a keys payload: a msgpack array. */
export function plausibleKeys(payload: Buffer): boolean {
  const b = payload[0]!;
  return (b & 0xf0) === 0x90 || b === 0xdc || b === 0xdd;
}

const RecordHeaderSchema = z
  .object({
    seq: z.number().int().positive(),
    key: z.string(),
    time: z.number(),
    /** Number of samples in the record (absent in records written before it was added). */
    n: z.number().int().nonnegative().optional(),
    meta: z.record(z.string(), z.unknown()).optional(),
    /** Set on a stand-in for a quarantined record: the quarantine file, relative to the queue. */
    lost: z.string().optional(),
  })
  .refine((h) => h.lost !== undefined || h.key.length > 0, { message: 'key is empty', path: ['key'] });
export type RecordHeader = z.infer<typeof RecordHeaderSchema>;

/** The record header (and where the samples start) of a record payload. */
export function readRecordHeader(
  payload: Buffer,
  where: string,
): { header: RecordHeader; bodyStart: number } {
  const fail = (why: string, cause?: unknown): never => {
    throw new QueueError(`${where}: malformed record (${why})`, { code: 'queue_corrupt', cause });
  };
  if (payload.length < 4) fail('payload shorter than its header length field');
  const headerLength = payload.readUInt32LE(0);
  if (4 + headerLength > payload.length) fail(`header length ${headerLength} exceeds the payload`);
  let raw: unknown;
  try {
    raw = decoder.decode(payload.subarray(4, 4 + headerLength));
  } catch (cause) {
    fail('header is not msgpack', cause);
  }
  try {
    const header = parseWith(RecordHeaderSchema, raw, 'record header', {
      root: where,
      code: 'queue_corrupt',
    });
    return { header, bodyStart: 4 + headerLength };
  } catch (cause) {
    return fail('header fields', cause);
  }
}

export function encodeRecordHeader(header: RecordHeader): Buffer {
  const bytes = encoder.encodeSharedRef(header);
  const out = Buffer.allocUnsafe(4 + bytes.length);
  out.writeUInt32LE(bytes.length, 0);
  out.set(bytes, 4);
  return out;
}

/**
 * The samples of a record, decoded with the header's sample count as the cap: a frame that passes its
 * CRC but holds more samples than it says (a forged one) never turns a few bytes into many objects.
 */
export function decodeRecordSamples(
  payload: Buffer,
  bodyStart: number,
  header: RecordHeader,
  where: string,
): Sample[] {
  try {
    const samples = decodeSamples(payload.subarray(bodyStart), {
      maxSamples: header.n ?? LEGACY_MAX_SAMPLES,
    });
    if (header.n !== undefined && samples.length !== header.n) {
      throw new Error(`the header says ${header.n} samples, the body holds ${samples.length}`);
    }
    return samples;
  } catch (cause) {
    throw new QueueError(`${where}: malformed record samples (${(cause as Error).message})`, {
      code: 'queue_corrupt',
      cause,
    });
  }
}

const KeyPairsSchema = z.array(z.tuple([z.string().min(1), z.number().int().positive()]));

export function encodeKeyPairs(pairs: ReadonlyArray<readonly [string, number]>): Uint8Array {
  return encoder.encode(pairs);
}

export function decodeKeyPairs(payload: Buffer, where: string): Array<[string, number]> {
  try {
    return parseWith(KeyPairsSchema, decoder.decode(payload), 'keys entry', {
      root: where,
      code: 'queue_corrupt',
    });
  } catch (cause) {
    throw new QueueError(`${where}: malformed keys entry`, { code: 'queue_corrupt', cause });
  }
}

/**
 * The consumer's committed position: the next seq to read, in which segment and at which byte. `last`
 * (version 2) is the byte offset of the frame holding seq `next − 1` in the same segment, so an opener
 * can check in O(1) that `offset` is a frame boundary. `metadata` is the caller's own state, committed
 * atomically with the position (e.g. the last training step handed off).
 */
const CursorV1Schema = z.object({
  version: z.literal(1),
  next: z.number().int().positive(),
  segment: z.number().int().positive(),
  offset: z.number().int().min(FILE_HEADER_BYTES),
});
const CursorV2Schema = CursorV1Schema.extend({
  version: z.literal(2),
  last: z.number().int().min(FILE_HEADER_BYTES).optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
});
const CursorSchema = z.discriminatedUnion('version', [CursorV1Schema, CursorV2Schema]);
export type Cursor = z.infer<typeof CursorSchema>;

export function parseCursor(raw: Buffer, path: string): Cursor {
  let json: unknown;
  try {
    json = JSON.parse(raw.toString('utf8'));
  } catch (cause) {
    throw corrupt(path, undefined, 'not JSON (it is only ever replaced whole, so it was damaged)', cause);
  }
  try {
    return parseWith(CursorSchema, json, 'consumer cursor', { root: CURSOR_FILE, code: 'queue_corrupt' });
  } catch (cause) {
    throw corrupt(path, undefined, (cause as Error).message, cause);
  }
}
