import { execFileSync, spawnSync } from 'node:child_process';
import {
  appendFile,
  mkdtemp,
  open as openFile,
  readdir,
  readFile,
  rm,
  stat,
  truncate,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ConfigError } from '../errors.js';
import { createSample, type Sample } from '../sample.js';
import { QueueError } from './format.js';
import { SampleQueue } from './queue.js';

let dir: string;
const open: SampleQueue[] = [];
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'vime-queue-'));
});
afterEach(async () => {
  for (const q of open.splice(0)) await q.close().catch(() => {});
  await rm(dir, { recursive: true, force: true });
});

async function openQueue(options: Parameters<typeof SampleQueue.open>[1] = {}): Promise<SampleQueue> {
  const q = await SampleQueue.open(dir, options);
  open.push(q);
  return q;
}

/** A sample whose contents are a function of `i`, with float32 log probs that must survive exactly. */
function sampleFor(i: number, responseLength = 16): Sample {
  const prompt = 8;
  const tokens = Int32Array.from(
    { length: prompt + responseLength },
    (_, k) => (i * 7919 + k * 31) % 151_000,
  );
  return createSample({
    tokens,
    response_length: responseLength,
    loss_mask: Uint8Array.from({ length: responseLength }, (_, k) => (k % 5 === 4 ? 0 : 1)),
    rollout_log_probs: Float32Array.from({ length: responseLength }, (_, k) => -((i + 1) * (k + 1)) / 1e3),
    reward: i % 2,
    status: 'completed',
    metadata: { i },
  });
}

const segments = async () => (await readdir(dir)).filter((n) => n.endsWith('.seg')).sort();

