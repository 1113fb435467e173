/**
 * The producer and consumer processes of the SIGKILL test (`crash.int.test.ts`). Either may be killed at
 * any instant and started again; together they must still deliver every record exactly once.
 *
 *   producer <dir> <n> [tornAt]: appends records r0..r(n-1) in concurrent groups of 8, skipping keys
 *     the queue already has. `tornAt` (comma-separated record counts): once the queue holds that many
 *     records, the next write stops part-way and the process SIGKILLs itself, leaving a torn frame on
 *     disk (each threshold fires once; a marker file next to the queue remembers it).
 *   consumer <dir> <n> <out>: reads batches, writes each to <out>/<from>.json (atomically, so a batch
 *     read again after a crash overwrites its earlier copy), then commits; stops after n records.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { type FileHandle, open, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createSample, type Sample } from '../sample.js';
import { SampleQueue } from '../queue/queue.js';

export function crashSample(i: number): Sample {
  const responseLength = 3000 + (i % 7) * 100;
  return createSample({
    tokens: Int32Array.from({ length: 100 + responseLength }, (_, k) => (i * 7919 + k * 131) % 151_643),
    response_length: responseLength,
    loss_mask: Uint8Array.from({ length: responseLength }, (_, k) => (k % 9 === 0 ? 0 : 1)),
    rollout_log_probs: Float32Array.from({ length: responseLength }, (_, k) => -((i % 13) + k / 1e4)),
    reward: i % 3 === 0 ? 1 : 0,
    status: 'completed',
  });
}

function same(a: Sample, b: Sample): boolean {
  const eq = (x: ArrayLike<number> | null, y: ArrayLike<number> | null) =>
    x !== null &&
    y !== null &&
    x.length === y.length &&
    Array.prototype.every.call(x, (v, k) => Object.is(v, y[k]));
  return (
    eq(a.tokens, b.tokens) &&
    eq(a.loss_mask, b.loss_mask) &&
    eq(a.rollout_log_probs, b.rollout_log_probs) &&
    a.reward === b.reward
  );
}

/**
 * Make the next `writev` on any file write only part of its bytes, then SIGKILL this process. The
 * marker is created right before the torn write, so a threshold is used up only by a torn write.
 */
async function armTornWrite(marker: string): Promise<void> {
  const probe = await open(process.execPath, 'r');
  const proto = Object.getPrototypeOf(probe) as FileHandle;
  await probe.close();
  proto.writev = async function (this: FileHandle, buffers: NodeJS.ArrayBufferView[], position?: number) {
    const bytes = Buffer.concat(buffers.map((b) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength)));
    writeFileSync(marker, '');
    await this.write(bytes, 0, 1 + Math.floor(bytes.length * 0.6), position);
    process.kill(process.pid, 'SIGKILL');
    return new Promise(() => {});
  } as FileHandle['writev'];
}

const [role, dir, count, arg] = process.argv.slice(2);
const n = Number(count);
if (role === 'producer' && dir) {
  const queue = await SampleQueue.open(dir, { mode: 'producer', segmentBytes: 256 * 1024 });
  process.stdout.write(`ready ${queue.recovered?.truncatedBytes ?? 0}\n`);
  const tornAt = (arg ?? '').split(',').filter(Boolean).map(Number);
  for (let i = 0; i < n; i += 8) {
    const due = tornAt.find((t) => queue.nextSeq - 1 >= t && !existsSync(`${dir}.torn-${t}`));
    if (due !== undefined) await armTornWrite(`${dir}.torn-${due}`);
    const group: Array<Promise<unknown>> = [];
    for (let j = i; j < Math.min(n, i + 8); j++) {
      if (!queue.has(`r${j}`)) group.push(queue.append(`r${j}`, [crashSample(j)], { meta: { j } }));
    }
    await Promise.all(group);
    // Paced like a rollout runner, so the kills land while there is still work.
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  await queue.close();
} else if (role === 'consumer' && dir && arg) {
  const out = arg;
  const queue = await SampleQueue.open(dir, { mode: 'consumer', pollMs: 5 });
  process.stdout.write('ready\n');
  while (queue.committed <= n) {
    const batch = await queue.read({ max: 5, wait: true });
    const records = batch.records.map((r) => ({
      seq: r.seq,
      key: r.key,
      intact: r.samples.length === 1 && same(r.samples[0]!, crashSample(Number(r.key.slice(1)))),
    }));
    const path = join(out, `${batch.from}.json`);
    await writeFile(`${path}.tmp`, JSON.stringify({ from: batch.from, next: batch.next, records }));
    await rename(`${path}.tmp`, path);
    await queue.commit(batch.next);
  }
  await queue.close();
} else {
  process.stderr.write('usage: queue-crash.ts producer <dir> <n> [tornAt] | consumer <dir> <n> <out>\n');
  process.exit(2);
}
