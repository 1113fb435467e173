import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ConfigError, ValidationError } from '../../errors.js';
import type { Turn } from '../../rollout.js';
import { assertSampleInvariants } from '../../sample.js';
import { type DriftReport, TrajectoryManager } from './manager.js';
import { packTurns } from './pack.js';

function turn(promptIds: number[], outputIds: number[], extra: Partial<Turn> = {}): Omit<Turn, 'index'> {
  return {
    promptIds: Int32Array.from(promptIds),
    outputIds: Int32Array.from(outputIds),
    logprobs: Float32Array.from(outputIds, (_, i) => -0.25 * (i + 1)),
    finishReason: 'stop',
    startedAt: 0,
    endedAt: 1,
    ...extra,
  };
}
const withIndex = (ts: Array<Omit<Turn, 'index'>>): Turn[] => ts.map((t, index) => ({ ...t, index }));

describe('packTurns', () => {
  it('packs turns whose prompts extend prompt+output into one row, observations masked', () => {
    const { rows, drift, steps } = packTurns(
      withIndex([
        turn([1, 2], [3, 4]),
        turn([1, 2, 3, 4, 5, 6], [7]),
        turn([1, 2, 3, 4, 5, 6, 7, 8], [9, 10]),
      ]),
    );
    expect(drift).toEqual({ forks: 0, realigns: 0, retokenizedTokens: 0 });
    expect(steps.map((s) => s.kind)).toEqual(['extend', 'extend']);
    expect(rows).toHaveLength(1);
    const row = rows[0]!;
    expect(Array.from(row.promptIds)).toEqual([1, 2]);
    expect(Array.from(row.responseIds)).toEqual([3, 4, 5, 6, 7, 8, 9, 10]);
    expect(Array.from(row.lossMask)).toEqual([1, 1, 0, 0, 1, 0, 1, 1]);
    expect(Array.from(row.logprobs)).toEqual([-0.25, -0.5, 0, 0, -0.25, 0, -0.25, -0.5]);
    expect(row.turns).toEqual([0, 1, 2]);
  });

  it('realigns short drift inside the last output: the drifted tail is overwritten with mask 0', () => {
    // turn 0 sampled [30, 31, 32]; the next prompt re-tokenizes that tail as [33, 32]
    const { rows, drift, steps } = packTurns(
      withIndex([turn([1, 2], [20, 30, 31, 32]), turn([1, 2, 20, 33, 32, 40], [50])]),
    );
    expect(steps[0]).toMatchObject({ kind: 'realign', divergedAt: 3, replaced: 3 });
    expect(drift).toEqual({ forks: 0, realigns: 1, retokenizedTokens: 3 });
    expect(rows).toHaveLength(1);
    expect(Array.from(rows[0]!.responseIds)).toEqual([20, 33, 32, 40, 50]);
    expect(Array.from(rows[0]!.lossMask)).toEqual([1, 0, 0, 0, 1]);
    expect(Array.from(rows[0]!.logprobs)).toEqual([-0.25, 0, 0, 0, -0.25]);
  });

  it('forks when the prompt diverges before the last output or by more than the realign limit', () => {
    const early = packTurns(withIndex([turn([1, 2, 3], [4]), turn([1, 9, 3, 4, 5], [6])]));
    expect(early.drift.forks).toBe(1);
    expect(early.rows.map((r) => Array.from(r.promptIds))).toEqual([
      [1, 2, 3],
      [1, 9, 3, 4, 5],
    ]);
    const long = packTurns(withIndex([turn([1], [2, 3, 4, 5]), turn([1, 2, 9, 9, 9], [6])]), {
      realignMaxTokens: 2,
    });
    expect(long.steps[0]).toMatchObject({ kind: 'fork', divergedAt: 2 });
    expect(long.rows).toHaveLength(2);
  });

  it('property: a trajectory that always extends packs to exactly its last prompt + output', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.tuple(
            fc.array(fc.integer({ min: 0, max: 9 }), { maxLength: 4 }),
            fc.array(fc.integer({ min: 0, max: 9 }), { maxLength: 4 }),
          ),
          {
            minLength: 1,
            maxLength: 6,
          },
        ),
        (steps) => {
          const turns: Array<Omit<Turn, 'index'>> = [];
          let context: number[] = [100];
          for (const [observation, output] of steps) {
            const prompt = [...context, ...observation];
            turns.push(turn(prompt, output));
            context = [...prompt, ...output];
          }
          const { rows } = packTurns(withIndex(turns));
          expect(rows).toHaveLength(1);
          const row = rows[0]!;
          expect([...row.promptIds, ...row.responseIds]).toEqual(context);
          const trained = row.lossMask.reduce((s, m) => s + m, 0);
          expect(trained).toBe(steps.reduce((s, [, out]) => s + out.length, 0));
        },
      ),
    );
  });
});