describe('SampleQueue', () => {
  it('appends records and reads them back bit for bit, with dense sequence numbers', async () => {
    const q = await openQueue();
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        q.append(`r${i}`, [sampleFor(i), sampleFor(i + 100)], { meta: { i } }),
      ),
    );
    expect(results.map((r) => r.seq)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(results.every((r) => !r.duplicate)).toBe(true);
    const batch = await q.read({ max: 50 });
    expect(batch.from).toBe(1);
    expect(batch.next).toBe(21);
    for (const [i, record] of batch.records.entries()) {
      expect(record).toMatchObject({ seq: i + 1, key: `r${i}`, meta: { i } });
      expect(record.samples).toHaveLength(2);
      const [a] = record.samples;
      const want = sampleFor(i);
      expect(a?.tokens).toEqual(want.tokens);
      expect(a?.loss_mask).toEqual(want.loss_mask);
      expect(Buffer.from(a!.rollout_log_probs!.buffer)).toEqual(Buffer.from(want.rollout_log_probs!.buffer));
      expect(a?.metadata).toEqual({ i });
    }
    expect((await q.read()).records).toEqual([]);
  });

  it('writes concurrent appends together, with one flush per group', async () => {
    const q = await openQueue();
    const flushes: number[] = [];
    q.on('flush', (e) => {
      expect(e.synced).toBe(true);
      flushes.push(e.records);
    });
    await Promise.all(Array.from({ length: 64 }, (_, i) => q.append(`a${i}`, [sampleFor(i)])));
    for (let i = 0; i < 3; i++) await q.append(`b${i}`, [sampleFor(i)]);
    expect(flushes).toEqual([64, 1, 1, 1]);
  });

  it('does not write a key twice, also when the duplicate arrives while the first is in flight', async () => {
    const q = await openQueue();
    const [first, concurrent] = await Promise.all([
      q.append('a', [sampleFor(1)]),
      q.append('a', [sampleFor(2)]),
    ]);
    const later = await q.append('a', [sampleFor(3)]);
    expect(first).toEqual({ seq: 1, duplicate: false });
    expect(concurrent).toEqual({ seq: 1, duplicate: true });
    expect(later).toEqual({ seq: 1, duplicate: true });
    expect(q.has('a')).toBe(true);
    expect(q.seqOf('a')).toBe(1);
    const { records } = await q.read();
    expect(records.map((r) => r.key)).toEqual(['a']);
    expect(records[0]?.samples[0]?.tokens).toEqual(sampleFor(1).tokens);
  });

  it('reads from the committed cursor after a restart, and redelivers exactly the uncommitted records', async () => {
    let q = await openQueue();
    for (let i = 0; i < 10; i++) await q.append(`r${i}`, [sampleFor(i)]);
    const first = await q.read({ max: 4 });
    await q.commit(first.next);
    const second = await q.read({ max: 3 });
    expect(second.records.map((r) => r.seq)).toEqual([5, 6, 7]);
    await q.close();

    q = await openQueue();
    expect(q.committed).toBe(5);
    const again = await q.read({ max: 3 });
    expect(again.from).toBe(5);
    expect(again.records.map((r) => r.key)).toEqual(second.records.map((r) => r.key));
    expect(again.records[1]?.samples[0]?.tokens).toEqual(second.records[1]?.samples[0]?.tokens);
    // A partial commit inside the batch, then the rest.
    await q.commit(6);
    expect(q.committed).toBe(6);
    await q.close();
    q = await openQueue();
    expect((await q.read({ max: 100 })).records.map((r) => r.seq)).toEqual([6, 7, 8, 9, 10]);
    expect(q.nextSeq).toBe(11);
  });

  it('rewinds the read position to the committed one', async () => {
    const q = await openQueue();
    for (let i = 0; i < 3; i++) await q.append(`r${i}`, [sampleFor(i)]);
    await q.read({ max: 1 });
    await q.commit();
    await q.read();
    await q.rewind();
    expect(q.readPosition).toBe(2);
    expect((await q.read()).records.map((r) => r.seq)).toEqual([2, 3]);
  });

  it('rejects commits outside [committed, read position] with a ConfigError', async () => {
    const q = await openQueue();
    await q.append('a', []);
    await expect(q.commit(2)).rejects.toThrow(/between the committed position 1 and the read position 1/);
    await q.read();
    await q.commit(2);
    await expect(q.commit(1)).rejects.toBeInstanceOf(ConfigError);
  });

  describe('torn tail recovery', () => {
    /** Append 3 records, then add the first `cut` bytes of a 4th frame (as a killed write would). */
    async function tornQueue(cut: (frame: Buffer) => Buffer): Promise<string> {
      const q = await openQueue();
      for (let i = 0; i < 4; i++) await q.append(`r${i}`, [sampleFor(i, 64)]);
      await q.close();
      open.pop();
      const [name] = await segments();
      const path = join(dir, name!);
      const bytes = await readFile(path);
      // The 4th frame is the tail: find its start by re-reading the first three.
      const q2 = await SampleQueue.open(dir, { mode: 'consumer' });
      await q2.read({ max: 3 });
      await q2.commit();
      await q2.close();
      const cursor = JSON.parse(await readFile(join(dir, 'cursor.json'), 'utf8'));
      await rm(join(dir, 'cursor.json'));
      const frame = bytes.subarray(cursor.offset);
      await truncate(path, cursor.offset);
      await appendFile(path, cut(Buffer.from(frame)));
      return path;
    }

    it.each([
      ['inside the frame header', (f: Buffer) => f.subarray(0, 5)],
      ['inside the payload', (f: Buffer) => f.subarray(0, f.length - 17)],
      [
        'with a complete length but bytes that never reached the disk',
        (f: Buffer) => {
          const g = Buffer.from(f);
          g.fill(0, g.length - 40);
          return g;
        },
      ],
    ])('cuts off a frame torn %s and appends after the last good one', async (_, cut) => {
      const path = await tornQueue(cut);
      const sizeBefore = (await stat(path)).size;
      const q = await openQueue();
      expect(q.recovered?.segment).toBe(path);
      expect(q.recovered?.truncatedBytes).toBeGreaterThan(0);
      expect((await stat(path)).size).toBe(sizeBefore - q.recovered!.truncatedBytes);
      expect(q.has('r3')).toBe(false);
      expect(q.nextSeq).toBe(4);
      expect(await q.append('r3', [sampleFor(3, 64)])).toEqual({ seq: 4, duplicate: false });
      const { records } = await q.read();
      expect(records.map((r) => r.key)).toEqual(['r0', 'r1', 'r2', 'r3']);
      expect(records[3]?.samples[0]?.tokens).toEqual(sampleFor(3, 64).tokens);
    });

    it('repairs a segment killed while being created (shorter than its header)', async () => {
      const q = await openQueue({ segmentBytes: 4096 });
      for (let i = 0; i < 3; i++) await q.append(`r${i}`, [sampleFor(i, 300)]);
      await q.close();
      open.pop();
      const names = await segments();
      const next = `${String(Number(names.at(-1)!.slice(0, 20)) + 1).padStart(20, '0')}.seg`;
      await writeFile(join(dir, next), Buffer.from('VIMEQ'));
      const reopened = await openQueue({ segmentBytes: 4096 });
      expect(reopened.recovered).toEqual({ segment: join(dir, next), truncatedBytes: 5 });
      expect(await reopened.append('r3', [])).toEqual({ seq: 4, duplicate: false });
      expect((await reopened.read()).records.map((r) => r.key)).toEqual(['r0', 'r1', 'r2', 'r3']);
    });

    it('reads up to a new segment whose first frame is still being written', async () => {
      const q = await openQueue({ segmentBytes: 4096 });
      for (let i = 0; i < 3; i++) await q.append(`r${i}`, [sampleFor(i, 300)]);
      await q.close();
      open.pop();
      const names = await segments();
      const last = await readFile(join(dir, names.at(-1)!));
      const base = Number(names.at(-1)!.slice(0, 20)) + 1;
      const name = `${String(base).padStart(20, '0')}.seg`;
      const header = Buffer.alloc(16);
      header.write('VIMEQSG1', 'latin1');
      header.writeBigUInt64LE(BigInt(base), 8);
      // The first 100 bytes of a frame: a header claiming more bytes than the file holds.
      await writeFile(join(dir, name), Buffer.concat([header, last.subarray(16, 116)]));
      const consumer = await openQueue({ mode: 'consumer' });
      expect((await consumer.read()).records.map((r) => r.key)).toEqual(['r0', 'r1', 'r2']);
      expect((await consumer.read()).records).toEqual([]);
    });

    it('treats a torn tail as not yet written while reading, without skipping past it', async () => {
      const path = await tornQueue((f) => f.subarray(0, 30));
      const consumer = await openQueue({ mode: 'consumer' });
      expect((await consumer.read()).records.map((r) => r.key)).toEqual(['r0', 'r1', 'r2']);
      expect((await consumer.read()).records).toEqual([]);
      const producer = await openQueue({ mode: 'producer' });
      expect(producer.recovered?.segment).toBe(path);
      await producer.append('r3b', [sampleFor(9)]);
      const { records } = await consumer.read();
      expect(records.map((r) => [r.seq, r.key])).toEqual([[4, 'r3b']]);
    });
    it('is not fooled by a producer that cuts off the torn tail and appends while the reader looks at it', async () => {
      await tornQueue((f) => f.subarray(0, 30));
      const consumer = await openQueue({ mode: 'consumer' });
      expect((await consumer.read()).records.map((r) => r.key)).toEqual(['r0', 'r1', 'r2']);
      // The consumer has read the torn bytes; before it checks what follows them, the next producer
      // recovers the segment and appends two records over the same bytes.
      const probe = await openFile(join(dir, (await segments())[0]!), 'r');
      const prototype = Object.getPrototypeOf(probe) as { stat: (...a: unknown[]) => Promise<unknown> };
      await probe.close();
      const realStat = prototype.stat;
      let raced = false;
      const spy = vi.spyOn(prototype, 'stat').mockImplementation(async function (this: unknown, ...a) {
        if (!raced) {
          raced = true;
          const producer = await openQueue({ mode: 'producer' });
          await producer.append('r3b', [sampleFor(9)]);
          await producer.append('r3c', [sampleFor(10)]);
        }
        return realStat.apply(this, a);
      });
      try {
        const during = await consumer.read();
        expect(raced).toBe(true);
        const after = during.records.length > 0 ? during : await consumer.read();
        expect(after.records.map((r) => [r.seq, r.key])).toEqual([
          [4, 'r3b'],
          [5, 'r3c'],
        ]);
      } finally {
        spy.mockRestore();
      }
    });
  });

  it('refuses a damaged sealed segment, naming the file and byte', async () => {
    const q = await openQueue({ segmentBytes: 4096 });
    for (let i = 0; i < 6; i++) await q.append(`r${i}`, [sampleFor(i, 300)]);
    await q.close();
    open.pop();
    const [firstSegment] = await segments();
    const path = join(dir, firstSegment!);
    const bytes = await readFile(path);
    bytes[bytes.length - 3]! ^= 0xff;
    await writeFile(path, bytes);
    const error = await SampleQueue.open(dir).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QueueError);
    expect((error as QueueError).code).toBe('queue_corrupt');
    expect((error as QueueError).message).toContain(`${path} at byte`);
    expect((error as QueueError).message).toContain('invalid frame in a sealed segment');
    const consumer = await openQueue({ mode: 'consumer' });
    await expect(consumer.read({ max: 100 })).rejects.toThrow(/in a sealed segment/);
  });

  it('rolls segments, deletes fully committed ones, and still knows their keys after a restart', async () => {
    let q = await openQueue({ segmentBytes: 8192 });
    const gcEvents: string[] = [];
    q.on('gc', (e) => gcEvents.push(e.segment));
    for (let i = 0; i < 40; i++) await q.append(`r${i}`, [sampleFor(i, 200)]);
    const before = await segments();
    expect(before.length).toBeGreaterThan(5);
    const batch = await q.read({ max: 25 });
    await q.commit(batch.next);
    const after = await segments();
    expect(gcEvents.length).toBe(before.length - after.length);
    expect(gcEvents.length).toBeGreaterThan(1);
    // The segment holding seq 26 (the cursor) and everything after it remain.
    expect(Number(after[0]!.slice(0, 20))).toBeLessThanOrEqual(26);
    await q.close();

    q = await openQueue({ segmentBytes: 8192 });
    for (let i = 0; i < 40; i++) expect(q.has(`r${i}`)).toBe(true);
    expect(q.seqOf('r0')).toBe(1);
    expect(await q.append('r3', [])).toEqual({ seq: 4, duplicate: true });
    expect(await q.append('r40', [])).toEqual({ seq: 41, duplicate: false });
    const rest = await q.read({ max: 100 });
    expect(rest.records.map((r) => r.seq)).toEqual(Array.from({ length: 16 }, (_, i) => 26 + i));
    await q.commit();
    expect(await segments()).toHaveLength(1);
  });

  it('compacts keys.log once it has many entries, keeping every key', async () => {
    let q = await openQueue({ segmentBytes: 4096 });
    const frames = async () => {
      const buf = await readFile(join(dir, 'keys.log'));
      let n = 0;
      for (let pos = 16; pos + 8 <= buf.length; pos += 8 + buf.readUInt32LE(pos)) n++;
      return n;
    };
    let most = 0;
    for (let i = 0; i < 150; i++) {
      await q.append(`r${i}`, [sampleFor(i, 300)]);
      await q.commit((await q.read()).next); // one GC entry per collected segment
      if (i > 2) most = Math.max(most, await frames());
    }
    expect(most).toBe(63);
    expect(await frames()).toBeLessThan(63);
    await q.close();
    open.pop();
    q = await openQueue({ segmentBytes: 4096 });
    for (let i = 0; i < 150; i++) expect(q.seqOf(`r${i}`)).toBe(i + 1);
    expect(await q.append('r7', [])).toEqual({ seq: 8, duplicate: true });
  });

  it('recovers keys.log from an entry torn by a consumer killed during GC', async () => {
    let q = await openQueue({ segmentBytes: 8192 });
    for (let i = 0; i < 12; i++) await q.append(`r${i}`, [sampleFor(i, 200)]);
    await q.read({ max: 4 });
    await q.commit();
    await q.close();
    open.pop();
    // A consumer killed while appending the next GC entry leaves half a frame.
    await appendFile(join(dir, 'keys.log'), Buffer.from([40, 0, 0, 0, 1, 2, 3]));
    q = await openQueue({ segmentBytes: 8192 });
    await q.read({ max: 100 });
    await q.commit();
    await q.close();
    open.pop();
    q = await openQueue({ segmentBytes: 8192 });
    for (let i = 0; i < 12; i++) expect(q.seqOf(`r${i}`)).toBe(i + 1);
    expect(await segments()).toHaveLength(1);
  });

  it('wakes a waiting read on an append in the same process and by polling across handles', async () => {
    const consumer = await openQueue({ mode: 'consumer', pollMs: 10 });
    const producer = await openQueue({ mode: 'producer' });
    const waiting = consumer.read({ wait: true });
    setTimeout(() => void producer.append('late', [sampleFor(5)]), 30);
    const batch = await waiting;
    expect(batch.records.map((r) => r.key)).toEqual(['late']);

    const controller = new AbortController();
    const blocked = consumer.read({ wait: true, signal: controller.signal });
    setTimeout(() => controller.abort(new Error('shutting down')), 20);
    await expect(blocked).rejects.toThrow('shutting down');
  });

  it('commits while a read waits, and ends a waiting read on close', async () => {
    const q = await openQueue({ pollMs: 10 });
    await q.append('a', []);
    const batch = await q.read();
    const waiting = q.read({ wait: true });
    await q.commit(batch.next);
    expect(q.committed).toBe(2);
    await q.close();
    await expect(waiting).rejects.toThrow(/closed/);
  });

  it('allows one producer and one consumer, taking over a lock left by a dead process', async () => {
    const q = await openQueue({ mode: 'producer' });
    const error = await SampleQueue.open(dir, { mode: 'producer' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QueueError);
    expect((error as QueueError).code).toBe('queue_locked');
    expect((error as QueueError).message).toContain('held by this process');
    await q.close();
    open.pop();

    const dead = spawnSync(process.execPath, [
      '-e',
      'process.stdout.write(String(process.pid))',
    ]).stdout.toString();
    await writeFile(join(dir, 'producer.lock'), `${dead}\n`);
    const taken = await openQueue({ mode: 'producer' });
    expect((await readFile(join(dir, 'producer.lock'), 'utf8')).trim()).toBe(String(process.pid));
    await taken.append('x', []);
  });

  it('rejects misuse with errors that say what to do', async () => {
    const consumer = await openQueue({ mode: 'consumer' });
    await expect(consumer.append('a', [])).rejects.toThrow(
      /producer operation; open the queue with mode 'producer' or 'both'/,
    );
    const producer = await openQueue({ mode: 'producer' });
    await expect(producer.append('', [])).rejects.toThrow(/key: expected a non-empty string/);
    await expect(producer.append('a', {} as never)).rejects.toThrow(/samples: expected an array of Sample/);
    await expect(producer.append('a', [{ tokens: [1] } as never])).rejects.toThrow(/\[0\]\./);
    const good = producer.append('ok', []);
    await expect(producer.append('b', [], { meta: { f: () => 1 } as never })).rejects.toThrow(
      /meta: cannot encode/,
    );
    expect(await good).toEqual({ seq: 1, duplicate: false });
    await expect(SampleQueue.open(dir, { segmentBytes: 10 })).rejects.toThrow(/segmentBytes.*≥ 4096/);
    await producer.close();
    await expect(producer.append('a', [])).rejects.toThrow(/closed/);
  });

  it('writes a format any msgpack reader can parse (checked with Python)', async () => {
    const q = await openQueue();
    await q.append('step-0/rollout-3', [sampleFor(3)], { meta: { step: 0 } });
    await q.close();
    const [name] = await segments();
    const script = `
import struct, sys, zlib, msgpack
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'VIMEQSG1', data[:8]
(first,) = struct.unpack_from('<Q', data, 8)
pos = 16
n, crc = struct.unpack_from('<II', data, pos)
payload = data[pos + 8 : pos + 8 + n]
assert zlib.crc32(payload) == crc
(hl,) = struct.unpack_from('<I', payload, 0)
header = msgpack.unpackb(payload[4 : 4 + hl])
samples = msgpack.unpackb(payload[4 + hl :])
print(first, header['seq'], header['key'], header['meta']['step'], len(samples), samples[0]['tokens'][:3], samples[0]['status'])
`;
    // Debian's interpreter, where python3-msgpack is installed (a python3 earlier on PATH may lack it).
    const out = execFileSync('/usr/bin/python3', ['-c', script, join(dir, name!)], {
      encoding: 'utf8',
    }).trim();
    const t = sampleFor(3).tokens;
    expect(out).toBe(`1 1 step-0/rollout-3 0 1 [${t[0]}, ${t[1]}, ${t[2]}] completed`);
  });
});
