/**
 * The hand-off token audit of routing replay (R3): rows the trajectory manager built from turns with
 * routing pass, whether the turns are kept in memory or read back from the turn log; a row whose routing
 * differs where a trained token was sampled, or that lost its routing, fails its rollout.
 */
import { capturedTurnRecord, type ScoredRollout, type Turn } from '@vime/core';
import { TrajectoryManager } from '@vime/core/proxy';
import { describe, expect, it } from 'vitest';
import { readTurnLog } from './audit-input.js';
import type { AuditTurn } from './difference.js';
import { auditHandoff, auditTurnOf, TOKEN_AUDIT_FAILED } from './handoff.js';

const LAYERS = 2;
const TOP_K = 2;

/** A turn whose routing at position q, layer l, slot k is `tag·1000 + q·10 + l·2 + k`. */
function turn(prompt: number[], output: number[], tag: number): Omit<Turn, 'index'> {
  const rows = prompt.length + output.length - 1;
  return {
    promptIds: Int32Array.from(prompt),
    outputIds: Int32Array.from(output),
    logprobs: Float32Array.from(output, (_, i) => -0.25 * (i + 1)),
    finishReason: 'stop',
    startedAt: 0,
    endedAt: 1,
    routes: {
      layers: LAYERS,
      topK: TOP_K,
      start: 0,
      experts: Int32Array.from({ length: rows * LAYERS * TOP_K }, (_, x) => {
        const q = Math.floor(x / (LAYERS * TOP_K));
        return tag * 1000 + q * 10 + (x % (LAYERS * TOP_K));
      }),
    },
  };
}

function world(fromLog: boolean) {
  const m = new TrajectoryManager();
  const turns: AuditTurn[] = [];
  m.on('turn', (e) => {
    const kept = turns.filter((t) => t.session_id === e.sessionId).at(-1);
    if (!fromLog) turns.push(auditTurnOf(e.sessionId, e.turn, kept));
    // as `vime-grpo audit` reads them: JSON lines of the turn log
    else turns.push(...readTurnLog(JSON.stringify(capturedTurnRecord(e.sessionId, e.turn))));
  });
  const rollouts: ScoredRollout[] = [0, 1].map((k) => {
    const id = `r${k}`;
    m.record(id, turn([1, 2, 3 + k], [10, 11, 12], 1));
    m.record(id, turn([1, 2, 3 + k, 10, 11, 12, 50, 51], [20, 21], 2));
    const samples = m.finish(id, { reward: 1 });
    return {
      taskId: `t${k}`,
      groupIndex: 0,
      sampleIndex: k,
      rolloutId: k,
      sessionId: id,
      samples,
      turns: 2,
      timings: {},
      metadata: {},
      status: 'completed',
      reward: 1,
    };
  });
  return { rollouts, turnsOf: (ids: readonly string[]) => turns.filter((t) => ids.includes(t.session_id)) };
}

describe('hand-off audit: routing replay', () => {
  for (const fromLog of [false, true]) {
    it(`passes rows built from turns with routing (${fromLog ? 'turn log' : 'in memory'})`, () => {
      const w = world(fromLog);
      const r = auditHandoff(w.rollouts, w.turnsOf);
      expect(r.failed).toEqual([]);
      expect(r.passed).toHaveLength(2);
    });
  }

  it('fails a rollout whose row has another expert where a trained token was sampled', () => {
    const w = world(false);
    // position 4 (token 11 of the first output) sampled response token 2 (token 12)
    w.rollouts[1]!.samples[0]!.rollout_routed_experts![4]![1]![0]! += 1;
    const r = auditHandoff(w.rollouts, w.turnsOf);
    expect(r.passed.map((x) => x.rolloutId)).toEqual([0]);
    expect(r.failed[0]!.failure.error).toMatchObject({
      code: TOKEN_AUDIT_FAILED,
      cause: { field: 'rollout_routed_experts' },
    });
    expect(r.failed[0]!.failure.error.message).toMatch(
      /the expert of position 4 \(layer 1, slot 0\), which sampled token 2, differs from session "r1" turn 0's; expected 1042, found 1043/,
    );
    expect(r.audit.causes).toEqual({ rollout_routed_experts: 1 });
  });

  it('fails a rollout whose row lost its routing, or has the wrong number of positions', () => {
    const lost = world(false);
    lost.rollouts[1]!.samples[0]!.rollout_routed_experts = null;
    const a = auditHandoff(lost.rollouts, lost.turnsOf);
    expect(a.failed[0]!.failure.error.message).toMatch(
      /the sample lacks the routing replay data of its turn/,
    );
    const short = world(false);
    short.rollouts[1]!.samples[0]!.rollout_routed_experts!.pop();
    const b = auditHandoff(short.rollouts, short.turnsOf);
    expect(b.failed[0]!.failure.error.message).toMatch(
      /routing replay needs one position per token but the last/,
    );
  });
});
