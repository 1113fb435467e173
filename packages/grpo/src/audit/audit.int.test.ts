import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type CapturedTurn, capturedTurnRecord, createSample, type Sample, type Turn } from '@vime/core';
import { TrajectoryManager } from '@vime/core/proxy';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ProxyRun, proxyRun } from '../__fixtures__/proxy-run.js';
import { auditTokens } from './audit.js';
import { readAuditBatch, readTurnLog } from './audit-input.js';

let run: ProxyRun;
beforeAll(async () => {
  run = await proxyRun();
}, 120_000);

/** A deep copy of the run's batch and log, read back from their files' text as the CLI reads them. */
const fresh = () => ({ samples: readAuditBatch(run.batchText), turns: readTurnLog(run.turnsText) });

/** The trained spans `[start, end)` of a sample, in response coordinates. */
function spans(sample: Sample): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  const m = sample.loss_mask!;
  for (let i = 0; i < m.length; ) {
    if (!m[i]) {
      i++;
      continue;
    }
    let j = i;
    while (j < m.length && m[j]) j++;
    out.push([i, j]);
    i = j;
  }
  return out;
}

function failure(samples: Sample[], turns: CapturedTurn[]) {
  const report = auditTokens(samples, turns);
  expect(report.verdict).toBe('fail');
  const bad = report.samples.filter((s) => !s.ok);
  expect(bad).toHaveLength(1);
  return bad[0]!;
}

