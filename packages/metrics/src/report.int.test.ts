import { existsSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RolloutResult } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { RUN_START, sglangEngineLog, slimeTrainerLog } from './__fixtures__/run-logs.js';
import { renderHtmlReport } from './html.js';
import { runReport } from './report.js';
import { rolloutMetrics } from './rollout.js';
import { engineSaturation } from './saturation.js';
import { parseSglangDecodeLog } from './sglang-log.js';
import { parseSlimePerfLog } from './slime-perf.js';
import { sparkline } from './sparkline.js';
import { renderTerminalReport } from './terminal.js';
import { DEFAULT_CHROMIUM, renderHtmlInChromium } from './testing.js';

function buildRecord() {
  const eng0 = parseSglangDecodeLog(sglangEngineLog({ peakQueue: 122 })).samples;
  const eng1 = parseSglangDecodeLog(sglangEngineLog({ peakQueue: 39 })).samples;
  const perf = parseSlimePerfLog(slimeTrainerLog());
  return runReport({
    mode: 'sync',
    engines: [
      { name: 'eng0', points: eng0 },
      { name: 'eng1', points: eng1 },
    ],
    perf,
  });
}

describe('engineSaturation', () => {
  it('reports peaks, nearest-rank medians and time-bucketed deciles', () => {
    const points = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11].map((i) => ({
      t: RUN_START + i * 1000,
      running: i,
      queued: i < 6 ? 0 : 2 * i,
      kvUsage: i / 20,
    }));
    const s = engineSaturation(points, { buckets: 4 });
    expect(s).toMatchObject({ points: 12, start: RUN_START, end: RUN_START + 11_000 });
    expect(s.running).toEqual({ peak: 11, median: 5 });
    expect(s.queued).toEqual({ peak: 22, median: 0 });
    // 11 s split into 4 spans of 2.75 s: readings 0-2, 3-5, 6-8, 9-11.
    expect(s.deciles.running).toEqual([1, 4, 7, 10]);
    expect(s.deciles.queued).toEqual([0, 0, 14, 20]);
    // Without timestamps the slices are runs of readings; empty slices are null.
    const untimed = engineSaturation([{ t: null, running: 3, queued: 1, kvUsage: 0.5 }], { buckets: 3 });
    expect(untimed.deciles.running).toEqual([3, null, null]);
    expect(engineSaturation([])).toMatchObject({ points: 0, running: { peak: null, median: null } });
  });
});

describe('runReport', () => {
  it('assembles a benchmark-shaped record from trainer and engine logs', () => {
    const record = buildRecord();
    expect(record).toMatchObject({
      name: 'sync_2eng',
      mode: 'sync',
      engines: 2,
      rollouts_completed: 2,
      rollouts_aborted: 1,
      steps: {
        '0': {
          step_time_sec: 1869,
          rollout_time_sec: 1401.6,
          train_time_sec: 447.5,
          train_wait_time_sec: 1421.5,
          update_weights_time_sec: 18.7,
          wait_time_ratio: 0.76,
        },
        '1': {
          step_time_sec: 1697.5,
          rollout_time_sec: 1267.9,
          train_time_sec: 396.2,
          wait_time_ratio: 0.77,
        },
      },
      quality: {
        '0': { reward_mean: 0.41, 'pass@1': 0.41, 'pass@8': 0.8 },
        '1': { reward_mean: 0.52, 'pass@4': 0.77 },
      },
    });
    const sat = record.saturation;
    expect(sat.n_engines).toBe(2);
    expect(sat.queue_req_peak_per_eng).toEqual([122, 39]);
    expect(sat.running_req_peak_per_eng).toEqual([160, 160]);
    expect(sat.kv_cache_frac_peak_per_eng).toEqual([0.98, 0.98]);
    expect(sat.eng0_queue_req_deciles).toHaveLength(10);
    expect(sat.eng1_running_req_deciles).toHaveLength(10);
    expect(record.timeline[0]!.t[0]).toBeLessThan(30);
    expect(JSON.parse(JSON.stringify(record))).toEqual(record);
  });

  it('takes rollout counts and per-step quality from rolloutMetrics', () => {
    const results: RolloutResult[] = [0, 1, 2, 3].map((i) => ({
      taskId: 't',
      groupIndex: 0,
      sampleIndex: i,
      rolloutId: i,
      samples: [],
      turns: 1,
      timings: {},
      metadata: {},
      ...(i === 3
        ? { status: 'failed' as const, error: { code: 'x', message: 'boom' } }
        : { status: 'completed' as const, reward: i % 2 }),
    }));
    const m = rolloutMetrics(results, { correct: (r) => r === 1, bootstrap: false });
    const record = runReport({ mode: 'async', rollouts: m, quality: [{ step: 3, metrics: m }] });
    expect(record).toMatchObject({
      rollouts_completed: 3,
      rollouts_aborted: 0,
      rollouts_failed: 1,
      engines: 0,
    });
    // The group expects 4 rollouts (one failed), so pass@4 is reported as unknown, not guessed.
    expect(record.quality['3']).toEqual({
      ci: { reward_mean: null, 'pass@1': null, 'pass@2': null, 'pass@4': null },
      reward_mean: 1 / 3,
      'pass@1': expect.closeTo(1 / 3, 14),
      'pass@2': expect.closeTo(2 / 3, 14),
      'pass@4': null,
    });
  });
});

