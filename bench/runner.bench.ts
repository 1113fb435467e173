import { appendFile, mkdtemp, open, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSample, decodeSamples, encodeSamples, type RolloutEvent, type Sample } from '@vime/core';
import { SampleQueue } from '@vime/core/queue';
import { runRollouts } from '@vime/core/runner';
import { type Bench, fmt, type Table } from './harness.js';

export function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      reject(signal.reason);
    });
  });

interface Occupancy {
  wallMs: number;
  /** When the last rollout started, ms after the run began. */
  admittedMs: number;
  /** In flight, sampled every millisecond while rollouts remain to be started. */
  min: number;
  max: number;
  /** Time-weighted mean in flight from the first time at target to the last start. */
  mean: number;
  /** Finish → the start that took its slot, ms. */
  refillP50: number;
  refillP99: number;
}

/** Summarize (t, +1/-1) start/finish changes and the per-millisecond probe samples. */
function occupancy(
  changes: Array<[number, 1 | -1]>,
  probes: number[],
  target: number,
  t0: number,
  wallMs: number,
): Occupancy {
  changes.sort((a, b) => a[0] - b[0]);
  let lastStart = 0;
  for (const [t, d] of changes) if (d === 1) lastStart = t;
  let level = 0;
  let from: number | undefined;
  let area = 0;
  let prev = 0;
  const refill: number[] = [];
  const finished: number[] = [];
  for (const [t, d] of changes) {
    if (from !== undefined && t <= lastStart) area += level * (t - prev);
    if (d === -1) finished.push(t);
    else if (from !== undefined && finished.length > 0) refill.push(t - finished.shift()!);
    level += d;
    prev = t;
    if (from === undefined && level === target) from = t;
  }
  refill.sort((a, b) => a - b);
  const q = (p: number) => refill[Math.min(refill.length - 1, Math.floor(p * refill.length))] ?? 0;
  const span = lastStart - (from ?? lastStart);
  return {
    wallMs,
    admittedMs: lastStart - t0,
    min: probes.length > 0 ? Math.min(...probes) : target,
    max: probes.length > 0 ? Math.max(...probes) : target,
    mean: span > 0 ? area / span : target,
    refillP50: q(0.5),
    refillP99: q(0.99),
  };
}

/** Sample `level()` every millisecond while `active()`; between macrotasks both schedulers are settled. */
function probe(level: () => number, active: () => boolean): { stop: () => number[] } {
  const samples: number[] = [];
  const timer = setInterval(() => {
    if (active()) samples.push(level());
  }, 1);
  return {
    stop: () => {
      clearInterval(timer);
      return samples;
    },
  };
}

/** Durations of simulated rollouts: 50–400 ms, the same list for both schedulers. */
const durations = (n: number) => {
  const r = lcg(7);
  return Array.from({ length: n }, () => 50 + r() * 350);
};

async function viaRunner(batch: number, cap: number, spp: number): Promise<Occupancy> {
  const tasks = Array.from({ length: batch / spp }, (_, i) => ({ id: `t${i}` }));
  const d = durations(batch);
  const changes: Array<[number, 1 | -1]> = [];
  const run = runRollouts(
    tasks,
    async (_task, ctx) => {
      ctx.emit({ type: 'rollout:turn', turn: 0, promptTokens: 2048, outputTokens: 256, durationMs: 1 });
      await sleep(d[ctx.rolloutId]!, ctx.signal);
      return { reward: ctx.rolloutId % 2 };
    },
    { samplesPerPrompt: spp, concurrency: cap, guardMs: 60_000 },
  );
  run.on('event', (e: RolloutEvent) => {
    if (e.type === 'rollout:start') changes.push([e.t, 1]);
    else if (e.type === 'rollout:finish') changes.push([e.t, -1]);
  });
  const target = Math.min(batch, cap);
  const t0 = performance.now();
  const sampler = probe(
    () => run.stats.inFlight,
    () => run.stats.inFlight >= 1 && run.stats.started < batch && run.stats.started >= target,
  );
  let n = 0;
  for await (const _ of run) n++;
  const wall = performance.now() - t0;
  if (n !== batch) throw new Error(`expected ${batch} results, got ${n}`);
  return occupancy(changes, sampler.stop(), target, t0, wall);
}

/** The usual hand-written pool: `cap` workers pulling from a shared index. */
async function viaWorkerPool(batch: number, cap: number): Promise<Occupancy> {
  const d = durations(batch);
  const changes: Array<[number, 1 | -1]> = [];
  let next = 0;
  let level = 0;
  const target = Math.min(batch, cap);
  const t0 = performance.now();
  const sampler = probe(
    () => level,
    () => next < batch && next >= target,
  );
  const worker = async () => {
    while (next < batch) {
      const id = next++;
      level++;
      changes.push([performance.now(), 1]);
      await sleep(d[id]!);
      level--;
      changes.push([performance.now(), -1]);
    }
  };
  await Promise.all(Array.from({ length: target }, worker));
  const wall = performance.now() - t0;
  return occupancy(changes, sampler.stop(), target, t0, wall);
}

