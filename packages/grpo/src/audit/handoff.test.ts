/**
 * The token audit at hand-off: rollouts built by the trajectory manager from recorded turns (two of them
 * with a weight update inside a turn) pass; each kind of tampering with a sample, and rows that cannot
 * be checked, make that rollout an infrastructure failure with its cause counted, and leave the others.
 */
import { capturedTurnRecord, type ScoredRollout, type Turn } from '@vime/core';
import { TrajectoryManager } from '@vime/core/proxy';
import { describe, expect, it } from 'vitest';
import type { AuditTurn } from './difference.js';
import { auditHandoff, auditTurnOf, TOKEN_AUDIT_FAILED } from './handoff.js';

type Rec = Omit<Turn, 'index'>;
const turn = (prompt: number[], output: number[], extra: Partial<Rec> = {}): Rec => ({
  promptIds: Int32Array.from(prompt),
  outputIds: Int32Array.from(output),
  logprobs: Float32Array.from(output, (_, i) => -0.125 * (i + 1)),
  finishReason: 'stop',
  startedAt: 0,
  endedAt: 1,
  ...extra,
});

/** Two rollouts of two sessions, three turns each; the second turn of each straddles versions 3 → 4. */
function world(linked = false) {
  const m = new TrajectoryManager();
  const turns: AuditTurn[] = [];
  // As a file holds them (log records), or as the loop keeps them (typed, each linked to the one before).
  m.on('turn', (e) =>
    turns.push(
      linked
        ? auditTurnOf(e.sessionId, e.turn, turns.filter((t) => t.session_id === e.sessionId).at(-1))
        : capturedTurnRecord(e.sessionId, e.turn),
    ),
  );
  const rollouts: ScoredRollout[] = [0, 1].map((k) => {
    const id = `s${k}`;
    const p = [1, 2, 3 + k];
    m.record(id, turn(p, [10, 11, 12], { policyVersion: '3' }));
    const p2 = [...p, 10, 11, 12, 50, 51];
    m.record(
      id,
      turn(p2, [20, 21, 22, 23], {
        policyVersion: '4',
        versionRuns: [
          { version: '3', tokens: 1 },
          { version: '4', tokens: 3 },
        ],
      }),
    );
    m.record(id, turn([...p2, 20, 21, 22, 23, 60], [30, 31], { policyVersion: '4' }));
    const samples = m.finish(id, { reward: k });
    return {
      taskId: `t${k}`,
      groupIndex: 0,
      sampleIndex: k,
      rolloutId: k,
      sessionId: id,
      samples,
      turns: 3,
      timings: {},
      metadata: {},
      status: 'completed',
      reward: k,
    };
  });
  const turnsOf = (ids: readonly string[]) => turns.filter((t) => ids.includes(t.session_id));
  return { rollouts, turns, turnsOf };
}

/** Tamper rollout 1's row, audit, and return the failure (rollout 0 must still pass). */
function caught(tamper: (w: ReturnType<typeof world>) => void, linked = false) {
  const w = world(linked);
  tamper(w);
  const r = auditHandoff(w.rollouts, w.turnsOf);
  expect(r.passed.map((x) => x.rolloutId)).toEqual([0]);
  expect(r.failed).toHaveLength(1);
  const { failure } = r.failed[0]!;
  expect(failure).toMatchObject({
    status: 'failed',
    rolloutId: 1,
    samples: [],
    error: { code: TOKEN_AUDIT_FAILED },
  });
  expect('reward' in failure).toBe(false);
  expect(r.audit).toMatchObject({ rollouts: 2, failedRollouts: 1, samples: 2, failedSamples: 1 });
  return { cause: Object.keys(r.audit.causes)[0], message: failure.error.message, audit: r.audit };
}

