import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { type LoadState, vllmMetrics } from './__fixtures__/metrics-text.js';
import { sglangEngineLog, slimeTrainerLog } from './__fixtures__/run-logs.js';
import type { RunRecord } from './report.js';

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const cli = fileURLToPath(new URL('./cli.ts', import.meta.url));

function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', '--conditions=@vime/source', cli, ...args],
      { cwd: repo, timeout: 60_000, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('vime-metrics CLI', () => {
  it('turns trainer and engine logs into a JSON record and an HTML report', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-metrics-cli-'));
    writeFileSync(join(dir, 'train.log'), slimeTrainerLog());
    writeFileSync(join(dir, 'sglang-0.log'), sglangEngineLog({ peakQueue: 122 }));
    writeFileSync(join(dir, 'sglang-1.log'), sglangEngineLog({ peakQueue: 40 }));
    const r = await run([
      '--trainer-log',
      join(dir, 'train.log'),
      '--engine-log',
      `a=${join(dir, 'sglang-0.log')}`,
      '--engine-log',
      join(dir, 'sglang-1.log'),
      '--mode',
      'sync',
      '--json',
      join(dir, 'out/run.json'),
      '--html',
      join(dir, 'out/run.html'),
    ]);
    expect(r.stderr).toMatch(/a: 400 decode-batch readings/);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/a #queue-req {3}\(peak 122 \/ median \d+\): [▁▂▃▄▅▆▇█]+/);
    expect(r.stdout).toMatch(/eng1 #running-req \(peak 160/);
    const record = JSON.parse(readFileSync(join(dir, 'out/run.json'), 'utf8')) as RunRecord;
    expect(record).toMatchObject({
      name: 'sync_2eng',
      engines: 2,
      rollouts_completed: 2,
      rollouts_aborted: 1,
    });
    expect(record.saturation.engine_names).toEqual(['a', 'eng1']);
    expect(record.steps['1']!.step_time_sec).toBe(1697.5);
    // The sections the logs carry: per-rollout ones from the hook's `[agent]` lines.
    expect(record.engine).toMatchObject({ kind: 'sglang', stand_in: false });
    expect(record.tasks!.map((t) => [t.task, t.attempts, t.solved])).toEqual([
      ['task__1', 1, 1],
      ['task__2', 1, 0],
      ['task__3', 1, 0],
    ]);
    expect(record.failures_by_cause).toEqual({ 'aborted:wall_clock_timeout': 1 });
    expect(record.reward_histogram!.scored).toBe(2);
    expect(record.phases!.summary.eval).toMatchObject({ count: 2, p50: 40_000 });
    // The trainer's per-step pass@k (over every rollout) wins over the few logged rollouts.
    expect(record.quality['1']).toMatchObject({ reward_mean: 0.52, 'pass@8': 0.86 });
    expect(record.tokens!.per_second).toBeGreaterThan(0);
    expect(record.saturation.sample_interval_ms_per_eng).toEqual([2000, 2000]);
    const html = readFileSync(join(dir, 'out/run.html'), 'utf8');
    for (const id of ['quality', 'reward-histogram', 'tasks', 'failures', 'phases', 'saturation', 'steps'])
      expect(html).toContain(`data-section="${id}" data-empty="false"`);
  });

  it('scrapes engine URLs for a duration', async () => {
    let n = 0;
    const server = createServer((_req, res) => {
      n++;
      const state: LoadState = {
        running: 10 + n,
        queued: n % 3,
        kvUsage: 0.5,
        promptTokens: 100 * n,
        generationTokens: 10 * n,
        ttft: [1, 2, 3, 4, 5, 6],
        ttftSum: 1,
      };
      res.end(vllmMetrics(state));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`;
    const dir = mkdtempSync(join(tmpdir(), 'vime-metrics-cli-'));
    try {
      const r = await run([
        '--scrape',
        `vllm0=${url}`,
        '--duration',
        '1s',
        '--interval',
        '200ms',
        '--json',
        join(dir, 'r.json'),
        '--html',
        join(dir, 'r.html'),
        '--quiet',
      ]);
      expect(r.code).toBe(0);
      const record = JSON.parse(readFileSync(join(dir, 'r.json'), 'utf8')) as RunRecord;
      expect(record.saturation.engine_names).toEqual(['vllm0']);
      expect(record.saturation.samples_per_eng[0]).toBeGreaterThanOrEqual(3);
      expect(record.saturation.running_req_peak_per_eng[0]).toBe(10 + record.saturation.samples_per_eng[0]!);
      const w = record.saturation.scrape_window_per_eng![0]!;
      expect(w.scrapes).toBe(record.saturation.samples_per_eng[0]);
      expect(w.promptTokens).toBe(100 * (w.scrapes - 1));
      expect(readFileSync(join(dir, 'r.html'), 'utf8')).toMatch(/TTFT p50 \(ms\)/);
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });

  it('explains what is wrong with its input', async () => {
    const none = await run([]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/nothing to read: pass --run, --trainer-log, --engine-log or --scrape/);
    const missing = await run(['--engine-log', '/nonexistent/sglang.log']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--engine-log \/nonexistent\/sglang\.log: cannot read it: ENOENT/);
    const dir = mkdtempSync(join(tmpdir(), 'vime-metrics-cli-'));
    writeFileSync(join(dir, 'train.log'), slimeTrainerLog());
    const wrong = await run(['--engine-log', join(dir, 'train.log')]);
    expect(wrong.stderr).toMatch(/no "Decode batch" lines among 9 lines/);
    const badDuration = await run(['--scrape', 'http://127.0.0.1:9/metrics', '--duration', 'soon']);
    expect(badDuration.stderr).toMatch(/--duration: "soon" is not a duration/);
    const help = await run(['--help']);
    expect(help.stdout).toMatch(/Usage: vime-metrics/);
  });

  it('fails fast through the bin, with no stack trace: a zero interval, a report under /proc', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-metrics-cli-'));
    writeFileSync(join(dir, 'train.log'), slimeTrainerLog());
    const busy = await run(['--scrape', 'http://127.0.0.1:9/metrics', '--interval', '0']);
    expect(busy.code).toBe(2);
    expect(busy.stderr).toContain('--interval 0: scrapes must be at least 100ms apart');
    const proc = await run([
      '--trainer-log',
      join(dir, 'train.log'),
      '--json',
      '/proc/nope/r.json',
      '--quiet',
    ]);
    expect(proc.code).toBe(2);
    expect(proc.stderr).toMatch(/--json \/proc\/nope: cannot create \/proc\/nope: ENOENT/);
    for (const r of [busy, proc]) expect(r.stderr).not.toMatch(/^\s+at /m);
  });
});