async function overheadPerRollout(): Promise<{ runner: Cost; pool: Cost }> {
  const n = 20_000;
  const tasks = Array.from({ length: n / 8 }, (_, i) => ({ id: `t${i}` }));
  const viaRunner = async () => {
    const run = runRollouts(tasks, () => ({ reward: 1 }), {
      samplesPerPrompt: 8,
      concurrency: 1000,
      guardMs: 60_000,
    });
    for await (const _ of run);
  };
  const viaPool = async () => {
    let next = 0;
    const worker = async () => {
      while (next < n) {
        next++;
        await Promise.resolve({ reward: 1 });
      }
    };
    await Promise.all(Array.from({ length: 1000 }, worker));
  };
  const [runner, pool] = await interleaved([viaRunner, viaPool], 5);
  const per = (c: Cost) => ({ wall: (c.wall / n) * 1000, cpu: (c.cpu / n) * 1000 });
  return { runner: per(runner!), pool: per(pool!) };
}

export interface Cost {
  /** Best wall-clock ms. */
  wall: number;
  /** Best CPU ms of this process (user + system): the work done, less disturbed by other load. */
  cpu: number;
}

/**
 * Run the variants in turn `rounds` times after one warm-up round; best wall and CPU ms of each. The
 * order rotates every round, so no variant always pays for the garbage its predecessor left.
 */
export async function interleaved(variants: Array<() => Promise<unknown>>, rounds: number): Promise<Cost[]> {
  const best = variants.map(() => ({ wall: Number.POSITIVE_INFINITY, cpu: Number.POSITIVE_INFINITY }));
  for (let round = -1; round < rounds; round++) {
    for (let k = 0; k < variants.length; k++) {
      const i = (k + Math.max(round, 0)) % variants.length;
      const variant = variants[i]!;
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      await variant();
      const wall = performance.now() - t0;
      const c = process.cpuUsage(c0);
      if (round >= 0) {
        best[i]!.wall = Math.min(best[i]!.wall, wall);
        best[i]!.cpu = Math.min(best[i]!.cpu, (c.user + c.system) / 1000);
      }
    }
  }
  return best;
}

async function runnerTables(): Promise<Table[]> {
  const configs: Array<[number, number, number]> = [
    [1000, 1000, 8],
    [1000, 184, 8],
    [184, 1000, 8],
  ];
  const rows: Array<Array<string | number>> = [];
  const checks: NonNullable<Table['checks']> = [];
  for (const [batch, cap, spp] of configs) {
    const target = Math.min(batch, cap);
    // Interleaved, best wall time of three (the machine is shared); occupancy from the same runs.
    const runs: Array<[Occupancy, Occupancy]> = [];
    for (let i = 0; i < 3; i++)
      runs.push([await viaRunner(batch, cap, spp), await viaWorkerPool(batch, cap)]);
    const best = (k: 0 | 1) => runs.map((x) => x[k]).reduce((a, b) => (b.wallMs < a.wallMs ? b : a));
    const r = best(0);
    const p = best(1);
    r.min = Math.min(...runs.map((x) => x[0].min));
    r.max = Math.max(...runs.map((x) => x[0].max));
    const line = (name: string, o: Occupancy) => [
      `${name}, batch ${batch}, cap ${cap}`,
      target,
      `${o.min}–${o.max}`,
      o.mean.toFixed(1),
      fmt.ms(o.refillP50),
      fmt.ms(o.refillP99),
      fmt.ms(o.admittedMs),
      fmt.ms(o.wallMs),
    ];
    rows.push(line('runRollouts', r), line('worker pool (reference)', p));
    checks.push({
      target: `batch ${batch}, cap ${cap}: in flight exactly min(batch, cap) = ${target} at every sample until the last start`,
      measured: `${r.min}–${r.max}`,
      ok: r.min === target && r.max === target,
    });
    if (batch > cap) {
      checks.push({
        target: `batch ${batch}, cap ${cap}: wall time within 5% of the worker pool (slots refilled at once)`,
        measured: fmt.ratio(r.wallMs / p.wallMs),
        ok: r.wallMs / p.wallMs <= 1.05,
      });
    }
  }
  const overhead = await overheadPerRollout();
  return [
    {
      title: 'rollouts in flight (simulated rollouts of 50–400 ms, 8 per prompt)',
      columns: [
        'scheduler',
        'target',
        'in flight (min–max)',
        'mean',
        'refill p50',
        'refill p99',
        'last start',
        'wall',
      ],
      rows,
      checks,
      notes: [
        'In flight (min–max) is sampled every millisecond while rollouts remain to be started; the mean is time-weighted from start/finish events.',
        'Refill: time from a rollout finishing to the start of the rollout that takes its slot.',
      ],
    },
    {
      title: 'scheduling cost per rollout (20,000 rollouts that return at once, cap 1000)',
      columns: ['scheduler', 'CPU µs per rollout', 'wall µs per rollout'],
      rows: [
        [
          'runRollouts (guard timer, abort signal, events, outcome checks)',
          overhead.runner.cpu.toFixed(1),
          overhead.runner.wall.toFixed(1),
        ],
        ['bare worker pool (reference)', overhead.pool.cpu.toFixed(1), overhead.pool.wall.toFixed(1)],
      ],
      checks: [
        {
          target: 'runner bookkeeping under 50 µs of CPU per rollout (a rollout lasts seconds to minutes)',
          measured: `${overhead.runner.cpu.toFixed(1)} µs`,
          ok: overhead.runner.cpu < 50,
        },
      ],
      notes: ['Best of 5 interleaved rounds; CPU is this process’s user + system time.'],
    },
  ];
}