describe('token audit: a real proxy run (stand-in engine, top_p 0.95, 2 sessions of 3 turns)', () => {
  it('passes: every trained span is one captured turn, with its log probs and nucleus', () => {
    const { samples, turns } = fresh();
    expect(samples).toHaveLength(2);
    expect(turns).toHaveLength(6);
    for (const s of samples) {
      // slime's replay fields: one offset per response token plus one; observations have empty spans.
      const offsets = s.rollout_top_p_token_offsets!;
      expect(offsets.length).toBe(s.response_length + 1);
      expect(offsets.at(-1)).toBe(s.rollout_top_p_token_ids!.length);
      const kept = Array.from(s.loss_mask!, (_, i) => offsets[i + 1]! > offsets[i]!);
      expect(kept).toEqual(Array.from(s.loss_mask!, (m) => m === 1));
      expect((s.extra!.rollout_top_p_log_probs as number[]).length).toBe(s.rollout_top_p_token_ids!.length);
      expect(spans(s)).toHaveLength(3);
    }
    const report = auditTokens(samples, turns);
    expect(report.problems).toEqual([]);
    expect(report.verdict).toBe('pass');
    expect(report.samples.map((s) => s.turns.length)).toEqual([3, 3]);
    expect(report.turns).toMatchObject({ captured: 6, inBatchSessions: 6, matched: 6, untrained: [] });
    expect(report.totals.trainedTokens).toBe(report.totals.sampledTokens);
    expect(report.totals.trainedTokens).toBe(turns.reduce((n, t) => n + t.output_ids.length, 0));
  });

  it('fails on one changed log prob, naming the sample and token', () => {
    const { samples, turns } = fresh();
    const [a] = spans(samples[1]!)[1]!;
    samples[1]!.rollout_log_probs![a + 2] = Math.fround(samples[1]!.rollout_log_probs![a + 2]! + 1e-3);
    const bad = failure(samples, turns);
    expect(bad).toMatchObject({ position: 1, index: 1, sessionId: 'sibling-1' });
    expect(bad.firstDifference).toMatchObject({ token: a + 2, field: 'rollout_log_probs' });
  });

  it('fails on one swapped token inside a trained span', () => {
    const { samples, turns } = fresh();
    const s = samples[0]!;
    const [a] = spans(s)[2]!;
    const at = s.tokens.length - s.response_length + a + 1;
    s.tokens[at] = s.tokens[at]! + 1;
    const bad = failure(samples, turns);
    expect(bad.position).toBe(0);
    expect(bad.firstDifference).toMatchObject({ token: a + 1, position: at, field: 'tokens' });
    expect(bad.firstDifference!.found).toBe(String(s.tokens[at]));
  });

  it('fails on a swapped observation token: the next span maps to no turn, at the swapped token', () => {
    const { samples, turns } = fresh();
    const s = samples[0]!;
    const [, b] = spans(s)[0]!;
    const at = s.tokens.length - s.response_length + b + 1;
    s.tokens[at] = s.tokens[at]! + 1;
    const bad = failure(samples, turns);
    expect(bad.firstDifference).toMatchObject({ token: b + 1, position: at, field: 'tokens' });
  });

  it('fails on one replay slice shifted', () => {
    const { samples, turns } = fresh();
    const s = samples[1]!;
    const [a] = spans(s)[0]!;
    s.rollout_top_p_token_offsets![a + 3] = s.rollout_top_p_token_offsets![a + 3]! + 1;
    const bad = failure(samples, turns);
    expect(bad.position).toBe(1);
    expect(bad.firstDifference).toMatchObject({ token: a + 2, field: 'rollout_top_p_token_offsets' });
  });

  it('fails on a changed kept-id log prob and on a changed kept id', () => {
    for (const field of ['rollout_top_p_token_ids', 'rollout_top_p_log_probs'] as const) {
      const { samples, turns } = fresh();
      const s = samples[0]!;
      const [a] = spans(s)[1]!;
      const k = s.rollout_top_p_token_offsets![a + 4]!;
      if (field === 'rollout_top_p_token_ids')
        s.rollout_top_p_token_ids![k] = s.rollout_top_p_token_ids![k]! + 1;
      else (s.extra!.rollout_top_p_log_probs as number[])[k]! -= 0.5;
      const bad = failure(samples, turns);
      expect(bad.firstDifference).toMatchObject({ token: a + 4, field });
    }
  });

  it('fails on a span that maps to no captured turn', () => {
    const { samples, turns } = fresh();
    const missing = turns.filter((t) => !(t.session_id === 'sibling-1' && t.turn === 1));
    const bad = failure(samples, missing);
    const [a] = spans(samples[1]!)[1]!;
    expect(bad.position).toBe(1);
    expect(bad.firstDifference).toMatchObject({ token: a, field: 'turn' });
    expect(bad.firstDifference!.message).toMatch(/maps to no captured turn/);
  });

  it('fails on a span that maps to two captured turns', () => {
    const { samples, turns } = fresh();
    const dup = turns.find((t) => t.session_id === 'sibling-0' && t.turn === 2)!;
    const bad = failure(samples, [...turns, { ...dup, turn: 7 }]);
    const [a] = spans(samples[0]!)[2]!;
    expect(bad.position).toBe(0);
    expect(bad.firstDifference).toMatchObject({ token: a, field: 'turn' });
    expect(bad.firstDifference!.message).toMatch(/maps to 2 captured turns/);
  });

  it('fails when a turn is trained twice (a sample repeated in the batch)', () => {
    const { samples, turns } = fresh();
    const report = auditTokens([...samples, readAuditBatch(run.batchText)[0]!], turns);
    expect(report.verdict).toBe('fail');
    expect(report.samples[2]!.firstDifference!.found).toMatch(/already trained by sample 0/);
  });

  it('fails on a loss-mask total off by one, either way', () => {
    {
      const { samples, turns } = fresh();
      const [a] = spans(samples[0]!)[1]!;
      samples[0]!.loss_mask![a + 5] = 0;
      const bad = failure(samples, turns);
      expect(bad.firstDifference).toMatchObject({
        token: a + 5,
        field: 'loss_mask',
        expected: '1',
        found: '0',
      });
    }
    {
      const { samples, turns } = fresh();
      const [, b] = spans(samples[1]!)[0]!;
      samples[1]!.loss_mask![b] = 1;
      const bad = failure(samples, turns);
      expect(bad.position).toBe(1);
      expect(bad.firstDifference).toMatchObject({ token: b, field: 'loss_mask', expected: '0', found: '1' });
    }
  });

  it('fails when the batch lacks replay data the turns recorded, or the turns lack the batch’s', () => {
    const { samples, turns } = fresh();
    samples[0]!.rollout_top_p_token_ids = null;
    samples[0]!.rollout_top_p_token_offsets = null;
    expect(failure(samples, turns).firstDifference).toMatchObject({
      token: spans(samples[0]!)[0]![0],
      field: 'rollout_top_p_token_ids',
    });
    const stripped = fresh();
    for (const t of stripped.turns) delete t.top_p_token_ids;
    const report = auditTokens(stripped.samples, stripped.turns);
    expect(report.samples.every((s) => s.firstDifference?.field === 'rollout_top_p_token_ids')).toBe(true);
  });

  it('reports captured turns of the batch’s sessions that no span trains', () => {
    const { samples, turns } = fresh();
    const s = samples[1]!;
    // Sample 1 without its session id is matched against every turn; sibling-0's are then not trained twice,
    // but a batch of sample 1 alone leaves them untrained.
    const report = auditTokens([{ ...s, session_id: null }], turns);
    expect(report.verdict).toBe('fail');
    expect(report.samples[0]!.ok).toBe(true);
    expect(report.turns.untrained.map((t) => t.session_id)).toEqual(['sibling-0', 'sibling-0', 'sibling-0']);
    expect(report.problems[0]).toMatch(
      /session "sibling-0" turn 0 \(\d+ sampled tokens\) is in no trained span/,
    );
  });

  it('checks a sample’s own shape first', () => {
    const { turns } = fresh();
    const sample = createSample({
      tokens: [1, 2, 3],
      response_length: 2,
      loss_mask: [1, 1],
      session_id: 'x',
    });
    const report = auditTokens([sample], turns);
    expect(report.samples[0]!.firstDifference).toMatchObject({ field: 'rollout_log_probs', found: 'none' });
  });
});

