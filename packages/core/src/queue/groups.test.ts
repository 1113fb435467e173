import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigError, ValidationError } from '../errors.js';
import { createSample, type Sample } from '../sample.js';
import { QueueError } from './format.js';
import type { GroupLease, GroupQueueOptions, SiblingAttempt, TrainingBatch } from './group-types.js';
import { GroupQueue } from './groups.js';

let dir: string;
const open: GroupQueue[] = [];
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'vime-groups-'));
});
afterEach(async () => {
  for (const q of open.splice(0)) await q.close().catch(() => {});
  await rm(dir, { recursive: true, force: true });
});

async function openQueue(options: GroupQueueOptions = {}, at = dir): Promise<GroupQueue> {
  const q = await GroupQueue.open(at, { sync: false, ...options });
  open.push(q);
  return q;
}

async function reopen(q: GroupQueue, options: GroupQueueOptions = {}): Promise<GroupQueue> {
  await q.close();
  open.splice(open.indexOf(q), 1);
  return openQueue(options, q.dir);
}

/** A sample of `tokens` response tokens, generated under weight `version`. */
function sample(tag: number, version: number, tokens = 3): Sample {
  return createSample({
    tokens: Array.from({ length: tokens + 2 }, (_, i) => tag * 100 + i),
    response_length: tokens,
    loss_mask: Array(tokens).fill(1),
    weight_versions: [String(version)],
    status: 'completed',
    metadata: { tag },
  });
}

const ok = (a: SiblingAttempt, version = 0, reward = 1) => ({
  reward,
  samples: [sample(a.group * 10 + a.slot, version)],
});

async function leaseAll(q: GroupQueue, options: { deadlineMs?: number } = {}) {
  const lease = await q.lease({ wait: false, ...options });
  if (!lease) throw new Error('no work');
  return lease;
}

