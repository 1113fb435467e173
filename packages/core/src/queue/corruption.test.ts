/**
 * Damage to a queue's files, as a bad disk, a stray `dd` or a hostile writer would leave it. Every case
 * either keeps every acknowledged record (checked by key and content) or refuses with `queue_corrupt`
 * naming the file and byte, after which `SampleQueue.repair` quarantines the damaged bytes and keeps
 * every other record.
 */
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { decode, encode } from '@msgpack/msgpack';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createSample, type Sample } from '../sample.js';
import { QueueError } from './format.js';
import { SampleQueue } from './queue.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'vime-queue-damage-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const N = 40;
const SEGMENT_BYTES = 8192;
const keyOf = (i: number) => `r${i}`;

function sampleFor(i: number): Sample {
  return createSample({
    tokens: Int32Array.from({ length: 60 }, (_, k) => (i * 7919 + k * 31) % 151_000),
    response_length: 40,
    loss_mask: Uint8Array.from({ length: 40 }, (_, k) => (k % 5 === 4 ? 0 : 1)),
    rollout_log_probs: Float32Array.from({ length: 40 }, (_, k) => -((i + 1) * (k + 1)) / 1e3),
    reward: i % 2,
    status: 'completed',
  });
}

/** Append r0..r(N−1) (all acknowledged), consume and commit the first `commit`, close. */
async function filled(commit = 0): Promise<void> {
  const q = await SampleQueue.open(dir, { segmentBytes: SEGMENT_BYTES });
  for (let i = 0; i < N; i++) await q.append(keyOf(i), [sampleFor(i)], { meta: { i } });
  if (commit > 0) {
    const batch = await q.read({ max: commit });
    await q.commit(batch.next);
  }
  await q.close();
}

const segments = async () => (await readdir(dir)).filter((n) => n.endsWith('.seg')).sort();

interface Frame {
  offset: number;
  end: number;
  seq: number;
  key: string;
}

/** The frames of a segment, parsed here independently of the queue's code. */
async function framesOf(name: string): Promise<Frame[]> {
  const buf = await readFile(join(dir, name));
  const out: Frame[] = [];
  for (let pos = 16; pos + 8 <= buf.length; ) {
    const length = buf.readUInt32LE(pos);
    const payload = buf.subarray(pos + 8, pos + 8 + length);
    const header = decode(payload.subarray(4, 4 + payload.readUInt32LE(0))) as { seq: number; key: string };
    out.push({ offset: pos, end: pos + 8 + length, seq: header.seq, key: header.key });
    pos += 8 + length;
  }
  return out;
}

async function mutate(name: string, change: (buf: Buffer) => Buffer): Promise<void> {
  const path = join(dir, name);
  await writeFile(path, change(await readFile(path)));
}

async function refusal(run: () => Promise<unknown>): Promise<QueueError> {
  const error = await run().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, 'expected queue_corrupt').toBeInstanceOf(QueueError);
  expect((error as QueueError).code, (error as Error).message).toBe('queue_corrupt');
  return error as QueueError;
}

/** Every key but `lost` is known and its record intact; uncommitted ones are read exactly once. */
async function expectIntact(lost: string[], committed: number): Promise<void> {
  const q = await SampleQueue.open(dir, { segmentBytes: SEGMENT_BYTES });
  try {
    for (let i = 0; i < N; i++) expect(q.has(keyOf(i)), keyOf(i)).toBe(!lost.includes(keyOf(i)));
    const seen: string[] = [];
    for (;;) {
      const batch = await q.read({ max: 7 });
      if (batch.records.length === 0) break;
      for (const r of batch.records) {
        seen.push(r.key);
        const i = Number(r.key.slice(1));
        expect(r.meta).toEqual({ i });
        expect(r.samples[0]!.tokens).toEqual(sampleFor(i).tokens);
        expect(Buffer.from(r.samples[0]!.rollout_log_probs!.buffer)).toEqual(
          Buffer.from(sampleFor(i).rollout_log_probs!.buffer),
        );
      }
    }
    const want = Array.from({ length: N - committed }, (_, k) => keyOf(committed + k));
    expect(seen).toEqual(want.filter((k) => !lost.includes(k)));
    // A known key is never written twice; a lost one is appended again and delivered.
    for (let i = 0; i < N; i++) {
      if (!lost.includes(keyOf(i))) expect((await q.append(keyOf(i), [])).duplicate).toBe(true);
    }
    for (const key of lost) {
      const i = Number(key.slice(1));
      expect((await q.append(key, [sampleFor(i)], { meta: { i } })).duplicate).toBe(false);
    }
    expect((await q.read({ max: 100 })).records.map((r) => r.key)).toEqual(lost);
  } finally {
    await q.close();
  }
}

