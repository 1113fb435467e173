/**
 * The run's turn log: an in-memory one audits a rollout's rows and forgets its sessions; a file-backed
 * one appends every turn and a resumed run reads them back, a torn last line left out.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Turn } from '@vime/core';
import { TrajectoryManager } from '@vime/core/proxy';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditRolloutRows, TURN_LOG_FILE, TurnLog } from './turn-log.js';

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-turn-log-'));
});
afterAll(() => rm(tmp, { recursive: true, force: true }));

const turn = (prompt: number[], output: number[]): Omit<Turn, 'index'> => ({
  promptIds: Int32Array.from(prompt),
  outputIds: Int32Array.from(output),
  logprobs: Float32Array.from(output, (_, i) => -0.5 * (i + 1)),
  finishReason: 'stop',
  policyVersion: '2',
  startedAt: 0,
  endedAt: 1,
});

/** A session of two turns recorded into `log`, and its rollout's rows. */
function rollout(log: TurnLog, id: string) {
  const m = new TrajectoryManager();
  m.on('turn', (e) => log.record(e.sessionId, e.turn));
  m.record(id, turn([1, 2], [3, 4]));
  m.record(id, turn([1, 2, 3, 4, 9], [5, 6, 7]));
  return {
    taskId: 't',
    groupIndex: 0,
    sampleIndex: 0,
    rolloutId: 7,
    sessionId: id,
    samples: m.finish(id, { reward: 1 }),
  };
}

describe('the turn log', () => {
  it('audits a rollout’s rows in memory: passes them, fails a tampered one, forgets the sessions', () => {
    const log = TurnLog.memory();
    expect(auditRolloutRows(rollout(log, 'a'), log)).toBeUndefined();
    expect(log.sessions).toBe(0);
    const bad = rollout(log, 'b');
    bad.samples[0]!.rollout_log_probs![4] = -9;
    const error = auditRolloutRows(bad, log);
    expect(error?.code).toBe('token_audit_failed');
    expect(error?.message).toMatch(
      /rollout 7 \(task "t"\), sample 0 \(session "b"\): the log prob of token 4 differs/,
    );
    expect(log.sessions).toBe(0);
    // Its turns are gone: the same rows cannot pass later either.
    expect(auditRolloutRows(rollout(TurnLog.memory(), 'b'), log)?.message).toMatch(/no captured turn/);
  });

  it('appends every turn to turns.jsonl; a resume reads them back and leaves a torn last line out', async () => {
    const out = join(tmp, 'run');
    await rm(out, { recursive: true, force: true });
    await mkdir(out);
    const first = await TurnLog.open(out, false, () => {});
    const rows = rollout(first, 's');
    await first.close();
    const path = join(out, TURN_LOG_FILE);
    const text = await readFile(path, 'utf8');
    expect(text.trim().split('\n')).toHaveLength(2);
    await writeFile(path, `${text}{"session_id": "torn`);
    const resumed = await TurnLog.open(out, true, () => {});
    expect(resumed.turnsOf(['s']).map((t) => t.turn)).toEqual([0, 1]);
    expect(auditRolloutRows(rows, resumed)).toBeUndefined();
    await resumed.close();
  });
});