describe('GroupQueue: groups as units', () => {
  it('leases one named group only, and records a step of 0 groups (all of its groups dropped)', async () => {
    const q = await openQueue();
    const [g0, g1] = [await q.create({ n: 2 }), await q.create({ n: 1 })];
    // Named: g1's sibling, although g0 is older; then nothing free of g1.
    const lease = await q.lease({ group: g1, wait: false });
    expect(lease).toMatchObject({ group: g1, attempts: [{ slot: 0 }] });
    expect(await q.lease({ group: g1, wait: false })).toBeUndefined();
    const one = await q.lease({ group: g0, slots: 1, wait: false });
    expect(one!.attempts.map((a) => a.slot)).toEqual([0]);
    // Leases are not flushed on their own, but a reopen finds them (and counts them lost).
    const again = await reopen(q);
    expect(again.stats.lost).toBe(2);
    await again.drop(g0);
    await again.drop(g1);
    const empty = await again.take(1, { groups: 0 });
    expect(empty).toMatchObject({ step: 1, replay: false, groups: [] });
    await again.commit(1);
    expect(again.trainerStep).toBe(1);
    await expect(again.take(2, { groups: -1 })).rejects.toThrow(/integer ≥ 0/);
  });

  it('hands a group off only when every sibling is in, with receipts that make a repeat free', async () => {
    const q = await openQueue();
    const g = await q.create({ n: 3, payload: { prompt: 'p0' }, key: 'task-0' });
    expect(await q.create({ n: 3, key: 'task-0' })).toBe(g); // idempotent by key
    const lease = await leaseAll(q);
    expect(lease.attempts.map((a) => a.slot)).toEqual([0, 1, 2]);
    const [a0, a1, a2] = lease.attempts as [SiblingAttempt, SiblingAttempt, SiblingAttempt];
    const r0 = await q.submit(a0, ok(a0));
    expect(r0).toMatchObject({ id: `${g}/0/0`, duplicate: false });
    // A lost reply: the worker submits again and gets the same receipt; nothing is written.
    const seq = q.journal.durable;
    expect(await q.submit(a0, ok(a0))).toEqual({ ...r0, duplicate: true });
    expect(q.journal.durable).toBe(seq);
    expect(q.receipt(g, 0)).toEqual({ ...r0, duplicate: true });
    await q.submit(a1, ok(a1));
    expect(q.stats.ready).toBe(0);
    const early = q.take(1, { groups: 1, signal: AbortSignal.timeout(200) });
    await expect(early).rejects.toThrow();
    await q.submit(a2, ok(a2));
    const batch = await q.take(1, { groups: 1 });
    expect(batch.groups.map((x) => x.group)).toEqual([g]);
    expect(batch.groups[0]!.siblings.map((s) => s.samples[0]!.metadata.tag)).toEqual([0, 1, 2]);
    expect(batch.groups[0]!.payload).toEqual({ prompt: 'p0' });
    // The same step asked again (the trainer restarted before committing) is the same batch.
    const q2 = await reopen(q);
    const again = await q2.take(1, { groups: 1 });
    expect(again.replay).toBe(true);
    expect(again.groups.map((x) => x.group)).toEqual([g]);
    await q2.commit(1);
    expect(q2.stats).toMatchObject({ created: 1, completed: 1, handed: 1 });
    // The key still finds the group after it was handed off and collected: it is never run twice.
    expect(await q2.create({ n: 3, key: 'task-0' })).toBe(g);
    expect(q2.created).toBe(1);
  });

  it('refuses a stale attempt: past its deadline, replaced, or from before a restart', async () => {
    let q = await openQueue({ deadlineMs: 60_000 });
    const g = await q.create({ n: 2 });
    const first = await leaseAll(q, { deadlineMs: 50 });
    const [old] = first.attempts as [SiblingAttempt];
    await new Promise((r) => setTimeout(r, 80));
    // Past the deadline: refused even before the sweep timer ran, and its signal says so.
    await expect(q.submit(old, ok(old))).rejects.toMatchObject({ code: 'attempt_stale' });
    expect(old.signal.aborted).toBe(true);
    const second = await leaseAll(q);
    expect(second.attempts.map((a) => [a.slot, a.attempt])).toEqual([
      [0, 1],
      [1, 1],
    ]);
    await expect(q.submit(old, ok(old))).rejects.toThrow(/attempt 1 holds the slot now/);
    await q.submit(second.attempts[0]!, ok(second.attempts[0]!));
    const b = second.attempts[1]!;
    // The owner dies with b leased: after the restart b can never commit, and slot 1 is leased anew.
    q = await reopen(q);
    await expect(q.submit(b, ok(b))).rejects.toMatchObject({ code: 'attempt_stale' });
    const third = await leaseAll(q);
    expect(third.attempts.map((a) => [a.slot, a.attempt])).toEqual([[1, 2]]);
    await q.submit(third.attempts[0]!, ok(third.attempts[0]!));
    expect(q.stats).toMatchObject({ expired: 2, lost: 1, completed: 1 });
    expect(q.group(g)!.slots.map((s) => s.done?.attempt)).toEqual([1, 2]);
  });

  it('replaces or drops a sibling that never returns by its 2 s deadline: never a hang', async () => {
    const q = await openQueue({ deadlineMs: 2000, maxAttempts: 2 });
    const replaced = await q.create({ n: 4, key: 'replaced' });
    const dropped = await q.create({ n: 4, key: 'dropped' });
    const t0 = Date.now();
    const drops: unknown[] = [];
    q.on('drop', (e) => drops.push(e));
    for (const g of [replaced, dropped]) {
      const lease = await leaseAll(q);
      expect(lease.group).toBe(g);
      // Three siblings return, the fourth never does.
      for (const a of lease.attempts.slice(0, 3)) await q.submit(a, ok(a));
    }
    // A worker waiting for work gets the replacement once the deadline passed, not before.
    const retry = await q.lease({ signal: AbortSignal.timeout(5000) });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1990);
    expect(retry!.group).toBe(replaced);
    expect(retry!.attempts.map((a) => [a.slot, a.attempt])).toEqual([[3, 1]]);
    await q.submit(retry!.attempts[0]!, ok(retry!.attempts[0]!));
    // The other group's replacement never returns either: dropped at its deadline, counted.
    const again = await q.lease({ signal: AbortSignal.timeout(5000) });
    expect(again!.group).toBe(dropped);
    const batch = await q.take(1, { groups: 1, signal: AbortSignal.timeout(8000) });
    expect(batch.groups.map((x) => x.group)).toEqual([replaced]);
    await expect.poll(() => q.stats.dropped.deadline, { timeout: 5000, interval: 50 }).toBe(1);
    expect(drops).toEqual([{ group: dropped, reason: 'deadline' }]);
    expect(Date.now() - t0).toBeLessThan(7000);
    expect(q.stats).toMatchObject({ expired: 3, completed: 1, handed: 1, open: 0 });
  }, 15_000);

  it('gives an infra failure a bounded number of replacements, then drops the group with its reason', async () => {
    const q = await openQueue({ maxAttempts: 2 });
    const g = await q.create({ n: 2 });
    const lease = await leaseAll(q);
    const err = { code: 'engine_down', message: 'connection refused', phase: 'generate' };
    expect(await q.fail(lease.attempts[0]!, err)).toEqual({ outcome: 'replace' });
    expect(await q.fail(lease.attempts[0]!, err)).toEqual({ outcome: 'stale' });
    const retry = await leaseAll(q);
    expect(retry.attempts.map((a) => a.attempt)).toEqual([1]);
    expect(await q.fail(retry.attempts[0]!, err)).toEqual({ outcome: 'drop', reason: 'infra_failed' });
    expect(q.group(g)!.status).toBe('dropped');
    // The sibling still running can no longer commit: a failure never turns into a reward.
    expect(lease.attempts[1]!.signal.aborted).toBe(true);
    await expect(q.submit(lease.attempts[1]!, ok(lease.attempts[1]!))).rejects.toMatchObject({
      code: 'attempt_stale',
    });
    expect(q.stats.dropped).toMatchObject({ infra_failed: 1 });
    expect(await q.lease({ wait: false })).toBeUndefined();
  });

  it('rejects bad input with the field, the value and the fix', async () => {
    const q = await openQueue();
    await expect(q.create({ n: 0 })).rejects.toThrow(ConfigError);
    await expect(q.create({ n: 2, key: '' })).rejects.toThrow(/key: expected a non-empty string/);
    await q.create({ n: 1 });
    const [a] = (await leaseAll(q)).attempts as [SiblingAttempt];
    await expect(q.submit(a, { reward: Number.NaN, samples: [sample(1, 0)] })).rejects.toThrow(
      /reward: GroupQueue.submit: expected a finite number, found number NaN/,
    );
    await expect(
      q.submit(a, { reward: 1, samples: [sample(1, 0)], status: 'failed' as never }),
    ).rejects.toThrow(/report failures with fail\(\)/);
    const unversioned = createSample({ tokens: [1, 2], response_length: 1 });
    await expect(q.submit(a, { reward: 1, samples: [unversioned] })).rejects.toThrow(ValidationError);
    for (const v of ['-1', 'v3', '1e3']) {
      const s = sample(1, 0);
      s.weight_versions = [v];
      await expect(q.submit(a, { reward: 1, samples: [s] })).rejects.toThrow(/weight_versions\[0\]/);
    }
    await expect(
      q.submit(a, { reward: 1, samples: [sample(1, 0)], versions: [{ versions: [1], spans: [[1, -2]] }] }),
    ).rejects.toThrow(/spans\[0\]\[1\]/);
    await expect(q.submit({ group: 7, slot: 0, attempt: 0 }, ok(a))).rejects.toThrow(
      /names no sibling attempt/,
    );
    await expect(q.take(2, { groups: 1 })).rejects.toThrow(/expected 1/);
    await expect(GroupQueue.open(dir)).rejects.toThrow(QueueError); // one owner at a time
  });
});