describe('SampleQueue damage: refuse, never truncate acknowledged records, then repair', () => {
  // Positions inside one frame: the length field, the CRC, the record header, the sample bytes.
  const spots: Array<[string, (f: Frame) => number]> = [
    ['length field', (f) => f.offset + 1],
    ['CRC field', (f) => f.offset + 5],
    ['record header', (f) => f.offset + 14],
    ['sample bytes', (f) => f.end - 20],
  ];

  for (const [spot, at] of spots) {
    it(`a flipped byte in a non-tail frame of the active segment (${spot})`, async () => {
      await filled(3);
      const active = (await segments()).at(-1)!;
      const frames = await framesOf(active);
      expect(frames.length).toBeGreaterThanOrEqual(2);
      const victim = frames.at(-2)!; // a frame with another one after it
      await mutate(active, (b) => {
        b[at(victim)]! ^= 0x5a;
        return b;
      });
      const path = join(dir, active);
      const damaged = await readFile(path);
      const opened = await refusal(() => SampleQueue.open(dir, { mode: 'producer' }));
      expect(opened.message).toContain(`${path} at byte ${victim.offset}`);
      expect(opened.data).toMatchObject({ path, offset: victim.offset });
      // The consumer does not stop silently before the damage either.
      const consumer = await SampleQueue.open(dir, { mode: 'consumer' });
      const read = await refusal(async () => {
        for (;;) if ((await consumer.read({ max: 100 })).records.length === 0) return;
      });
      expect(read.message).toContain(`${path} at byte ${victim.offset}`);
      await consumer.close();
      // Nothing was cut off.
      expect((await readFile(path)).equals(damaged)).toBe(true);

      const report = await SampleQueue.repair(dir);
      expect(report.quarantined).toEqual([
        expect.objectContaining({ file: active, offset: victim.offset, lost: [victim.seq, victim.seq] }),
      ]);
      await expectIntact([victim.key], 3);
    });
  }

  for (const which of ['first', 'middle'] as const) {
    for (const [spot, at] of spots) {
      it(`a flipped byte in a sealed segment (${which} segment, ${spot})`, async () => {
        await filled(0);
        const names = await segments();
        expect(names.length).toBeGreaterThanOrEqual(3);
        const name = which === 'first' ? names[0]! : names[Math.floor(names.length / 2)]!;
        const frames = await framesOf(name);
        const victim = frames.at(-1)!; // the last frame: no later frame in its file to resync on
        await mutate(name, (b) => {
          b[at(victim)]! ^= 0x01;
          return b;
        });
        const error = await refusal(() => SampleQueue.open(dir));
        expect(error.message).toContain(`${join(dir, name)} at byte ${victim.offset}`);
        const report = await SampleQueue.repair(dir);
        expect(report.quarantined).toEqual([
          expect.objectContaining({ file: name, offset: victim.offset, lost: [victim.seq, victim.seq] }),
        ]);
        await expectIntact([victim.key], 0);
      });
    }
  }

  it('repair changes nothing on a healthy queue, and refuses while a producer or consumer has it open', async () => {
    await filled(5);
    const before = await Promise.all((await segments()).map((n) => readFile(join(dir, n))));
    const report = await SampleQueue.repair(dir);
    expect(report).toEqual({
      quarantined: [],
      truncated: [],
      rewritten: [],
      cursor: 'kept',
      keysForgotten: false,
    });
    expect(await Promise.all((await segments()).map((n) => readFile(join(dir, n))))).toEqual(before);
    for (const mode of ['producer', 'consumer'] as const) {
      const q = await SampleQueue.open(dir, { mode });
      await expect(SampleQueue.repair(dir)).rejects.toMatchObject({ code: 'queue_locked' });
      await q.close();
    }
    await expectIntact([], 5);
  });

  it('bytes cut out of the middle of a frame (the rest of the file shifted)', async () => {
    await filled(2);
    const active = (await segments()).at(-1)!;
    const frames = await framesOf(active);
    const victim = frames.at(-2)!;
    await mutate(active, (b) =>
      Buffer.concat([b.subarray(0, victim.offset + 30), b.subarray(victim.offset + 90)]),
    );
    await refusal(() => SampleQueue.open(dir));
    const report = await SampleQueue.repair(dir);
    expect(report.quarantined).toHaveLength(1);
    await expectIntact([victim.key], 2);
  });

  it('whole frames cut out of a segment (a gap in sequence numbers)', async () => {
    await filled(0);
    const name = (await segments())[1]!;
    const frames = await framesOf(name);
    const [a, b] = [frames[1]!, frames[2]!];
    await mutate(name, (buf) => Buffer.concat([buf.subarray(0, a.offset), buf.subarray(b.end)]));
    const error = await refusal(() => SampleQueue.open(dir));
    expect(error.message).toContain(`record has seq ${b.seq + 1}, expected ${a.seq}`);
    await SampleQueue.repair(dir);
    await expectIntact([a.key, b.key], 0);
  });

  it('a sealed segment cut short', async () => {
    await filled(0);
    const name = (await segments())[0]!;
    const frames = await framesOf(name);
    const victim = frames.at(-1)!;
    await mutate(name, (b) => b.subarray(0, victim.offset + 11));
    await refusal(() => SampleQueue.open(dir));
    await SampleQueue.repair(dir);
    await expectIntact([victim.key], 0);
  });

  it('a zeroed segment header', async () => {
    await filled(0);
    const name = (await segments())[1]!;
    await mutate(name, (b) => b.fill(0, 0, 16));
    const error = await refusal(() => SampleQueue.open(dir));
    expect(error.message).toContain(`${join(dir, name)} at byte 0`);
    const report = await SampleQueue.repair(dir);
    expect(report.quarantined).toEqual([expect.objectContaining({ file: name, offset: 0, lost: undefined })]);
    await expectIntact([], 0);
  });

  it('a zeroed cursor: refused, then reset to the oldest record kept (uncommitted records all delivered)', async () => {
    await filled(0);
    const q = await SampleQueue.open(dir, { segmentBytes: SEGMENT_BYTES });
    const batch = await q.read({ max: 17 });
    await q.commit(batch.next);
    await q.close();
    const cursor = await readFile(join(dir, 'cursor.json'));
    await writeFile(join(dir, 'cursor.json'), Buffer.alloc(cursor.length));
    await refusal(() => SampleQueue.open(dir, { mode: 'consumer' }));
    await refusal(() => SampleQueue.open(dir, { mode: 'producer' }));
    const report = await SampleQueue.repair(dir);
    expect(report.cursor).toBe('reset');
    const consumer = await SampleQueue.open(dir, { mode: 'consumer' });
    const keys = (await consumer.read({ max: 100 })).records.map((r) => r.key);
    await consumer.close();
    // At least once: nothing uncommitted is skipped; committed ones of kept segments come again.
    for (let i = 17; i < N; i++) expect(keys).toContain(keyOf(i));
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('a zeroed keys.log: refused (its keys would be forgotten and appended twice), then repaired', async () => {
    await filled(25);
    const keysLog = await readFile(join(dir, 'keys.log'));
    expect(keysLog.length).toBeGreaterThan(16);
    await writeFile(join(dir, 'keys.log'), Buffer.alloc(keysLog.length));
    await refusal(() => SampleQueue.open(dir, { mode: 'producer' }));
    const report = await SampleQueue.repair(dir);
    expect(report.keysForgotten).toBe(true);
    const q = await SampleQueue.open(dir);
    // The records of kept segments are all there; the report says what `has` forgot.
    const kept = Number((await segments())[0]!.slice(0, 20));
    for (let i = kept - 1; i < N; i++) expect(q.has(keyOf(i))).toBe(true);
    await q.close();
  });

  it('an empty keys.log (left by an older version that hit a full disk creating it) holds no keys', async () => {
    await filled(0);
    await writeFile(join(dir, 'keys.log'), Buffer.alloc(0));
    const q = await SampleQueue.open(dir, { segmentBytes: SEGMENT_BYTES });
    const batch = await q.read({ max: 100 });
    await q.commit(batch.next); // GC writes keys.log whole now
    await q.close();
    await expectIntact([], N);
  });

  it('a flipped byte in a non-tail keys.log entry', async () => {
    await filled(25);
    const buf = await readFile(join(dir, 'keys.log'));
    buf[20]! ^= 0xff;
    await writeFile(join(dir, 'keys.log'), buf);
    const error = await refusal(() => SampleQueue.open(dir, { mode: 'producer' }));
    expect(error.message).toContain(`${join(dir, 'keys.log')} at byte 16`);
  });

  describe('a cursor offset that is not a frame boundary', () => {
    const shifts: Array<[string, (c: { offset: number; last?: number }, frames: Frame[]) => void]> = [
      [
        'one byte past the boundary',
        (c) => {
          c.offset += 1;
        },
      ],
      [
        'one byte before it',
        (c) => {
          c.offset -= 1;
        },
      ],
      [
        'inside the frame header',
        (c) => {
          c.offset += 4;
        },
      ],
      [
        'in the middle of the next frame',
        (c, f) => {
          const next = f.find((x) => x.offset === c.offset)!;
          c.offset = (next.offset + next.end) >> 1;
        },
      ],
      [
        'mid-frame, with the check field removed',
        (c) => {
          c.offset += 9;
          delete c.last;
        },
      ],
      [
        'mid-frame, with the check field moved along',
        (c) => {
          c.offset += 9;
          c.last = (c.last ?? 16) + 9;
        },
      ],
    ];
    // The cursor inside a sealed segment, and inside the active one (where a bad offset used to read
    // nothing, silently, forever).
    for (const [name, shift] of shifts)
      for (const where of ['sealed', 'active'] as const) {
        it(`${name} (${where} segment)`, async () => {
          await filled(0);
          // The cursor just after the first record of the first or of the last segment.
          const names = await segments();
          const at = Number((where === 'sealed' ? names[0]! : names.at(-1)!).slice(0, 20));
          const q = await SampleQueue.open(dir, { segmentBytes: SEGMENT_BYTES, autoGc: false });
          const batch = await q.read({ max: at });
          await q.commit(batch.next);
          await q.close();
          const path = join(dir, 'cursor.json');
          const cursor = JSON.parse(await readFile(path, 'utf8'));
          const frames = await framesOf(
            (await segments()).find((s) => Number(s.slice(0, 20)) === cursor.segment)!,
          );
          shift(cursor, frames);
          await writeFile(path, JSON.stringify(cursor));
          const consumer = await SampleQueue.open(dir, { mode: 'consumer' });
          const error = await refusal(() => consumer.read());
          expect(error.message).toContain('cursor');
          await consumer.close();
          const report = await SampleQueue.repair(dir);
          expect(report.cursor).toBe('moved');
          await expectIntact([], at);
        });
      }
  });

  it('a forged record whose samples outnumber its header (300 KB of empty maps) is refused, not decoded', async () => {
    await filled(0);
    const active = (await segments()).at(-1)!;
    const frames = await framesOf(active);
    const seq = frames.at(-1)!.seq + 1;
    for (const header of [
      { seq, key: 'forged', time: 0, n: 1 },
      { seq, key: 'forged', time: 0 }, // as written before headers carried `n`
    ]) {
      const h = Buffer.from(encode(header));
      const count = 300_000;
      const body = Buffer.alloc(5 + count, 0x80);
      body[0] = 0xdd;
      body.writeUInt32BE(count, 1);
      const payload = Buffer.concat([Buffer.alloc(4), h, body]);
      payload.writeUInt32LE(h.length, 0);
      const frame = Buffer.alloc(8);
      frame.writeUInt32LE(payload.length, 0);
      frame.writeUInt32LE(crc32(payload), 4);
      await mutate(active, (b) => Buffer.concat([b.subarray(0, frames.at(-1)!.end), frame, payload]));
      const consumer = await SampleQueue.open(dir, { mode: 'consumer' });
      const heap = process.memoryUsage().heapUsed;
      const error = await refusal(async () => {
        for (;;) if ((await consumer.read({ max: 100 })).records.length === 0) return;
      });
      expect(error.message).toMatch(/300000 samples exceed the cap of (1|65536)/);
      expect(process.memoryUsage().heapUsed - heap).toBeLessThan(64 << 20);
      await consumer.close();
    }
  });
});