describe('reports people look at', () => {
  it('draws sparklines', () => {
    expect(sparkline([0, 1, 2, 3, 4, 5, 6, 7])).toBe('▁▂▃▄▅▆▇█');
    expect(sparkline([5, null, 5])).toBe('█ █');
    expect(sparkline([5, 6], { min: 5 })).toBe('▁█');
    expect(sparkline([0, 10, 0, 10], { width: 2 })).toBe('██');
    expect(
      sparkline(
        Array.from({ length: 100 }, (_, i) => i),
        { width: 8 },
      ),
    ).toHaveLength(8);
    const text = renderTerminalReport(buildRecord());
    expect(text).toMatch(/eng0 #queue-req {3}\(peak 122 \/ median \d+\): [▁▂▃▄▅▆▇█]{40}/);
    expect(text).toMatch(/^step time {2}[▁▂▃▄▅▆▇█]{2}$/m);
  });

  it('renders every chart in headless Chromium without console errors or requests', async () => {
    expect(
      existsSync(DEFAULT_CHROMIUM),
      `Chromium missing at ${DEFAULT_CHROMIUM}: apt-get install -y chromium`,
    ).toBe(true);
    const html = renderHtmlReport(buildRecord());
    const screenshotPath = join(tmpdir(), `vime-metrics-report-${process.pid}.png`);
    const r = await renderHtmlInChromium(html, { screenshotPath });
    expect(r.consoleErrors).toEqual([]);
    expect(r.requests).toEqual([]);
    // Two engine charts, the step-time chart, the reward chart and the pass@k chart.
    expect(r.svgCount).toBe(5);
    expect(r.emptySvgCount).toBe(0);
    for (const size of r.svgSizes) expect(size.width).toBeGreaterThan(300);
    expect(r.title).toBe('Run sync_2eng');
    expect(r.text).toMatch(
      /eng1: 400 readings, one every 2000 ms \(median\); running peak 160, median \d+; queued peak 39/,
    );
    expect(html).toMatch(/seconds from start/);
    expect(statSync(screenshotPath).size).toBeGreaterThan(10_000);
    expect(readFileSync(screenshotPath).subarray(1, 4).toString()).toBe('PNG');

    // A report with missing sections still renders cleanly, and a broken page is caught.
    const empty = await renderHtmlInChromium(renderHtmlReport(runReport({})));
    expect(empty).toMatchObject({ consoleErrors: [], svgCount: 0 });
    expect(empty.text).toMatch(/no engine readings/);
    expect(empty.sections.filter((x) => x.id !== 'run').every((x) => x.empty)).toBe(true);
    const broken = await renderHtmlInChromium(
      '<svg></svg><img src="https://example.invalid/x.png"><script>undefinedFn()</script>',
    );
    expect(broken.consoleErrors.join('\n')).toMatch(/undefinedFn/);
    expect(broken.requests).toEqual(['https://example.invalid/x.png']);
    expect(broken.emptySvgCount).toBe(1);
  });

  it('says how to get a browser when none is installed', async () => {
    await expect(
      renderHtmlInChromium('<p>x</p>', { executablePath: '/nonexistent/chromium' }),
    ).rejects.toThrow(
      /no Chromium at \/nonexistent\/chromium; install it \(Debian: apt-get install -y chromium\)/,
    );
  });
});
