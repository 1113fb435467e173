import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../errors.js';
import type { Turn } from '../../rollout.js';
import { assertSampleInvariants } from '../../sample.js';
import { TrajectoryManager } from './manager.js';
import { packTurns } from './pack.js';

// One layer, top-1: a turn's routing at absolute position p is `tag * 100 + p`, so a row shows which
// turn each position's routing came from.
const route = (tag: number, rows: number) => ({
  layers: 1,
  topK: 1,
  start: 0,
  experts: Int32Array.from({ length: rows }, (_, p) => tag * 100 + p),
});

function turn(promptIds: number[], outputIds: number[], tag: number | undefined, index: number): Turn {
  return {
    index,
    promptIds: Int32Array.from(promptIds),
    outputIds: Int32Array.from(outputIds),
    logprobs: Float32Array.from(outputIds, () => -0.5),
    finishReason: 'stop',
    startedAt: 0,
    endedAt: 1,
    ...(tag === undefined ? {} : { routes: route(tag, promptIds.length + outputIds.length - 1) }),
  };
}

const flat = (experts: number[][][] | undefined) => experts?.map((p) => p[0]![0]);

describe('routing replay: packing', () => {
  it('stitches like tokens: each turn gives its positions from the previous output’s last token on', () => {
    const { rows } = packTurns([
      turn([1, 2], [3, 4], 1, 0),
      turn([1, 2, 3, 4, 5, 6], [7], 2, 1),
      turn([1, 2, 3, 4, 5, 6, 7, 8], [9, 10], 3, 2),
    ]);
    expect(rows).toHaveLength(1);
    // tokens [1..10]: positions 0..8; turn 1 gives 0–2, turn 2 gives 3–5 (4 was first forwarded by its
    // prefill), turn 3 gives 6–8
    expect(flat(rows[0]!.routes!.experts)).toEqual([100, 101, 102, 203, 204, 205, 306, 307, 308]);
  });

  it('keeps of a turn that extends the previous one only the positions a row takes from it, and packs the same row', () => {
    const manager = new TrajectoryManager();
    const turns = [
      turn([1, 2], [3, 4], 1, 0),
      turn([1, 2, 3, 4, 5, 6], [7], 2, 1),
      turn([1, 2, 3, 4, 5, 6, 7, 8], [9, 10], 3, 2),
    ];
    const kept = turns.map((t) => manager.record('k', t));
    expect(kept.map((t) => t.routes!.start)).toEqual([0, 3, 6]);
    expect(kept.map((t) => t.routes!.experts.length)).toEqual([3, 3, 3]);
    const [sample] = manager.finish('k', { reward: 1 });
    expect(flat(sample!.rollout_routed_experts!)).toEqual(flat(packTurns(turns).rows[0]!.routes!.experts));
  });

  it('never realigns a routed turn: short drift inside the last output forks', () => {
    const plain = packTurns([
      turn([1, 2], [20, 30, 31, 32], undefined, 0),
      turn([1, 2, 20, 33, 32, 40], [50], undefined, 1),
    ]);
    expect(plain.drift).toMatchObject({ realigns: 1, forks: 0 });
    const routed = packTurns([
      turn([1, 2], [20, 30, 31, 32], 1, 0),
      turn([1, 2, 20, 33, 32, 40], [50], 2, 1),
    ]);
    expect(routed.drift).toMatchObject({ realigns: 0, forks: 1 });
    expect(routed.rows).toHaveLength(2);
    expect(flat(routed.rows[0]!.routes!.experts)).toEqual([100, 101, 102, 103, 104]);
    expect(flat(routed.rows[1]!.routes!.experts)).toEqual([200, 201, 202, 203, 204, 205]);
  });

  it('writes rollout_routed_experts with len(tokens) − 1 positions on every row, and refuses a row with a turn without routing', () => {
    const manager = new TrajectoryManager();
    manager.record('s', turn([1, 2], [3, 4], 1, 0));
    manager.record('s', turn([9, 9, 9], [5], 2, 1));
    const samples = manager.finish('s', { reward: 1 });
    expect(samples).toHaveLength(2);
    for (const s of samples) {
      assertSampleInvariants(s);
      expect(s.rollout_routed_experts).toHaveLength(s.tokens.length - 1);
    }
    expect(samples[1]!.rollout_routed_experts).toEqual([[[200]], [[201]], [[202]]]);

    const mixed = new TrajectoryManager();
    mixed.record('m', turn([1, 2], [3, 4], 1, 0));
    mixed.record('m', turn([1, 2, 3, 4, 5], [6], undefined, 1));
    expect(() => mixed.finish('m', { reward: 1 })).toThrow(ValidationError);
    expect(() => mixed.finish('m', { reward: 1 })).toThrow(/turn 1 has no routed experts while turn 0 has/);
  });
});
