/**
 * Weight versions of every trained token on the vLLM wire, whose answers name no version, with the
 * stand-in engine (a scripted policy, not a model) serving vLLM's `/v1/completions`: the loop notes the
 * trainer's version in the router's weight-update log at start and after each step, every row's spans
 * come from that log, the hand-off checks them against it, and the report's staleness section counts the
 * trained tokens by lag behind the trainer.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeSamples } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConfig } from '../config/resolve.js';
import { runLoop, type TrainerHook } from '../loop.js';

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-weight-spans-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

const trainer: TrainerHook = async ({ step }) => ({
  weightVersion: String(step),
  trainSeconds: 0,
  weightUpdateSeconds: 0,
  metrics: {},
});

describe('weight-version spans through the loop on the vLLM wire', () => {
  it("carries the log's versions on every trained token, passes the hand-off check, and reports tokens by lag", {
    timeout: 300_000,
  }, async () => {
    const out = join(tmp, 'run');
    const config = checkConfig({
      out,
      mode: 'sync',
      engineKind: 'vllm',
      steps: 2,
      promptsPerStep: 2,
      samplesPerPrompt: 2,
      concurrency: 4,
      validate: false,
      quiet: true,
      poolReplicas: 2,
    });
    const summary = await runLoop(config, { log: () => {}, trainer });
    expect(summary.standIn).toBe(true);
    expect(summary.steps.map((s) => s.audit)).toMatchObject([
      { failedRollouts: 0, causes: {} },
      { failedRollouts: 0, causes: {} },
    ]);
    const trained: number[] = [];
    for (const step of [1, 2]) {
      const rows = decodeSamples(await readFile(join(out, 'steps', `${step}.msgpack`)));
      expect(rows.length).toBeGreaterThan(0);
      let tokens = 0;
      for (const row of rows) {
        // Sync: step 1 rolls out on the starting version 0, step 2 on the version step 1's trainer published.
        const mask = Array.from(row.loss_mask!);
        const spans = row.metadata.weight_version_spans as Array<[number, number, string]>;
        expect(spans.map((s) => s[2])).toEqual(spans.map(() => String(step - 1)));
        const covered = spans.reduce((n, [a, b]) => n + b - a, 0);
        const ones = mask.filter((m) => m === 1).length;
        expect(covered).toBe(ones);
        expect(row.weight_versions).toEqual([String(step - 1)]);
        tokens += ones;
      }
      trained.push(tokens);
    }
    const report = JSON.parse(await readFile(summary.reportJson, 'utf8'));
    expect(report.staleness.tokens.per_step).toEqual([
      {
        step: 1,
        trainer_version: 0,
        trainer_version_from: 'rows',
        tokens: trained[0],
        lag: { '0': trained[0] },
        share: { '0': 1 },
        mean_lag: 0,
        max_lag: 0,
        unversioned: 0,
      },
      {
        step: 2,
        trainer_version: 1,
        trainer_version_from: 'rows',
        tokens: trained[1],
        lag: { '0': trained[1] },
        share: { '0': 1 },
        mean_lag: 0,
        max_lag: 0,
        unversioned: 0,
      },
    ]);
    expect(await readFile(summary.reportHtml, 'utf8')).toContain('Trained tokens by lag');
  });
});
