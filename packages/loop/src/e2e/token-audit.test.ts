/**
 * The token audit at every hand-off, with the stand-in engine (a scripted policy, not a model): a run's
 * rows pass against the turns the proxy captured; a step whose trainer failed is handed off again on
 * resume against the captured turns kept in `turns.jsonl`, and one tampered turn makes exactly its
 * rollout an infrastructure failure (cause counted), left out of the batch, in the sinks and the report.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeSamples, type RolloutResult } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConfig } from '../config/resolve.js';
import { readConfigOf, runLoop, type TrainerHook } from '../loop.js';

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-token-audit-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

const trainer =
  (fail: boolean): TrainerHook =>
  async ({ step }) => {
    if (fail) throw new Error('trainer down');
    return { weightVersion: String(step), trainSeconds: 0, weightUpdateSeconds: 0, metrics: {} };
  };

const jsonLines = async (path: string) =>
  (await readFile(path, 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe('the token audit at hand-off', () => {
  it('passes a run, and after a resume fails exactly the rollout whose captured turn was tampered with', {
    timeout: 300_000,
  }, async () => {
    const out = join(tmp, 'run');
    const config = checkConfig({
      out,
      mode: 'sync',
      steps: 1,
      promptsPerStep: 2,
      samplesPerPrompt: 2,
      concurrency: 4,
      validate: false,
      quiet: true,
      poolReplicas: 2,
    });
    await expect(runLoop(config, { log: () => {}, trainer: trainer(true) })).rejects.toThrow(/trainer down/);

    // The capture of one turn differs from what its rollout's row carries.
    const turnsPath = join(out, 'turns.jsonl');
    const turns = await jsonLines(turnsPath);
    expect(turns.length).toBeGreaterThanOrEqual(4);
    const victim = turns.find((t) => (t.output_log_probs as number[]).length > 2)!;
    (victim.output_log_probs as number[])[1] = -7.25;
    await writeFile(turnsPath, `${turns.map((t) => JSON.stringify(t)).join('\n')}\n`);

    const log: string[] = [];
    const resumed = { ...(await readConfigOf(out)), resume: out };
    const summary = await runLoop(resumed, { log: (l) => log.push(l), trainer: trainer(false) });
    const audit = summary.steps[0]!.audit!;
    expect(audit).toMatchObject({ rollouts: 4, failedRollouts: 1, failedSamples: 1 });
    expect(audit.causes).toEqual({ rollout_log_probs: 1 });
    expect(log.join('\n')).toMatch(
      new RegExp(
        `token audit: rollout \\d+ .*session "${victim.session_id}".*log prob of token \\d+ differs`,
      ),
    );

    // Left out of the batch, a failure (no reward) in the results, counted in the sinks and the report.
    const rows = decodeSamples(await readFile(join(out, 'steps', '1.msgpack')));
    expect(rows.some((r) => r.session_id === victim.session_id)).toBe(false);
    expect(rows.length).toBeGreaterThanOrEqual(3);
    const results = JSON.parse(
      await readFile(join(out, 'steps', '1.results.json'), 'utf8'),
    ) as RolloutResult[];
    const failed = results.filter((r) => r.status === 'failed');
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ sessionId: victim.session_id, error: { code: 'token_audit_failed' } });
    expect(summary.failuresByCause).toMatchObject({ 'failed:token_audit_failed': 1 });
    const step = (await jsonLines(join(out, 'metrics.jsonl'))).filter((l) => l.kind === 'step').at(-1)!;
    expect(step.scalars).toMatchObject({
      'audit/rollouts': 4,
      'audit/failed_rollouts': 1,
      'audit/failed_by_cause/rollout_log_probs': 1,
    });
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(report.token_audit).toMatchObject({
      rollouts: 4,
      failed_rollouts: 1,
      causes: { rollout_log_probs: 1 },
    });
    expect(await readFile(join(out, 'report.html'), 'utf8')).toContain('Token audit at hand-off');
  });

  it('a clean run: every rollout passes, every captured turn trained', { timeout: 300_000 }, async () => {
    const out = join(tmp, 'clean');
    const config = checkConfig({
      out,
      mode: 'async',
      steps: 2,
      promptsPerStep: 2,
      samplesPerPrompt: 2,
      concurrency: 4,
      validate: false,
      quiet: true,
      poolReplicas: 2,
    });
    const summary = await runLoop(config, { log: () => {}, trainer: trainer(false) });
    for (const s of summary.steps) {
      expect(s.audit).toMatchObject({ rollouts: 4, failedRollouts: 0, causes: {} });
      expect(s.audit!.tokens).toBeGreaterThan(0);
    }
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(report.token_audit).toMatchObject({ rollouts: 8, failed_rollouts: 0 });
    expect(report.token_audit.share_of_handoff).toBeGreaterThan(0);
  });
});