describe('the token audit at hand-off', () => {
  it('passes rows built from the captured turns, a mid-turn weight update included', () => {
    const { rollouts, turnsOf } = world();
    const row = rollouts[1]!.samples[0]!;
    expect(row.weight_versions).toEqual(['3', '4']);
    // Response: output 0..3, observation 3..5, output 5..9 (update after its first token), observation, output.
    expect(row.metadata.weight_version_spans).toEqual([
      [0, 3, '3'],
      [5, 6, '3'],
      [6, 9, '4'],
      [10, 12, '4'],
    ]);
    const r = auditHandoff(rollouts, turnsOf);
    expect(r.failed).toEqual([]);
    expect(r.audit).toEqual({
      samples: 2,
      failedSamples: 0,
      rollouts: 2,
      failedRollouts: 0,
      tokens: 18,
      causes: {},
    });
  });

  it('fails a rollout whose log prob, token, loss mask or replay differs, naming the field', () => {
    const row = (w: ReturnType<typeof world>) => w.rollouts[1]!.samples[0]!;
    expect(caught((w) => (row(w).rollout_log_probs![1] = -9)).cause).toBe('rollout_log_probs');
    expect(caught((w) => (row(w).tokens[row(w).tokens.length - 1] = 99)).cause).toBe('tokens');
    expect(caught((w) => (row(w).loss_mask![3] = 1)).cause).toBe('loss_mask');
    const { message } = caught((w) => (row(w).rollout_log_probs![1] = -9));
    expect(message).toMatch(
      /rollout 1 \(task "t1"\), sample 0 \(session "s1"\): the log prob of token 1 differs/,
    );
  });

  it('fails a rollout whose weight versions disagree with the captured turns', () => {
    const spans = (w: ReturnType<typeof world>) =>
      w.rollouts[1]!.samples[0]!.metadata.weight_version_spans as Array<[number, number, string]>;
    // The update moved one token later: token 6 claims version 3, the engine sampled it on 4.
    const late = caught((w) => {
      spans(w)[1]![1] = 7;
      spans(w)[2]![0] = 7;
    });
    expect(late.cause).toBe('weight_version_spans');
    expect(late.message).toMatch(/weight version of token 6 differs .*expected 4, found 3/);
    expect(caught((w) => (spans(w)[3]![2] = '5')).cause).toBe('weight_version_spans');
    expect(caught((w) => delete w.rollouts[1]!.samples[0]!.metadata.weight_version_spans).cause).toBe(
      'weight_version_spans',
    );
    expect(caught((w) => (spans(w)[2] = [7, 6, '4'])).cause).toBe('weight_version_spans');
    expect(caught((w) => (w.rollouts[1]!.samples[0]!.weight_versions = ['4'])).cause).toBe('weight_versions');
  });

  it('fails what cannot be checked: no session id, no captured turn, a captured turn left untrained', () => {
    expect(caught((w) => (w.rollouts[1]!.samples[0]!.session_id = null)).cause).toBe('no_session');
    const gone = caught((w) => {
      const all = w.turns.splice(0);
      w.turns.push(...all.filter((t) => t.session_id !== 's1'));
    });
    expect(gone.cause).toBe('no_turns');
    const extra = caught((w) => {
      const t = w.turns.find((x) => x.session_id === 's1')!;
      w.turns.push({ ...t, turn: 9, prompt_ids: [7, 7], output_ids: [8] });
    });
    expect(extra.cause).toBe('untrained_turn');
    expect(extra.message).toMatch(/session "s1" turn 9 \(1 sampled tokens\) is in no trained span/);
  });

  it('with turns linked as the loop keeps them, compares only new prompt tokens and still catches every swap', () => {
    const w = world(true);
    expect(auditHandoff(w.rollouts, w.turnsOf).failed).toEqual([]);
    const row = (x: ReturnType<typeof world>) => x.rollouts[1]!.samples[0]!;
    const p = (x: ReturnType<typeof world>) => row(x).tokens.length - row(x).response_length;
    // An observation (the new part of turn 2's prompt), an earlier output, and the first prompt.
    for (const at of [3, 1, -1]) {
      const r = caught((x) => (row(x).tokens[p(x) + at] = 77), true);
      expect(r.cause).toBe('tokens');
    }
  });

  it('counts failures by cause over a step', () => {
    const w = world();
    w.rollouts[0]!.samples[0]!.rollout_log_probs![0] = 0;
    w.rollouts[1]!.samples[0]!.rollout_log_probs![0] = 0;
    const r = auditHandoff(w.rollouts, w.turnsOf);
    expect(r.passed).toEqual([]);
    expect(r.audit.causes).toEqual({ rollout_log_probs: 2 });
  });
});