describe('GroupQueue: staleness and hand-off order', () => {
  it('reports version spans and lag per sample, with a weight update every step; maxStaleness 1 drops and counts', async () => {
    const q = await openQueue({ maxStaleness: 1 });
    for (let i = 0; i < 6; i++) await q.create({ n: 2, key: `p${i}` });
    // Groups 0..5 run under versions 0, 0, 1, 2, 2, 2 (one sample of group 3 spans versions 1 and 2).
    const versionOf = [0, 0, 1, 2, 2, 2];
    const leases: GroupLease[] = [];
    for (let i = 0; i < 6; i++) leases.push(await leaseAll(q));
    const submit = async (i: number) => {
      for (const a of leases[i]!.attempts) {
        const s = sample(i * 10 + a.slot, versionOf[i]!, 4);
        if (i === 3 && a.slot === 1) {
          s.weight_versions = ['1', '2'];
          s.metadata.weight_version_spans = [
            [1, 3],
            [2, 1],
          ];
        }
        await q.submit(a, { reward: a.slot, samples: [s] });
      }
    };
    await submit(0);
    await submit(1);
    const b1 = await q.take(1, { groups: 1 });
    expect(b1.groups[0]).toMatchObject({ group: 0, lag: 0, span: { min: 0, max: 0 } });
    expect(b1.groups[0]!.queueMs).toBeGreaterThanOrEqual(0);
    await q.commit(1); // publishes version 1
    await submit(2);
    const b2 = await q.take(2, { groups: 1 });
    expect(b2.trainerVersion).toBe(1);
    expect(b2.groups.map((g) => [g.group, g.lag])).toEqual([[1, 1]]); // oldest version first
    await q.commit(2);
    await submit(3);
    await q.commit(3, { version: 3 }).catch((e) => e); // not taken: refused
    const b3 = await q.take(3, { groups: 2 });
    expect(b3.groups.map((g) => g.group)).toEqual([2, 3]);
    const g3 = b3.groups[1]!;
    expect(g3.siblings[1]!.versions).toEqual([
      {
        versions: [1, 2],
        spans: [
          [1, 3],
          [2, 1],
        ],
      },
    ]);
    expect(g3.siblings[1]!.span).toEqual({ min: 1, max: 2 });
    expect(g3.siblings[1]!.lag).toBe(1);
    expect(g3.siblings[0]!.lag).toBe(0);
    await q.commit(3);
    await submit(4);
    await submit(5);
    await q.commit(3);
    // Version 3 now, and nothing older than 2 may go: groups 4, 5 (version 2) pass with lag 1.
    const b4 = await q.take(4, { groups: 2 });
    expect(b4.groups.map((g) => [g.group, g.lag])).toEqual([
      [4, 1],
      [5, 1],
    ]);
    expect(b4.stale).toEqual([]);
    await q.commit(4);
    // A group finished under version 2 but taken at version 4 is over the bound: dropped, counted.
    await q.create({ n: 1, key: 'late' });
    const late = await leaseAll(q);
    await q.submit(late.attempts[0]!, { reward: 0, samples: [sample(99, 2)] });
    await q.create({ n: 1, key: 'fresh' });
    const fresh = await leaseAll(q);
    await q.submit(fresh.attempts[0]!, { reward: 0, samples: [sample(98, 4)] });
    const b5 = await q.take(5, { groups: 1 });
    expect(b5.groups.map((g) => g.group)).toEqual([fresh.group]);
    expect(b5.stale).toEqual([{ group: late.group, lag: 2 }]);
    expect(q.stats.dropped.stale).toBe(1);
  });

  it('reads version spans in the layout the capture proxy records ([start, end, version]), and names a bad one', async () => {
    const q = await openQueue();
    await q.create({ n: 3 });
    const { attempts } = await leaseAll(q);
    const recorded = sample(1, 1, 4);
    recorded.weight_versions = ['1', '2'];
    // As the trajectory manager writes it: tokens 0..3 under version "1", token 3 under version "2".
    recorded.metadata.weight_version_spans = [
      [0, 3, '1'],
      [3, 4, '2'],
    ];
    await q.submit(attempts[0]!, { reward: 1, samples: [recorded] });
    const backwards = sample(2, 1, 4);
    backwards.metadata.weight_version_spans = [[3, 1, '1']];
    const error = await q.submit(attempts[1]!, { reward: 0, samples: [backwards] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).path).toBe('samples[0].metadata.weight_version_spans[0]');
    await q.submit(attempts[1]!, { reward: 0, samples: [sample(2, 1, 4)] });
    await q.submit(attempts[2]!, { reward: 0, samples: [sample(3, 1, 4)] });
    const batch = await q.take(1, { groups: 1 });
    expect(batch.groups[0]!.siblings[0]!.versions).toEqual([
      {
        versions: [1, 2],
        spans: [
          [1, 3],
          [2, 1],
        ],
      },
    ]);
  });

  it('leases groups with recorded work before fresh ones, and drops one already too stale to hand off', async () => {
    const q = await openQueue({ maxStaleness: 1, deadlineMs: 60_000 });
    const a = await q.create({ n: 2 });
    const b = await q.create({ n: 1 });
    // Group a: one sibling recorded at version 0, the other lost to a short deadline.
    const la = await q.lease({ wait: false, deadlineMs: 30 });
    await q.submit(la!.attempts[0]!, ok(la!.attempts[0]!, 0));
    await new Promise((r) => setTimeout(r, 50));
    const c = await q.create({ n: 1 });
    const next = await q.lease({ wait: false });
    expect([next!.group, next!.attempts.map((x) => [x.slot, x.attempt])]).toEqual([a, [[1, 1]]]);
    // Two weight updates while that attempt runs: group a's recorded sibling (version 0) is then over the bound.
    for (const [step, g] of [
      [1, b],
      [2, c],
    ] as const) {
      const l = await q.lease({ wait: false });
      expect(l!.group).toBe(g);
      await q.submit(l!.attempts[0]!, ok(l!.attempts[0]!, q.trainerVersion));
      await q.take(step, { groups: 1 });
      await q.commit(step);
    }
    expect(await q.fail(next!.attempts[0]!, { code: 'engine_down', message: 'x' })).toEqual({
      outcome: 'replace',
    });
    expect(await q.lease({ wait: false })).toBeUndefined();
    expect(q.group(a)!).toMatchObject({ status: 'dropped', reason: 'stale' });
    expect(q.stats.dropped.stale).toBe(1);
  });
});