describe('token audit: realigned and forked trajectories', () => {
  const turn = (prompt: number[], output: number[]): Omit<Turn, 'index'> => ({
    promptIds: Int32Array.from(prompt),
    outputIds: Int32Array.from(output),
    logprobs: Float32Array.from(output, (_, i) => -0.125 * (i + 1)),
    finishReason: 'stop',
    startedAt: 0,
    endedAt: 1,
  });
  function audited(turns: Array<Omit<Turn, 'index'>>) {
    const manager = new TrajectoryManager();
    const log: CapturedTurn[] = [];
    manager.on('turn', (e) => log.push(capturedTurnRecord(e.sessionId, e.turn)));
    for (const t of turns) manager.record('s', t);
    return auditTokens(manager.finish('s', { reward: 1 }), log);
  }

  it('a realign: the re-tokenised tail of an output is counted apart, not as a missing token', () => {
    // Turn 1's prompt re-tokenises the last output token of turn 0 (4 → 9).
    const report = audited([turn([1, 2], [3, 4]), turn([1, 2, 3, 9, 5], [7, 8])]);
    expect(report.verdict).toBe('pass');
    expect(report.samples[0]).toMatchObject({ trainedTokens: 3, realignedTokens: 1 });
    expect(report.totals).toEqual({ trainedTokens: 3, sampledTokens: 4, realignedTokens: 1 });
  });

  it('a fork: each row maps to its own turns; two turns whose outputs touch form one trained run', () => {
    const forked = audited([turn([1, 2], [3, 4]), turn([6, 6], [7]), turn([6, 6, 7], [8, 9])]);
    expect(forked.verdict).toBe('pass');
    expect(forked.samples.map((s) => s.turns.map((t) => t.turn))).toEqual([[0], [1, 2]]);
  });
});

describe('vime-grpo audit, as a user runs it', () => {
  const cli = fileURLToPath(new URL('../cli.ts', import.meta.url));
  const exec = promisify(execFile);
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'vime-audit-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const vime = (...argv: string[]) =>
    exec(process.execPath, ['--import', 'tsx', '--conditions=@vime/source', cli, ...argv]).then(
      (r) => ({ code: 0, ...r }),
      (e: { code: number; stdout: string; stderr: string }) => e,
    );
  const file = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };

  it('exits 0 on the clean run, 3 naming the sample and token on a tampered batch', async () => {
    const turnsPath = file('turns.jsonl', run.turnsText);
    const ok = await vime('audit', file('batch.jsonl', run.batchText), turnsPath);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/verdict: PASS/);
    expect(ok.stdout).toMatch(
      /sample 1 \(index 1\) session "sibling-1": ok, \d+ trained tokens from 3 turns/,
    );

    const samples = readAuditBatch(run.batchText);
    const [a] = spans(samples[1]!)[1]!;
    const at = samples[1]!.tokens.length - samples[1]!.response_length + a;
    const lines = run.batchText.split('\n');
    const row = JSON.parse(lines[1]!);
    row.rollout_log_probs[a] += 0.25;
    lines[1] = JSON.stringify(row);
    const bad = await vime('audit', file('tampered.jsonl', lines.join('\n')), turnsPath);
    expect(bad.code).toBe(3);
    expect(bad.stdout).toContain(
      `sample 1 (index 1) session "sibling-1": FAIL at token ${a} (tokens[${at}]) rollout_log_probs`,
    );
    expect(bad.stdout).toMatch(/verdict: FAIL — 1 of 2 samples differ/);

    const json = await vime('audit', file('tampered.jsonl', lines.join('\n')), turnsPath, '--json');
    expect(json.code).toBe(3);
    expect(JSON.parse(json.stdout).samples[1].firstDifference).toMatchObject({ token: a, position: at });
  });

  it('exits 2 with a one-line reason and no stack trace on bad input', async () => {
    const turnsPath = file('turns.jsonl', run.turnsText);
    const batchPath = file('batch.jsonl', run.batchText);
    const badOffsets = run.turnsText.replace('"top_p_token_offsets":[0,', '"top_p_token_offsets":[1,');
    const cases: Array<[string[], RegExp]> = [
      [['audit', batchPath], /audit needs <batch.jsonl> <turns.jsonl>, found 1 file/],
      [['audit', join(dir, 'nope.jsonl'), turnsPath], /cannot read .*nope\.jsonl: ENOENT/],
      [
        ['audit', file('torn.jsonl', `${run.batchText}\n{"tokens": [1,`), turnsPath],
        /torn\.jsonl:3: not JSON/,
      ],
      [['audit', file('wrong.jsonl', '{"tokens": "abc"}'), turnsPath], /tokens/],
      [
        ['audit', batchPath, file('offsets.jsonl', badOffsets)],
        /top_p_token_offsets\[0\]: expected 0, found 1/,
      ],
      [['audit', batchPath, file('empty.jsonl', '\n')], /empty/],
      [['audit', batchPath, turnsPath, '--bogus'], /bogus/],
    ];
    for (const [argv, message] of cases) {
      const r = await vime(...argv);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.stderr).toMatch(message);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
  }, 120_000);
});
