/**
 * The run report of the committed H200 run (evidence/h200), made by `vime-metrics --run` from its files as
 * they are and looked at in headless Chromium: the trainer's curves (policy loss, KL, clip fraction, grad
 * norm, log-prob gap) one point per step, the metrics this trainer does not report named, the rollouts per
 * step, and every table inside a 1,280 px window. The screenshot is kept ($VIME_ARTIFACTS, else
 * runs/artifacts/closed-loop-report.png).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { RunRecord } from '@vime/metrics';
import { renderHtmlInChromium } from '@vime/metrics/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const evidence = join(root, 'examples/closed-loop/evidence/h200');
const CLI = join(root, 'packages/metrics/src/cli.ts');

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-closed-loop-report-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe('the report of the H200 run', () => {
  it("draws the trainer's curves from the committed files and fits a 1,280 px window", {
    timeout: 120_000,
  }, async () => {
    const json = join(tmp, 'report.json');
    const html = join(tmp, 'report.html');
    const run = await promisify(execFile)(
      process.execPath,
      [
        '--import',
        'tsx',
        '--conditions=@vime/source',
        CLI,
        '--run',
        join(evidence, 'train__metrics.jsonl'),
        '--batch',
        `10=${join(evidence, 'step-10/batch.msgpack')}`,
        '--json',
        json,
        '--html',
        html,
      ],
      { cwd: root, timeout: 90_000 },
    );
    // The terminal summary draws the trainer's curves too.
    expect(run.stdout).toMatch(/^grad norm +[▁▂▃▄▅▆▇█]{10} {2}\(train\/grad_norm, step 10: 0\.135\)$/m);
    const record = JSON.parse(await readFile(json, 'utf8')) as RunRecord;
    const trainerFile = (await readFile(join(evidence, 'train__trainer__metrics.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { step: number; metrics: Record<string, number> });
    for (const { step, metrics } of trainerFile)
      expect(record.trainer!.per_step[String(step)]!.grad_norm).toBe(metrics.grad_norm);

    const screenshotPath = join(
      process.env.VIME_ARTIFACTS ?? join(root, 'runs', 'artifacts'),
      'closed-loop-report.png',
    );
    const page = await renderHtmlInChromium(await readFile(html, 'utf8'), {
      screenshotPath,
      viewport: { width: 1280, height: 1000 },
    });
    expect(page.consoleErrors).toEqual([]);
    expect(page.requests).toEqual([]);
    expect(page.emptySvgCount).toBe(0);
    expect(page.sections.find((s) => s.id === 'trainer')).toMatchObject({
      empty: false,
      charts: 5,
      tables: 1,
    });
    expect(page.sections.find((s) => s.id === 'shape')).toMatchObject({ empty: false });
    // Every trainer curve: ten steps, one unbroken line, drawn across the chart.
    for (const name of [
      'train/loss',
      'train/ppo_kl',
      'train/pg_clipfrac',
      'train/grad_norm',
      'train/logprob_abs_diff_mean',
    ]) {
      const line = page.series.find((s) => s.name === name);
      expect(line, name).toMatchObject({ points: 10, segments: 1 });
      expect(line!.width, name).toBeGreaterThan(200);
    }
    expect(page.text).toMatch(
      /Not reported by this trainer: entropy \(looked for entropy, entropy_loss\); learning rate/,
    );
    for (const title of ['truncation rate', 'turns per rollout', 'zero-variance groups']) {
      const line = page.series.find((s) => s.chart === title);
      expect(line, title).toMatchObject({ points: 10, segments: 1 });
    }
    expect(page.text).toMatch(/no training rows for steps 1, 2, 3, 4, 5, 6, 7, 8, 9/);
    expect(page.standInLabel).toBeNull();
    // Tables fit the window: the page does not scroll sideways and no table sticks out of it.
    expect(page.scrollWidth).toBeLessThanOrEqual(1280);
    for (const t of page.tables) {
      expect(t.right, t.section).toBeLessThanOrEqual(1280);
      expect(t.scrollWidth, t.section).toBeLessThanOrEqual(t.clientWidth);
    }
    expect((await stat(screenshotPath)).size).toBeGreaterThan(100_000);
  });
});
