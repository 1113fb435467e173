import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../errors.js';
import type { Turn } from '../../rollout.js';
import { assertSampleInvariants, fromSlimeDict, toSlimeDict } from '../../sample.js';
import { TrajectoryManager } from './manager.js';
import { packTurns } from './pack.js';

/** A turn whose output token k keeps `k + 1` ids: `[id, 100 + id, …]`, log probs -(j + 1). */
function turn(promptIds: number[], outputIds: number[], replay = true): Omit<Turn, 'index'> {
  const ids: number[] = [];
  const lps: number[] = [];
  const offsets = [0];
  for (const [k, id] of outputIds.entries()) {
    for (let j = 0; j <= k; j++) {
      ids.push(j === 0 ? id : 100 * j + id);
      lps.push(-(j + 1));
    }
    offsets.push(ids.length);
  }
  return {
    promptIds: Int32Array.from(promptIds),
    outputIds: Int32Array.from(outputIds),
    logprobs: Float32Array.from(outputIds, () => -0.5),
    finishReason: 'stop',
    startedAt: 0,
    endedAt: 1,
    ...(replay
      ? {
          topP: {
            ids: Int32Array.from(ids),
            offsets: Int32Array.from(offsets),
            logprobs: Float32Array.from(lps),
          },
        }
      : {}),
  };
}
const withIndex = (ts: Array<Omit<Turn, 'index'>>): Turn[] => ts.map((t, index) => ({ ...t, index }));

describe('sampler replay data across turns', () => {
  it('concatenates the turns’ nuclei over the response, empty spans on observations', () => {
    const { rows } = packTurns(withIndex([turn([1, 2], [3, 4]), turn([1, 2, 3, 4, 5, 6], [7, 8])]));
    const r = rows[0]!.replay!;
    expect(Array.from(rows[0]!.lossMask)).toEqual([1, 1, 0, 0, 1, 1]);
    expect(Array.from(r.offsets)).toEqual([0, 1, 3, 3, 3, 4, 6]);
    expect(Array.from(r.ids)).toEqual([3, 4, 104, 7, 8, 108]);
    expect(Array.from(r.logprobs!)).toEqual([-1, -1, -2, -1, -1, -2]);
  });

  it('a realign drops the nucleus of the re-tokenised tokens; a fork starts a fresh one', () => {
    // Turn 1 re-tokenises the last output token of turn 0 (4 → 9): that token is no longer sampled.
    const { rows, drift } = packTurns(withIndex([turn([1, 2], [3, 4]), turn([1, 2, 3, 9, 5], [7])]));
    expect(drift.realigns).toBe(1);
    expect(Array.from(rows[0]!.lossMask)).toEqual([1, 0, 0, 1]);
    expect(Array.from(rows[0]!.replay!.offsets)).toEqual([0, 1, 1, 1, 2]);
    expect(Array.from(rows[0]!.replay!.ids)).toEqual([3, 7]);
    const forked = packTurns(withIndex([turn([1, 2], [3, 4]), turn([6, 6, 6], [7, 8])]));
    expect(forked.rows.map((row) => Array.from(row.replay!.offsets))).toEqual([
      [0, 1, 3],
      [0, 1, 3],
    ]);
  });

  it('finishing puts it in slime’s fields (kept-id log probs as rollout_top_p_log_probs), through the wire dict', () => {
    const manager = new TrajectoryManager();
    manager.record('s', turn([1, 2], [3, 4]));
    manager.record('s', turn([1, 2, 3, 4, 5], [6]));
    const [sample] = manager.finish('s', { reward: 1 });
    assertSampleInvariants(sample!);
    const back = fromSlimeDict(JSON.parse(JSON.stringify(toSlimeDict(sample!))));
    expect(Array.from(back.rollout_top_p_token_offsets!)).toEqual([0, 1, 3, 3, 4]);
    expect(Array.from(back.rollout_top_p_token_ids!)).toEqual([3, 4, 104, 6]);
    expect(back.extra!.rollout_top_p_log_probs).toEqual([-1, -1, -2, -1]);
  });

  it('refuses a trajectory whose turns have and lack replay data, and keeps the session', () => {
    const manager = new TrajectoryManager();
    manager.record('mixed', turn([1, 2], [3, 4]));
    manager.record('mixed', turn([1, 2, 3, 4, 5], [6], false));
    expect(() => manager.finish('mixed', { reward: 1 })).toThrow(ValidationError);
    expect(() => manager.finish('mixed', { reward: 1 })).toThrow(
      /turn 1 has no sampler replay data \(top_p\) while turn 0 has/,
    );
    expect(manager.has('mixed')).toBe(true);
    const plain = new TrajectoryManager();
    plain.record('p', turn([1, 2], [3, 4], false));
    expect(plain.finish('p', { reward: 1 })[0]!.rollout_top_p_token_ids).toBeNull();
  });
});
