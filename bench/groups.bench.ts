/**
 * Durable work units against the record hand-off: the same sibling results through `GroupQueue`
 * (create, lease, submit with receipts, take, commit with GC) and through `RolloutQueue` (append,
 * endStep, takeStep, commitStep), fdatasync on, all siblings of a step submitted concurrently.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GroupQueue, RolloutQueue, type Sample, type ScoredRollout } from '@vime/core';
import { type Bench, fmt, type Table } from './harness.js';
import { type Cost, interleaved, lcg, sampleOf } from './runner.bench.js';

async function groupsTable(): Promise<Table> {
  const root = await mkdtemp(join(tmpdir(), 'vime-bench-groups-'));
  let dirs = 0;
  const fresh = () => join(root, `q${dirs++}`);
  try {
    const steps = 8;
    const groupsPerStep = 8;
    const n = 8;
    const r = lcg(7);
    const samples: Sample[][][] = Array.from({ length: steps }, (_, step) =>
      Array.from({ length: groupsPerStep }, (_, g) =>
        Array.from({ length: n }, (_, s) => {
          const sample = sampleOf((step * groupsPerStep + g) * n + s, 2048, 1536, r);
          sample.weight_versions = [String(step)];
          return sample;
        }),
      ),
    );
    const viaGroups = async () => {
      const q = await GroupQueue.open(fresh());
      for (let step = 1; step <= steps; step++) {
        const mine = samples[step - 1]!;
        await Promise.all(mine.map((_, g) => q.create({ n, key: `s${step}/g${g}` })));
        const leases = [];
        for (let g = 0; g < groupsPerStep; g++) leases.push((await q.lease({ wait: false }))!);
        await Promise.all(
          leases.flatMap((lease, g) =>
            lease.attempts.map((a) => q.submit(a, { reward: a.slot % 2, samples: [mine[g]![a.slot]!] })),
          ),
        );
        const batch = await q.take(step, { groups: groupsPerStep });
        if (batch.groups.length !== groupsPerStep) throw new Error('short step');
        await q.commit(step);
      }
      await q.close();
    };
    const viaRecords = async () => {
      const q = await RolloutQueue.open(fresh());
      for (let step = 1; step <= steps; step++) {
        const mine = samples[step - 1]!;
        await Promise.all(
          mine.flatMap((group, g) =>
            group.map((sample, s) => {
              const groupIndex = (step - 1) * groupsPerStep + g;
              const rollout: ScoredRollout = {
                taskId: `task-${groupIndex}`,
                groupIndex,
                sampleIndex: s,
                rolloutId: groupIndex * n + s,
                status: 'completed',
                reward: s % 2,
                samples: [sample],
                turns: 1,
                timings: {},
                metadata: {},
              };
              return q.append(step, rollout);
            }),
          ),
        );
        await q.endStep(step);
        const batch = await q.takeStep(step);
        if (batch.rollouts.length !== groupsPerStep * n) throw new Error('short step');
        await q.commitStep(step);
      }
      await q.close();
    };
    const [gq, rq] = await interleaved([viaGroups, viaRecords], 5);
    const total = steps * groupsPerStep * n;
    const row = (name: string, c: Cost) => [
      name,
      fmt.rate((total * 1000) / c.wall, 'sample'),
      fmt.ratio(rq!.wall / c.wall),
      fmt.ms(c.cpu),
      fmt.ratio(rq!.cpu / c.cpu),
    ];
    return {
      title: `append + hand-off, ${steps} steps × ${groupsPerStep} groups × ${n} siblings of 2,048 tokens, fdatasync on`,
      columns: ['path', 'samples/s', 'speed vs ref', 'CPU', 'CPU efficiency vs ref'],
      rows: [
        row('RolloutQueue append + endStep + takeStep + commitStep (reference)', rq!),
        row('GroupQueue create + lease + submit + take + commit (GC on)', gq!),
      ],
      checks: [
        {
          target: 'groups as durable units keep ≥ 0.8× the throughput of the record hand-off',
          measured: fmt.ratio(rq!.wall / gq!.wall),
          ok: rq!.wall / gq!.wall >= 0.8,
        },
      ],
      notes: [
        'GroupQueue also writes a lease per group, a receipt per sibling (the record itself), and a state snapshot at every commit (GC).',
      ],
    };
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

export default {
  name: 'groups',
  description:
    'GroupQueue (prompt groups, leases, receipts) vs the RolloutQueue record hand-off, fdatasync on',
  async run() {
    return [await groupsTable()];
  },
} satisfies Bench;
