import { readFileSync } from 'node:fs';
import { ConfigError, createSample, type RolloutResult, toSlimeDict, ValidationError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { passAtK } from './pass-at-k.js';
import { rolloutMetrics } from './rollout.js';

const golden = (name: string) =>
  JSON.parse(readFileSync(new URL(`../../../golden/grpo/${name}`, import.meta.url), 'utf8'));

let nextId = 0;
type Init = Partial<Omit<RolloutResult, 'status'>> & { groupIndex: number } & (
    | { status: 'completed' | 'truncated'; reward: number }
    | { status: 'failed' | 'aborted' }
  );
function result(init: Init): RolloutResult {
  const base = {
    taskId: `task-${init.groupIndex}`,
    sampleIndex: 0,
    rolloutId: nextId++,
    samples: [],
    turns: 0,
    timings: {},
    metadata: {},
  };
  if (init.status === 'failed' || init.status === 'aborted') {
    return { ...base, ...init, error: { code: 'sandbox_error', message: 'sandbox died' } } as RolloutResult;
  }
  return { ...base, ...init } as RolloutResult;
}

const binary = (r: number) => r === 1;

describe('rolloutMetrics', () => {
  it('requires a correctness predicate', () => {
    expect(() => rolloutMetrics([], {} as never)).toThrow(ConfigError);
    expect(() => rolloutMetrics([], {} as never)).toThrow(/r => r === 1/);
  });

  for (const file of [
    'slime__compute_pass_rate__g4.json',
    'slime__compute_pass_rate__g8.json',
    'slime__compute_pass_rate__g4_nonbinary.json',
  ]) {
    it(`matches slime's compute_pass_rate from RolloutResults (${file})`, () => {
      const g = golden(file);
      const n: number = g.params.group_size;
      const results = (g.inputs.flat_rewards as number[]).map((reward, i) =>
        result({ status: 'completed', reward, groupIndex: Math.floor(i / n), sampleIndex: i % n }),
      );
      const m = rolloutMetrics(results, { correct: binary, bootstrap: false });
      const expected = g.expected.log_dict as Record<string, number>;
      expect(m.passAtK.map((e) => `pass@${e.k}`)).toEqual(Object.keys(expected));
      for (const e of m.passAtK)
        expect(Math.abs(e.value! - expected[`pass@${e.k}`]!)).toBeLessThanOrEqual(1e-12);
      expect(m.groups).toEqual({
        total: results.length / n,
        groupSize: n,
        complete: results.length / n,
        incomplete: [],
      });
      const meanReward = (g.inputs.flat_rewards as number[]).reduce((s, r) => s + r, 0) / results.length;
      expect(m.meanAtK[0]!.value).toBeCloseTo(meanReward, 12);
    });
  }

  it('keeps failed and aborted rollouts out of pass@k, counts them, and lists the groups they leave short', () => {
    const results = [
      result({ status: 'completed', reward: 1, groupIndex: 0 }),
      result({ status: 'completed', reward: 0, groupIndex: 0 }),
      result({ status: 'failed', groupIndex: 0 }),
      result({ status: 'aborted', groupIndex: 0 }),
      result({ status: 'completed', reward: 0, groupIndex: 1 }),
      result({ status: 'truncated', reward: 0, groupIndex: 1 }),
      result({ status: 'completed', reward: 1, groupIndex: 1 }),
      result({ status: 'completed', reward: 1, groupIndex: 1 }),
    ];
    const m = rolloutMetrics(results, { correct: binary, ks: [1, 2, 4], bootstrap: false });
    expect(m.rollouts).toMatchObject({ total: 8, completed: 5, truncated: 1, failed: 1, aborted: 1 });
    expect(m.groups.groupSize).toBe(4);
    expect(m.groups.incomplete).toEqual([
      { group: '0', expected: 4, scored: 2, failed: 1, aborted: 1, pending: 0 },
    ]);
    // Group 0 has 2 scored rollouts (1 correct), group 1 has 4 (2 correct); a failure is not a 0.
    const p1 = (passAtK({ n: 2, c: 1, k: 1 }) + passAtK({ n: 4, c: 2, k: 1 })) / 2;
    expect(m.passAtK[0]).toMatchObject({ k: 1, value: p1, problems: 2, skipped: 0 });
    expect(m.passAtK[2]).toMatchObject({
      k: 4,
      value: passAtK({ n: 4, c: 2, k: 4 }),
      problems: 1,
      skipped: 1,
    });
    expect(m.reward).toEqual({ mean: 0.5, min: 0, max: 1, correct: 3, scored: 6 });
  });

  it('counts fan-out rows of one rollout once and never sums their rewards', () => {
    // Two rollouts of one problem; the first forked into 3 rows that carry slime's reward/K split.
    const rows = [
      ...[0, 1, 2].map((i) =>
        toSlimeDict(
          createSample({
            group_index: 0,
            index: i,
            session_id: 'a',
            status: 'completed',
            reward: 1 / 3,
            loss_mask: [1, 1, 0, 0],
            tokens: [1, 2, 3, 4],
            response_length: 4,
            metadata: {
              rollout_reward: 1,
              n_turns: 5,
              agent_timing: { claim_sec: 2, agent_sec: 30, eval_sec: 4, exec_calls: [0.5, 1.5] },
            },
          }),
        ),
      ),
      toSlimeDict(
        createSample({
          group_index: 0,
          index: 3,
          session_id: 'b',
          status: 'completed',
          reward: 0,
          loss_mask: [1, 1, 1, 1],
          tokens: [1, 2, 3, 4],
          response_length: 4,
          metadata: {
            rollout_reward: 0,
            n_turns: 2,
            agent_timing: { claim_sec: 1, agent_sec: 10, eval_sec: 2, exec_calls: [0.25] },
          },
        }),
      ),
    ];
    const m = rolloutMetrics(rows, { correct: binary, bootstrap: false });
    expect(m.rollouts).toMatchObject({ total: 2, rows: 4, completed: 2 });
    expect(m.passAtK.map((e) => e.value)).toEqual([0.5, 1]);
    expect(m.shape).toMatchObject({
      turns: { mean: 3.5, max: 5 },
      rowsPerRollout: { mean: 2, max: 3 },
      forkedRollouts: 1,
    });
    expect(m.shape.maskedFraction!.max).toBe(0.5);
    // Timings are per rollout (2 values), not per row (4), and converted to milliseconds.
    expect(m.timing.phases.claim).toMatchObject({ count: 2, max: 2000, min: 1000 });
    expect(m.timing.execCall).toMatchObject({ count: 3, max: 1500 });
    expect(m.timing.slowest.map((s) => [s.key, s.totalMs])).toEqual([
      ['session:a', 36_000],
      ['session:b', 13_000],
    ]);

    // Without the stamp, rows that disagree are an error rather than a silent sum…
    const unstamped = rows.map((r) => ({ ...r, metadata: {} }));
    unstamped[0]!.reward = 0.5;
    expect(() => rolloutMetrics(unstamped, { correct: binary })).toThrow(ValidationError);
    expect(() => rolloutMetrics(unstamped, { correct: binary })).toThrow(/never sum fan-out rows/);
    // …and the caller can say how to combine them.
    const summed = rolloutMetrics(unstamped, {
      correct: (r) => r > 0.99,
      bootstrap: false,
      rolloutReward: (group) => group.reduce((s, row) => s + (row.reward as number), 0),
    });
    expect(summed.reward.max).toBeCloseTo(1 / 3 + 1 / 3 + 0.5, 12);
  });

  it('asks for group_index on rows, and reads dict rewards through rewardKey', () => {
    const row = toSlimeDict(
      createSample({ session_id: 'x', status: 'completed', reward: { acc: 1, fmt: 0 } }),
    );
    expect(() => rolloutMetrics([row], { correct: binary })).toThrow(
      /\[0\]\.group_index: expected the prompt group index/,
    );
    const withGroup = { ...row, group_index: 3 };
    expect(() => rolloutMetrics([withGroup], { correct: binary })).toThrow(/rewardKey/);
    const m = rolloutMetrics([withGroup], { correct: binary, rewardKey: 'acc', bootstrap: false });
    expect(m.passAtK[0]!.value).toBe(1);
    // In-memory Samples work the same way.
    const s = createSample({ group_index: 0, rollout_id: 9, status: 'failed' });
    expect(rolloutMetrics([s], { correct: binary }).rollouts.failed).toBe(1);
  });

  it('reports the exact expected best-of-k reward (checked by enumerating every subset)', () => {
    const rewards = [0.1, 0.7, 0.3, 0.3, 0.9, 0.0, 0.55];
    const results = rewards.map((reward) => result({ status: 'completed', reward, groupIndex: 0 }));
    const m = rolloutMetrics(results, { correct: (r) => r > 0.5, ks: [1, 2, 3, 7], bootstrap: false });
    const subsetsMax = (k: number) => {
      let sum = 0;
      let count = 0;
      const walk = (start: number, chosen: number[]) => {
        if (chosen.length === k) {
          sum += Math.max(...chosen);
          count++;
          return;
        }
        for (let i = start; i < rewards.length; i++) walk(i + 1, [...chosen, rewards[i]!]);
      };
      walk(0, []);
      return sum / count;
    };
    for (const e of m.maxAtK) expect(e.value).toBeCloseTo(subsetsMax(e.k), 12);
    expect(m.maxAtK[3]!.value).toBeCloseTo(0.9, 12);
  });

  it('gives seeded, reproducible bootstrap intervals that tighten with more problems', () => {
    const make = (groups: number) =>
      Array.from({ length: groups * 4 }, (_, i) =>
        result({ status: 'completed', reward: ((i * 7919) % 97) / 96, groupIndex: Math.floor(i / 4) }),
      );
    const correct = (r: number) => r > 0.6;
    const small = rolloutMetrics(make(10), { correct, bootstrap: { seed: 1 } });
    const again = rolloutMetrics(make(10), { correct, bootstrap: { seed: 1 } });
    const other = rolloutMetrics(make(10), { correct, bootstrap: { seed: 2 } });
    const large = rolloutMetrics(make(200), { correct, bootstrap: { seed: 1 } });
    expect(small.passAtK).toEqual(again.passAtK);
    expect(small.meanAtK).toEqual(again.meanAtK);
    expect(other.meanAtK[0]!.ci).not.toEqual(small.meanAtK[0]!.ci);
    expect(other.meanAtK[0]!.value).toBe(small.meanAtK[0]!.value);
    for (const e of [...small.passAtK, ...large.passAtK]) {
      expect(e.ci![0]).toBeLessThanOrEqual(e.value!);
      expect(e.ci![1]).toBeGreaterThanOrEqual(e.value!);
    }
    const width = (e: { ci: [number, number] | null }) => e.ci![1] - e.ci![0];
    expect(width(large.passAtK[0]!)).toBeLessThan(width(small.passAtK[0]!));
  });

  it('summarizes turns, masking, drift and per-phase timing of RolloutResults', () => {
    const results = [
      result({
        status: 'completed',
        reward: 1,
        groupIndex: 0,
        turns: 6,
        timings: { claim: 100, setup: 400, agent: 9000, model: 6000, exec: 2500, eval: 1500 },
        samples: [createSample({ loss_mask: [1, 0, 0, 1], tokens: [1, 2, 3, 4], response_length: 4 })],
        metadata: { execCallsMs: [1000, 1500], drift: { forks: 0, realigns: 2, retokenizedTokens: 7 } },
      }),
      result({
        status: 'failed',
        groupIndex: 0,
        turns: 2,
        timings: { claim: 5000, setup: 300 },
        startedAt: 10,
        endedAt: 5410,
      }),
    ];
    const m = rolloutMetrics(results, { correct: binary, bootstrap: false, slowest: 1 });
    expect(m.shape).toMatchObject({
      turns: { mean: 4, max: 6 },
      maskedFraction: { mean: 0.5, max: 0.5 },
      packedRollouts: 1,
      forkedRollouts: 0,
      drift: { forks: 0, realigns: 2, retokenizedTokens: 7 },
    });
    expect(m.timing.phases.claim).toMatchObject({ count: 2, max: 5000 });
    expect(m.timing.phases.model).toMatchObject({ count: 1, p50: 6000 });
    expect(m.timing.total).toMatchObject({ count: 2, max: 11_000, min: 5400 });
    expect(m.timing.slowest).toEqual([
      expect.objectContaining({ status: 'completed', totalMs: 11_000, phases: results[0]!.timings }),
    ]);
  });
});