describe('GroupQueue: partial continuations', () => {
  it('continues the next attempt from a saved partial, and the result spans its versions', async () => {
    const q = await openQueue({ deadlineMs: 60_000 });
    const g = await q.create({ n: 1 });
    const first = await leaseAll(q, { deadlineMs: 40 });
    const a = first.attempts[0]!;
    await q.savePartial(a, { samples: [sample(1, 3)], state: { messages: 2, patch: 'diff --git' } });
    await new Promise((r) => setTimeout(r, 60)); // interrupted (a weight update, a crash)
    const q2 = await reopen(q);
    const second = await leaseAll(q2);
    const b = second.attempts[0]!;
    expect(b.attempt).toBe(1);
    expect(b.partial).toMatchObject({ attempt: 0, state: { messages: 2, patch: 'diff --git' } });
    expect(b.partial!.samples[0]!.metadata.tag).toBe(1);
    expect(b.partial!.versions).toEqual([{ versions: [3] }]);
    await q2.commit(0);
    await q2.submit(b, { reward: 1, samples: [sample(2, 5)] });
    const batch = await q2.take(1, { groups: 1 });
    expect(batch.groups[0]!.group).toBe(g);
    expect(batch.groups[0]!.siblings[0]!.span).toEqual({ min: 3, max: 5 });
    expect(q2.stats).toMatchObject({ partials: 1, restarted: 0 });
  });

  it("sets a partial aside with partials: 'restart'", async () => {
    const q = await openQueue({ partials: 'restart' });
    await q.create({ n: 1 });
    const a = (await leaseAll(q, { deadlineMs: 30 })).attempts[0]!;
    await q.savePartial(a, { samples: [sample(1, 0)] });
    await new Promise((r) => setTimeout(r, 50));
    const b = (await leaseAll(q)).attempts[0]!;
    expect(b.partial).toBeUndefined();
    expect(q.stats.restarted).toBe(1);
    await expect(q.savePartial(a, { samples: [sample(1, 0)] })).rejects.toMatchObject({
      code: 'attempt_stale',
    });
  });
});