describe('TrajectoryManager.finish', () => {
  it('emits slime samples sharing rollout_id/session_id, reward split by policy, authoritative reward in metadata', () => {
    const m = new TrajectoryManager({ decode: (x) => Array.from(x).join(',') });
    const reports: DriftReport[] = [];
    m.on('drift', (r) => reports.push(r));
    m.open('s1');
    m.record('s1', turn([1, 2], [3], { policyVersion: 'v1' }));
    m.record('s1', turn([1, 9, 3, 4], [5], { policyVersion: 'v2' }));
    const samples = m.finish('s1', {
      reward: 1,
      rewardSplit: 'divide',
      baseSample: { index: 7, group_index: 2, rollout_id: 41, label: 'L', metadata: { instance_id: 'x' } },
    });
    expect(samples).toHaveLength(2);
    for (const [i, s] of samples.entries()) {
      assertSampleInvariants(s);
      expect(s).toMatchObject({
        rollout_id: 41,
        session_id: 's1',
        index: 7,
        group_index: 2,
        label: 'L',
        status: 'completed',
        reward: 0.5,
      });
      expect(s.metadata).toMatchObject({
        instance_id: 'x',
        rollout_reward: 1,
        reward_split: 'divide',
        trajectory_row: i,
        trajectory_rows: 2,
      });
    }
    expect(Array.from(samples[0]!.tokens)).toEqual([1, 2, 3]);
    expect(samples[0]!.response_length).toBe(1);
    expect(samples[0]!.weight_versions).toEqual(['v1']);
    expect(samples[1]!.prompt).toBe('1,9,3,4');
    expect(samples[1]!.response).toBe('5');
    expect(reports).toEqual([
      { sessionId: 's1', turns: 2, rows: 2, forks: 1, realigns: 0, retokenizedTokens: 0 },
    ]);
    expect(m.has('s1')).toBe(false);
  });

  it('copies the reward by default and derives truncated/aborted status from the last turn', () => {
    const m = new TrajectoryManager();
    m.record('a', turn([1], [2], { finishReason: 'length' }));
    const [a] = m.finish('a', { reward: 0.25 });
    expect(a).toMatchObject({ reward: 0.25, status: 'truncated' });
    m.record('b', turn([1], [2], { finishReason: 'abort' }));
    const [b] = m.finish('b', {});
    expect(b).toMatchObject({ reward: null, status: 'aborted' });
    expect(b!.metadata.rollout_reward).toBeNull();
  });

  it('refuses a missing reward for a completed rollout, bad splits and unknown sessions, keeping the session', () => {
    const m = new TrajectoryManager();
    m.record('s', turn([1], [2]));
    expect(() => m.finish('s')).toThrow(ValidationError);
    expect(() => m.finish('s')).toThrow(/needs a numeric reward.*pass \{ reward \}/);
    expect(() => m.finish('s', { reward: Number.NaN })).toThrow(/finite/);
    expect(() => m.finish('s', { reward: 1, rewardSplit: 'half' as never })).toThrow(/'copy' or 'divide'/);
    expect(m.has('s')).toBe(true);
    expect(m.finish('s', { status: 'failed' })[0]).toMatchObject({ status: 'failed', reward: null });
    expect(() => m.finish('nope', { reward: 1 })).toThrow(ConfigError);
    m.open('dup');
    expect(() => m.open('dup')).toThrow(/already open/);
  });

  it('returns no rows for a session without turns', () => {
    const m = new TrajectoryManager();
    m.open('empty');
    expect(m.finish('empty', { reward: 0 })).toEqual([]);
  });
});
