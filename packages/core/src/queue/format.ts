/**
 * On-disk format of a `SampleQueue` (all integers little-endian).
 *
 * Segment file `<first seq, 20 digits>.seg`:
 *   16-byte header: magic `VIMEQSG1` (8 bytes), u64 first seq.
 *   frames, back to back. Records carry dense sequence numbers starting at the first seq.
 * Frame: u32 payload length, u32 CRC-32 (zlib) of the payload, payload.
 * Record payload: u32 header length, header (msgpack map `{ seq, key, time, meta? }`), then the record's
 *   samples as one `encodeSamples` batch (a msgpack array of slime `Sample.to_dict()` maps).
 * Keys file `keys.log` (keys of segments already deleted by GC): 16-byte header, magic `VIMEQKY1` and
 *   8 zero bytes, then frames whose payload is a msgpack array of `[key, seq]` pairs.
 *
 * A frame is valid only if it is complete and its CRC matches, so a write torn by a crash is detected
 * and cut off at the last valid frame.
 */
import { crc32 } from 'node:zlib';
import { Decoder, Encoder } from '@msgpack/msgpack';
import { z } from 'zod';
import { decodeSamples } from '../codec.js';
import { VimeError, type VimeErrorOptions } from '../errors.js';
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

/** The queue's files could not be used as they are: corrupt, locked, or misused. */
export class QueueError extends VimeError {
  constructor(message: string, options: VimeErrorOptions & { code?: string } = {}) {
    super(options.code ?? 'queue_error', message, options);
  }
}

export const segmentName = (firstSeq: number): string => `${String(firstSeq).padStart(20, '0')}.seg`;
export const SEGMENT_NAME = /^(\d{20})\.seg$/;

export function fileHeader(magic: Buffer, value: number): Buffer {
  const header = Buffer.alloc(FILE_HEADER_BYTES);
  magic.copy(header, 0);
  header.writeBigUInt64LE(BigInt(value), 8);
  return header;
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

export type ScanStop = 'end' | 'partial' | 'corrupt';

/**
 * Walk the frames of `buf` from `start`. Calls `onFrame` for every valid frame and returns where the
 * valid frames end and why scanning stopped: `end` (exactly at the end of `buf`), `partial` (a frame
 * starts but is cut off by the end of `buf`), `corrupt` (a complete frame whose CRC does not match,
 * or an impossible length).
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
    if (length > MAX_PAYLOAD_BYTES) return { end: pos, stop: 'corrupt' };
    const endOfFrame = pos + FRAME_HEADER_BYTES + length;
    if (endOfFrame > buf.length) return { end: pos, stop: 'partial' };
    const payload = buf.subarray(pos + FRAME_HEADER_BYTES, endOfFrame);
    if (crc32(payload) !== buf.readUInt32LE(pos + 4)) return { end: pos, stop: 'corrupt' };
    if (onFrame(payload, pos, endOfFrame) === false) return { end: endOfFrame, stop: 'end' };
    pos = endOfFrame;
  }
}

const RecordHeaderSchema = z.object({
  seq: z.number().int().positive(),
  key: z.string().min(1),
  time: z.number(),
  meta: z.record(z.string(), z.unknown()).optional(),
});
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

export function decodeRecordSamples(payload: Buffer, bodyStart: number): Sample[] {
  return decodeSamples(payload.subarray(bodyStart));
}

const KeyPairsSchema = z.array(z.tuple([z.string(), z.number().int().positive()]));

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

/** Validate a 16-byte file header; returns its u64 value. */
export function readFileHeader(buf: Buffer, magic: Buffer, where: string): number {
  if (buf.length < FILE_HEADER_BYTES || !buf.subarray(0, 8).equals(magic)) {
    throw new QueueError(
      `${where}: not a ${magic.toString('latin1')} file (bad header); is this directory a sample queue?`,
      { code: 'queue_corrupt' },
    );
  }
  return Number(buf.readBigUInt64LE(8));
}
