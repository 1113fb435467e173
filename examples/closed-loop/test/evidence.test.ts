/**
 * The committed H200 run (evidence/h200): its claims, and its step-10 batch and megatron.core dumps checked
 * again here, as the summary checked every step.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { readRolloutDump, readTrainDump } from '@vime/grpo';
import { describe, expect, it } from 'vitest';
import { checkStep } from '../src/checks.js';

const dir = fileURLToPath(new URL('../evidence/h200/', import.meta.url));

describe('the H200 evidence', () => {
  it('shows what the issue asks: 10 steps of 8 x 8, every check passed, pass@1 rose beyond its interval', () => {
    const summary = JSON.parse(readFileSync(`${dir}summary.json`, 'utf8'));
    expect(Object.values(summary.claims).every((c) => c === true)).toBe(true);
    expect(summary.trainer.backend).toBe('megatron');
    expect(summary.steps.map((s: { nextVersion: string }) => s.nextVersion)).toEqual(
      Array.from({ length: 10 }, (_, i) => String(i + 1)),
    );
    expect(summary.eval.trainDelta.ci[0]).toBeGreaterThan(0);
  });

  it('re-checks step 10: the megatron.core dumps against @vime/grpo, the token audit, the versions', async () => {
    const checks = await checkStep({
      step: 10,
      batchPath: `${dir}step-10/batch.msgpack`,
      trainerOut: `${dir}step-10`,
      expectedVersion: '9',
    });
    expect(checks.grpoCheck.verdict).toBe('match');
    expect(checks.grpoCheck.bitExactTokens).toBe(checks.grpoCheck.tokens);
    expect(checks.tokenAudit).toMatchObject({ ok: true, problems: [] });
    expect(checks.versions.ok).toBe(true);
    // The dumps decode in pure TypeScript.
    expect(readTrainDump(readFileSync(`${dir}step-10/train_data/10.pt`)).samples.length).toBeGreaterThan(60);
    expect(readRolloutDump(readFileSync(`${dir}step-10/rollout_data/10.pt`)).rollout_id).toBe(10);
  });
});