describe('GroupQueue: checkpoint, rollback, fork, GC', () => {
  /** Run steps `from..to`: create, run and hand off `per` groups of 2 per step, publishing version = step. */
  async function train(q: GroupQueue, from: number, to: number, per = 2) {
    const batches: TrainingBatch[] = [];
    for (let step = from; step <= to; step++) {
      for (let i = 0; i < per; i++) {
        await q.create({ n: 2, payload: { step, i } });
        const lease = await leaseAll(q);
        for (const a of lease.attempts) await q.submit(a, ok(a, q.trainerVersion, step));
      }
      const batch = await q.take(step, { groups: per });
      expect(batch.replay).toBe(false);
      batches.push(batch);
      await q.commit(step);
    }
    return batches;
  }
  const ids = (b: { groups: Array<{ group: number; siblings: Array<{ samples: Sample[] }> }> }) =>
    b.groups.map((g) => [g.group, g.siblings.map((s) => s.samples[0]!.tokens[0])]);

  it('rolls back to step 3 twice and forks at 4: each branch replays exactly its history; GC keeps what each needs', async () => {
    const q = await openQueue({ segmentBytes: 4096 });
    await train(q, 1, 3);
    expect(await q.checkpoint()).toBe(3);
    const history = await train(q, 4, 6);
    for (let round = 0; round < 2; round++) {
      await q.rollback(3);
      expect(q.trainerStep).toBe(3);
      expect(q.trainerVersion).toBe(3);
      for (let step = 4; step <= 6; step++) {
        const b = await q.take(step, { groups: 2 });
        expect(b.replay).toBe(true);
        expect(ids(b)).toEqual(ids(history[step - 4]!));
        if (step === 4 && round === 1) {
          await q.commit(4);
          await q.fork(join(dir, 'branch'), { fromStep: 4 });
          break;
        }
        await q.commit(step);
      }
    }
    // The parent goes on from 4 with its recorded 5, 6; the branch has 1..4 and new work after.
    const branch = await openQueue({ segmentBytes: 4096 }, join(dir, 'branch'));
    expect(branch.trainerStep).toBe(4);
    expect(branch.checkpoints).toEqual([3]);
    // Steps 5 and 6 are not in the branch's history: their groups are complete again, handed anew.
    const b5 = await branch.take(5, { groups: 2 });
    expect(b5.replay).toBe(false);
    expect(ids(b5)).toEqual(ids(history[1]!));
    await branch.commit(5);
    await branch.rollback(3);
    expect(ids(await branch.take(4, { groups: 2 }))).toEqual(ids(history[0]!));
    expect(ids(await q.replay(6))).toEqual(ids(history[2]!));
    // Read-only debug replay of a directory, while its owner holds it.
    expect(ids(await GroupQueue.replay(q.dir, 5))).toEqual(ids(history[1]!));
    // GC: releasing the checkpoint lets each branch free what only it needed.
    await q.commit(5);
    await q.commit(6);
    await q.releaseCheckpoint(3);
    const report = await q.gc();
    expect(report.collected.steps).toBeGreaterThan(0);
    await expect(q.replay(4)).rejects.toThrow(/no recorded batch/);
    // The branch still replays 4 (its checkpoint 3 holds it), from segments it shares by hard link.
    await branch.commit(4);
    expect(ids(await branch.replay(4))).toEqual(ids(history[0]!));
    const segs = (await readdir(q.dir)).filter((f) => f.endsWith('.seg'));
    expect(segs.length).toBeLessThanOrEqual(2);
    const shared = (await readdir(branch.dir)).filter((f) => f.endsWith('.seg'));
    const links = await Promise.all(shared.map(async (f) => (await stat(join(branch.dir, f))).nlink));
    expect(links.some((n) => n === 1)).toBe(true); // ones the parent deleted live on in the branch
  });
});
