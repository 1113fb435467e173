/**
 * A really full disk: the queue lives on a small tmpfs, a filler file takes all but a few pages, and
 * the producer and consumer keep working until every write fails with ENOSPC. Swept over the free
 * space left, the failure lands in a frame write, a segment roll, the cursor rewrite, the creation of
 * keys.log and its appends. Each failure must be a clear `queue_disk_full`, and once space is back the
 * queue must open with every acknowledged record (checked by key), delivered exactly once.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, ftruncateSync, openSync, writeSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSample, type Sample } from '../sample.js';
import { available } from '../testing/index.js';
import { QueueError } from './format.js';
import { SampleQueue } from './queue.js';

const PAGE = 4096;
const isRoot = process.getuid?.() === 0;
let mnt: string;

beforeAll(async () => {
  if (!isRoot) return;
  mnt = await mkdtemp(join(tmpdir(), 'vime-queue-full-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', mnt]);
});
afterAll(async () => {
  if (!isRoot) return;
  // Lazily, so a failed test that left a file open does not leave the mount behind.
  execFileSync('umount', ['--lazy', mnt]);
  await rm(mnt, { recursive: true, force: true });
});

function sampleFor(i: number): Sample {
  return createSample({
    tokens: Int32Array.from({ length: 300 }, (_, k) => (i * 7919 + k * 31) % 151_000),
    response_length: 200,
    loss_mask: new Uint8Array(200).fill(1),
    rollout_log_probs: Float32Array.from({ length: 200 }, (_, k) => -(i + k) / 1e3),
    reward: i % 2,
    status: 'completed',
  });
}

/** Take every free page of the file system, then give back `free` of them. */
function fill(path: string, free: number): void {
  const fd = openSync(path, 'w');
  const chunk = Buffer.alloc(64 * 1024, 1);
  let size = 0;
  try {
    for (;;) size += writeSync(fd, chunk, 0, chunk.length);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
  }
  // A short last write leaves a partly used page: round down, then free `free` whole pages.
  ftruncateSync(fd, Math.max(0, Math.floor(size / PAGE) - free) * PAGE);
  closeSync(fd);
}

describe.runIf(available('root', isRoot, 'Run the tests as root (CI does).'))(
  'SampleQueue on a full disk (tmpfs, as root)',
  () => {
    it('a consumer whose GC hits ENOSPC creating keys.log leaves a queue that opens once space is back', async () => {
      const dir = join(mnt, 'gc');
      await mkdir(dir);
      const filler = join(mnt, 'filler');
      const q = await SampleQueue.open(dir, { segmentBytes: 8192 });
      try {
        for (let i = 0; i < 18; i++) await q.append(`r${i}`, [sampleFor(i)]);
        const batch = await q.read({ max: 100 });
        // One free page: the new cursor takes it, so GC finds the disk full when it creates keys.log.
        fill(filler, 1);
        const error = await q.commit(batch.next).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(QueueError);
        expect((error as QueueError).code).toBe('queue_disk_full');
        expect((error as Error).message).toContain('keys.log: the disk is full');
        expect(q.committed).toBe(19); // the commit itself is durable
      } finally {
        await q.close();
        await rm(filler, { force: true });
      }
      const again = await SampleQueue.open(dir, { segmentBytes: 8192 });
      for (let i = 0; i < 18; i++) expect(again.has(`r${i}`)).toBe(true);
      expect((await again.read()).records).toEqual([]);
      await again.append('r18', [sampleFor(18)]);
      await again.commit((await again.read()).next); // GC runs now
      await again.close();
      const last = await SampleQueue.open(dir, { segmentBytes: 8192 });
      for (let i = 0; i <= 18; i++) expect(last.has(`r${i}`)).toBe(true);
      await last.close();
      await rm(dir, { recursive: true, force: true });
    });

    for (const free of [0, 1, 2, 3, 4, 6, 9, 14]) {
      it(`with ${free} free page(s): clear errors, then every acknowledged record once space is back`, async () => {
        const dir = join(mnt, `q${free}`);
        await mkdir(dir);
        const filler = join(mnt, 'filler');
        const options = { segmentBytes: 8192 };
        const acked = new Set<string>();
        const delivered: string[] = [];
        const failures: string[] = [];
        const expectFull = (error: unknown) => {
          expect(error, String(error)).toBeInstanceOf(QueueError);
          expect((error as QueueError).code, (error as Error).message).toBe('queue_disk_full');
          failures.push((error as Error).message);
        };
        let q = await SampleQueue.open(dir, options);
        try {
          // Before the disk fills: three segments, nothing consumed yet (so no keys.log).
          let next = 0;
          for (; next < 18; next++) {
            await q.append(`r${next}`, [sampleFor(next)]);
            acked.add(`r${next}`);
          }
          fill(filler, free);
          // The producer outruns the consumer, so GC frees less than appends take.
          for (let round = 0; round < 16; round++) {
            for (let k = 0; k < 4; k++, next++) {
              try {
                await q.append(`r${next}`, [sampleFor(next)]);
                acked.add(`r${next}`);
              } catch (error) {
                expectFull(error);
              }
            }
            const batch = await q.read({ max: 2 });
            delivered.push(...batch.records.map((r) => r.key));
            try {
              await q.commit(batch.next);
            } catch (error) {
              expectFull(error);
            }
          }
        } finally {
          await q.close();
        }
        expect(failures.length, 'the disk never filled').toBeGreaterThan(0);
        const reopened = await SampleQueue.open(dir, options);
        const committed = reopened.committed;
        await reopened.close();

        // Space is back.
        await rm(filler);
        q = await SampleQueue.open(dir, options);
        try {
          for (const key of acked) expect(q.has(key), key).toBe(true);
          // Records before the committed position were delivered before; the rest come now, once.
          const before = delivered.slice(0, committed - 1);
          const after: string[] = [];
          for (;;) {
            const batch = await q.read({ max: 100 });
            if (batch.records.length === 0) break;
            after.push(...batch.records.map((r) => r.key));
          }
          const all = [...before, ...after];
          expect(new Set(all).size).toBe(all.length);
          expect(new Set(all)).toEqual(acked);
          // And the queue works as before.
          await q.append('after', [sampleFor(1)]);
          await q.commit((await q.read()).next);
        } finally {
          await q.close();
        }
        // Opening itself needs no space (a restart on a full disk must not fail).
        fill(filler, 0);
        try {
          await (await SampleQueue.open(dir, options)).close();
        } finally {
          await rm(filler);
          await rm(dir, { recursive: true, force: true });
        }
      });
    }
  },
);
