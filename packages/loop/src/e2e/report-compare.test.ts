// Two runs of the main job (`pnpm coding-agent`, as processes, on the stand-in engine: a scripted policy
// behind SGLang's wire, not a model) with different configs, then `vime-metrics compare` over their
// folders, looked at in headless Chromium: every curve on one chart with a line per run and a legend, the
// settings that differ with where each came from, the stand-in labelled, every table inside a 1,280 px
// window. The run's own report draws the rollouts per step (response length, truncation, turns,
// zero-variance groups, advantages) from the rows the loop handed off. Screenshots are kept
// ($VIME_ARTIFACTS, else runs/artifacts/compare-report.png and main-job-training-report.png).
import { writeFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RunRecord } from '@vime/metrics';
import { renderHtmlInChromium } from '@vime/metrics/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAIN_JOB, REPO_ROOT, runScript } from '../__fixtures__/run-command.js';

const root = REPO_ROOT;
const METRICS_CLI = 'packages/metrics/src/cli.ts';
const ARTIFACTS = process.env.VIME_ARTIFACTS ?? join(root, 'runs', 'artifacts');

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-report-compare-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

function run(script: string, args: string[], timeoutMs = 300_000) {
  return runScript(script, args, { timeoutMs });
}

// Small on purpose (2 steps of 2 prompts x 2 samples): the baseline check of the task set runs in the
// main-job test; here the point is two real run folders whose configs differ.
const SMALL = ['--steps', '2', '--prompts', '2', '--samples', '2', '--no-validate', '--quiet'];

describe('vime-metrics compare over two main-job runs', () => {
  it('overlays both runs on shared axes, lists the config differences, fits 1,280 px', {
    timeout: 600_000,
  }, async () => {
    const a = join(tmp, 'turns-3');
    const b = join(tmp, 'turns-12-seed-11');
    const configB = join(tmp, 'b.yaml');
    writeFileSync(configB, 'agents:\n  max_turns: 12\nengines:\n  stand_in:\n    seed: 11\n');
    const runA = await run(MAIN_JOB, ['--out', a, '--max-turns', '3', ...SMALL]);
    expect(runA.code, runA.stderr.slice(-3000)).toBe(0);
    const runB = await run(MAIN_JOB, ['--out', b, '--config', configB, ...SMALL]);
    expect(runB.code, runB.stderr.slice(-3000)).toBe(0);

    // The loop's own report and metrics file: the rollouts per step, from the rows it handed off.
    const own = JSON.parse(await readFile(join(a, 'report.json'), 'utf8')) as RunRecord;
    expect(own.absent.trainer).toMatch(/no trainer metrics/);
    for (const step of ['1', '2']) {
      const s = own.shape!.per_step[step]!;
      expect(s.rollouts).toBe(4);
      expect(s.with_rows).toBe(s.scored);
      expect(s.response_tokens_mean).toBeGreaterThan(0);
      expect(s.turns_max).toBeLessThanOrEqual(3);
      expect(s.advantage!.count).toBe(s.scored);
    }
    const lines = (await readFile(join(a, 'metrics.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { kind: string; status?: string; response_tokens?: number | null });
    for (const r of lines.filter(
      (l) => l.kind === 'rollout' && (l.status === 'completed' || l.status === 'truncated'),
    ))
      expect(r.response_tokens).toBeGreaterThan(0);
    const ownPage = await renderHtmlInChromium(await readFile(join(a, 'report.html'), 'utf8'), {
      screenshotPath: join(ARTIFACTS, 'main-job-training-report.png'),
      viewport: { width: 1280, height: 1000 },
    });
    expect(ownPage.consoleErrors).toEqual([]);
    expect(ownPage.sections.find((s) => s.id === 'shape')).toMatchObject({ empty: false });
    expect(ownPage.scrollWidth).toBeLessThanOrEqual(1280);

    const html = join(tmp, 'compare.html');
    const json = join(tmp, 'compare.json');
    const compare = await run(METRICS_CLI, ['compare', a, `b=${b}`, '--html', html, '--json', json]);
    expect(compare.code, compare.stderr).toBe(0);
    expect(compare.stdout).toMatch(/^2 runs: turns-3, b; \d+ setting\(s\) differ: /m);
    const result = JSON.parse(await readFile(json, 'utf8')) as {
      config: {
        differences: Array<{ key: string; values: Array<{ value: unknown; source: string } | null> }>;
      };
    };
    const differ = Object.fromEntries(result.config.differences.map((d) => [d.key, d.values]));
    expect(differ['agents.max_turns']).toEqual([
      { value: 3, source: 'flag --max-turns' },
      { value: 12, source: expect.stringMatching(/^file .*b\.yaml/) },
    ]);
    expect(differ['engines.stand_in.seed']).toEqual([
      { value: 7, source: 'default' },
      { value: 11, source: expect.stringMatching(/^file .*b\.yaml/) },
    ]);
    expect(differ['output.dir']).toBeDefined();
    expect(differ['run.steps']).toBeUndefined();

    const page = await renderHtmlInChromium(await readFile(html, 'utf8'), {
      screenshotPath: join(ARTIFACTS, 'compare-report.png'),
      viewport: { width: 1280, height: 1000 },
    });
    expect(page.consoleErrors).toEqual([]);
    expect(page.requests).toEqual([]);
    expect(page.emptySvgCount).toBe(0);
    expect(page.standInLabel).toMatch(/Stand-in engine in turns-3, b \(stand-in engine .*\): .*not a model/);
    // Each curve is one chart with a line per run, named as in the legend.
    const charts = new Map<string, string[]>();
    for (const s of page.series) charts.set(s.chart, [...(charts.get(s.chart) ?? []), s.name]);
    for (const title of [
      'mean reward',
      'pass@1',
      'truncation rate',
      'turns per rollout (mean)',
      'response length (mean tokens)',
      'zero-variance groups (fraction)',
      'step time (s)',
    ])
      expect(charts.get(title), title).toEqual(['turns-3', 'b']);
    for (const s of page.series) expect(s.points, `${s.chart}: ${s.name}`).toBe(2);
    expect(page.text).toMatch(/In no run: trainer: policy loss; trainer: KL/);
    expect(page.text).toMatch(/agents\.max_turns\s+3 \(flag --max-turns\)\s+12 \(file /);
    expect(page.scrollWidth).toBeLessThanOrEqual(1280);
    for (const t of page.tables) {
      expect(t.right, t.section).toBeLessThanOrEqual(1280);
      expect(t.scrollWidth, t.section).toBeLessThanOrEqual(t.clientWidth);
    }
    expect((await stat(join(ARTIFACTS, 'compare-report.png'))).size).toBeGreaterThan(50_000);
  });
});
