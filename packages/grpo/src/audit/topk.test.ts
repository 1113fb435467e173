/**
 * The hand-off audit of top-k log probs (score centering): rows the trajectory manager packs from turns
 * with heads (a mid-turn weight update and the nucleus beside them) pass, from the turn log or from the
 * turns as the loop keeps them; every kind of tampering with the heads fails the rollout, naming the field.
 */
import { capturedTurnRecord, type ScoredRollout, type Turn } from '@vime/core';
import { TrajectoryManager } from '@vime/core/proxy';
import { describe, expect, it } from 'vitest';
import { readTurnLog } from './audit-input.js';
import type { AuditTurn } from './difference.js';
import { auditHandoff, auditTurnOf } from './handoff.js';

const K = 3;
type Rec = Omit<Turn, 'index'>;
const turn = (prompt: number[], output: number[], extra: Partial<Rec> = {}): Rec => ({
  promptIds: Int32Array.from(prompt),
  outputIds: Int32Array.from(output),
  logprobs: Float32Array.from(output, (_, i) => -0.125 * (i + 1)),
  finishReason: 'stop',
  startedAt: 0,
  endedAt: 1,
  topK: {
    k: K,
    ids: Int32Array.from(output.flatMap((id) => [id, id + 100, id + 200])),
    logprobs: Float32Array.from(output.flatMap((_, i) => [-0.125 * (i + 1), -3, -4])),
  },
  topP: {
    ids: Int32Array.from(output.flatMap((id) => [id, id + 100])),
    offsets: Int32Array.from({ length: output.length + 1 }, (_, i) => 2 * i),
  },
  ...extra,
});

function world(linked: boolean) {
  const m = new TrajectoryManager();
  const turns: AuditTurn[] = [];
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
    const runs = [
      { version: '3', tokens: 1 },
      { version: '4', tokens: 3 },
    ];
    m.record(id, turn(p2, [20, 21, 22, 23], { policyVersion: '4', versionRuns: runs }));
    const samples = m.finish(id, { reward: k });
    const base = { taskId: `t${k}`, groupIndex: 0, sampleIndex: k, rolloutId: k, sessionId: id, samples };
    return { ...base, turns: 2, timings: {}, metadata: {}, status: 'completed', reward: k };
  });
  return { rollouts, turnsOf: (ids: readonly string[]) => turns.filter((t) => ids.includes(t.session_id)) };
}

type World = ReturnType<typeof world>;
const extra = (w: World) => w.rollouts[1]!.samples[0]!.extra!;
const ids = (w: World) => extra(w).rollout_topk_token_ids as number[][];
const lps = (w: World) => extra(w).rollout_topk_log_probs as number[][];

describe('the hand-off audit: top-k log probs', () => {
  for (const linked of [false, true]) {
    it(`passes packed heads (filler on observations) beside the nucleus, across a weight update (${linked ? 'kept turns' : 'turn log'})`, () => {
      const w = world(linked);
      expect(ids(w)).toEqual([
        [10, 110, 210],
        [11, 111, 211],
        [12, 112, 212],
        [0, 1, 2],
        [0, 1, 2],
        [20, 120, 220],
        [21, 121, 221],
        [22, 122, 222],
        [23, 123, 223],
      ]);
      expect(lps(w)[3]).toEqual([-Math.log(3), -Math.log(3), -Math.log(3)].map(Math.fround));
      const r = auditHandoff(w.rollouts, w.turnsOf);
      expect(r.failed).toEqual([]);
      expect(r.audit.tokens).toBe(14);
    });

    it(`fails a rollout whose heads differ, are missing, misshapen, or not filler on observations (${linked ? 'kept turns' : 'turn log'})`, () => {
      const cases: Array<[(w: World) => void, string, RegExp]> = [
        [(w) => (ids(w)[1]![2] = 7), 'rollout_topk_token_ids', /entry 2 of the head of token 1 differs/],
        [
          (w) => (lps(w)[6]![0] = -0.5),
          'rollout_topk_log_probs',
          /entry 0 of the head of token 6 differs .*expected 21: -0\.25, found 21: -0\.5/,
        ],
        [
          (w) => (ids(w)[3]![0] = 5),
          'rollout_topk_token_ids',
          /a token with loss mask 0 .* uniform top-k filler/,
        ],
        [(w) => (lps(w)[4]![1] = -2), 'rollout_topk_log_probs', /a token with loss mask 0/],
        [
          (w) => ids(w).pop(),
          'rollout_topk_token_ids',
          /one row of k ids and one of k log probs per response token/,
        ],
        [(w) => lps(w)[2]!.pop(), 'rollout_topk_log_probs', /every row of top-k data has k entries/],
        [(w) => delete extra(w).rollout_topk_token_ids, 'rollout_topk_token_ids', /one row of k ids/],
        [
          (w) => {
            delete extra(w).rollout_topk_token_ids;
            delete extra(w).rollout_topk_log_probs;
          },
          'rollout_topk_token_ids',
          /the sample lacks the top-k log probs of its turn/,
        ],
        [
          (w) => {
            for (const r of [...ids(w), ...lps(w)]) r.pop();
          },
          'rollout_topk_token_ids',
          /k = 3, found k = 2/,
        ],
      ];
      for (const [tamper, field, message] of cases) {
        const w = world(linked);
        tamper(w);
        const r = auditHandoff(w.rollouts, w.turnsOf);
        expect(r.passed.map((x) => x.rolloutId)).toEqual([0]);
        expect(r.audit.causes).toEqual({ [field]: 1 });
        expect(r.failed[0]!.failure.error.message).toMatch(message);
      }
    });
  }

  it('fails a row that carries heads its turns never recorded', () => {
    const m = new TrajectoryManager();
    const turns: AuditTurn[] = [];
    m.on('turn', (e) => turns.push(capturedTurnRecord(e.sessionId, e.turn)));
    m.record('s', turn([1, 2], [10, 11], { topK: undefined }));
    const samples = m.finish('s', { reward: 1 });
    samples[0]!.extra = { rollout_topk_token_ids: [[0], [1]], rollout_topk_log_probs: [[0], [0]] };
    const rollout = { taskId: 't', groupIndex: 0, sampleIndex: 0, rolloutId: 0, sessionId: 's', samples };
    const r = auditHandoff(
      [{ ...rollout, turns: 1, timings: {}, metadata: {}, status: 'completed', reward: 1 }],
      () => turns,
    );
    expect(r.audit.causes).toEqual({ rollout_topk_token_ids: 1 });
    expect(r.failed[0]!.failure.error.message).toMatch(/the sample carries heads the turn did not record/);
  });

  it('a turn log whose heads are misshapen is refused when it is read, naming the field', () => {
    const m = new TrajectoryManager();
    const lines: string[] = [];
    m.on('turn', (e) => lines.push(JSON.stringify(capturedTurnRecord(e.sessionId, e.turn))));
    m.record('s', turn([1, 2], [10, 11]));
    expect(readTurnLog(lines.join('\n'))[0]).toMatchObject({
      topk_k: K,
      topk_token_ids: [10, 110, 210, 11, 111, 211],
    });
    const short = JSON.parse(lines[0]!);
    short.topk_token_ids.pop();
    expect(() => readTurnLog(JSON.stringify(short))).toThrow(/topk_token_ids.*expected 2 rows of 3/);
    const repeated = JSON.parse(lines[0]!);
    repeated.topk_token_ids[1] = 10;
    expect(() => readTurnLog(JSON.stringify(repeated))).toThrow(/row 0: ids must be distinct/);
  });
});