export function sampleOf(i: number, tokens: number, response: number, r: () => number): Sample {
  return createSample({
    tokens: Int32Array.from({ length: tokens }, () => Math.floor(r() * 151_000)),
    response_length: response,
    loss_mask: Uint8Array.from({ length: response }, (_, k) => ((k >> 9) % 4 === 3 ? 0 : 1)),
    rollout_log_probs: Float32Array.from({ length: response }, () => Math.log(0.5 + r() / 2)),
    reward: i % 2,
    status: 'completed',
    group_index: i >> 3,
    index: i,
    rollout_id: i,
  });
}

async function queueTables(): Promise<Table[]> {
  const root = await mkdtemp(join(tmpdir(), 'vime-bench-queue-'));
  let files = 0;
  const fresh = () => join(root, `f${files++}`);
  try {
    // Rollout-sized records: one 16,384-token sample each (12,288 response tokens), ~140 KiB encoded.
    const r = lcg(11);
    const big = Array.from({ length: 256 }, (_, i) => [sampleOf(i, 16_384, 12_288, r)]);
    const bigBytes = big.reduce((sum, s) => sum + encodeSamples(s).length, 0);
    // Small records (a short rollout, ~3 KiB): here the number of fdatasyncs decides the speed.
    const small = Array.from({ length: 512 }, (_, i) => [sampleOf(i, 512, 384, r)]);

    let plainFile = '';
    const viaAppendFile = (data: Sample[][]) => async () => {
      plainFile = fresh();
      for (const s of data) await appendFile(plainFile, encodeSamples(s));
    };
    const viaAppendFileSync = (data: Sample[][]) => async () => {
      const handle = await open(fresh(), 'a');
      for (const s of data) {
        await handle.appendFile(encodeSamples(s));
        await handle.datasync();
      }
      await handle.close();
    };
    const flushes = new Map<string, number>();
    const viaQueue = (data: Sample[][], sync: boolean, concurrent: number) => async () => {
      const q = await SampleQueue.open(fresh(), { mode: 'producer', sync });
      const name = `${data.length}/${sync}/${concurrent}`;
      let count = 0;
      q.on('flush', () => {
        count++;
      });
      for (let i = 0; i < data.length; i += concurrent) {
        await Promise.all(data.slice(i, i + concurrent).map((s, k) => q.append(`r${i + k}`, s)));
      }
      await q.close();
      flushes.set(name, count);
    };
    const [plain, plainSync, qNoSync, qSync, qGroup] = await interleaved(
      [
        viaAppendFile(big),
        viaAppendFileSync(big),
        viaQueue(big, false, 1),
        viaQueue(big, true, 1),
        viaQueue(big, true, 64),
      ],
      5,
    );
    const [sPlainSync, sSync, sGroup] = await interleaved(
      [viaAppendFileSync(small), viaQueue(small, true, 1), viaQueue(small, true, 64)],
      5,
    );

    // Read: the queue (frames, CRC, decode) vs readFile + decode of the plain file.
    const queueDir = fresh();
    const writer = await SampleQueue.open(queueDir, { mode: 'producer', sync: false });
    await Promise.all(big.map((s, i) => writer.append(`r${i}`, s)));
    await writer.close();
    await viaAppendFile(big)();
    const plainPath = plainFile;
    const lengths = big.map((s) => encodeSamples(s).length);
    const [qRead, plainRead] = await interleaved(
      [
        async () => {
          const q = await SampleQueue.open(queueDir, { mode: 'consumer' });
          let got = 0;
          for (;;) {
            const batch = await q.read({ max: 64 });
            if (batch.records.length === 0) break;
            got += batch.records.length;
          }
          await q.rewind();
          await q.close();
          if (got !== big.length) throw new Error(`read ${got} of ${big.length}`);
        },
        async () => {
          const bytes = await readFile(plainPath);
          let pos = 0;
          for (const length of lengths) {
            decodeSamples(bytes.subarray(pos, pos + length));
            pos += length;
          }
        },
      ],
      3,
    );

    const mb = bigBytes / (1 << 20);
    const rate = (ms: number) => fmt.rate((mb * 1000) / ms, 'MiB');
    const recs = (n: number, ms: number) => fmt.rate((n * 1000) / ms, 'rec');
    const [P, PS, QN, QS, QG] = [plain!, plainSync!, qNoSync!, qSync!, qGroup!];
    const row = (name: string, c: Cost, ref: Cost) => [
      name,
      recs(big.length, c.wall),
      rate(c.wall),
      fmt.ratio(ref.wall / c.wall),
      fmt.ms(c.cpu),
      fmt.ratio(ref.cpu / c.cpu),
    ];
    const smallRow = (name: string, c: Cost) => [
      name,
      recs(small.length, c.wall),
      fmt.ratio(sPlainSync!.wall / c.wall),
      fmt.ms(c.cpu),
    ];
    return [
      {
        title: `queue append, ${big.length} records × 1 sample of 16,384 tokens (${fmt.bytes(bigBytes)} encoded)`,
        columns: ['writer', 'records/s', 'MiB/s', 'speed vs ref', 'CPU', 'CPU efficiency vs ref'],
        rows: [
          row('appendFile of the encoded bytes (reference)', P, P),
          row('appendFile + fdatasync per record', PS, P),
          row('SampleQueue.append, sequential, sync off', QN, P),
          row('SampleQueue.append, sequential, fdatasync each', QS, P),
          row('SampleQueue.append, 64 concurrent (group commit), fdatasync', QG, P),
        ],
        checks: [
          {
            target:
              'framing + CRC cost ≤ 25% CPU: queue without sync ≥ 0.8× the CPU efficiency of appendFile',
            measured: fmt.ratio(P.cpu / QN.cpu),
            ok: P.cpu / QN.cpu >= 0.8,
          },
          {
            target: 'durable append: queue (fdatasync each) as fast as appendFile + fdatasync (≥ 0.9×)',
            measured: fmt.ratio(PS.wall / QS.wall),
            ok: PS.wall / QS.wall >= 0.9,
          },
        ],
        notes: [
          'Every writer encodes the samples with encodeSamples inside the timed loop.',
          'Best of 5 interleaved rounds after a warm-up round; CPU is this process’s user + system time',
          '(the machine is shared, so wall-clock ratios move with other load; CPU ratios much less).',
        ],
      },
      {
        title: `durable appends of small records, ${small.length} records of 512 tokens (fdatasync-bound)`,
        columns: ['writer', 'records/s', 'speed vs ref', 'CPU'],
        rows: [
          smallRow('appendFile + fdatasync per record (reference)', sPlainSync!),
          smallRow('SampleQueue.append, sequential, fdatasync each', sSync!),
          smallRow('SampleQueue.append, 64 concurrent (group commit), fdatasync', sGroup!),
        ],
        checks: [
          {
            target: 'group commit: one fdatasync per 64 concurrent appends',
            measured: `${flushes.get(`${small.length}/true/64`)} fdatasyncs for ${small.length} records`,
            ok: flushes.get(`${small.length}/true/64`) === small.length / 64,
          },
          {
            // 64 appends share one fdatasync; encoding each record still costs the same.
            target: 'group commit ≥ 2× the records/s of appendFile + fdatasync per record',
            measured: fmt.ratio(sPlainSync!.wall / sGroup!.wall),
            ok: sPlainSync!.wall / sGroup!.wall >= 2,
          },
        ],
      },
      {
        title: `queue read, ${big.length} records (decode included)`,
        columns: ['reader', 'records/s', 'MiB/s', 'speed vs ref', 'CPU', 'CPU efficiency vs ref'],
        rows: [
          row('readFile + decodeSamples per record (reference)', plainRead!, plainRead!),
          row('SampleQueue.read, 64 per batch (CRC check + decode)', qRead!, plainRead!),
        ],
        checks: [
          {
            target: 'queue read ≥ 0.8× the CPU efficiency of readFile + decode',
            measured: fmt.ratio(plainRead!.cpu / qRead!.cpu),
            ok: plainRead!.cpu / qRead!.cpu >= 0.8,
          },
        ],
      },
    ];
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

export default {
  name: 'runner',
  description:
    'runRollouts in-flight occupancy at 1,000 concurrent rollouts; SampleQueue append/read vs appendFile',
  async run() {
    return [...(await runnerTables()), ...(await queueTables())];
  },
} satisfies Bench;
