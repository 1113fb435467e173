/**
 * The CPU miniature of the closed loop, through the command a user runs (`vime-closed-loop train`):
 * the tiny Qwen3 model (2.44 M parameters, random weights) served by the real policy server, the
 * coding-agent loop against it (bubblewrap sandboxes, grading in a fresh sandbox), the real trainer
 * process with its plain torch backend (labelled "plain torch": megatron.core needs CUDA), two GRPO
 * steps, and the weights reloaded by the server after each. The tasks' hidden test is a fair coin (see
 * `__fixtures__/coin-tasks.ts`): a random model solves nothing, so the coin is what gives GRPO mixed
 * rewards to learn from. What it asserts: the second step's samples came from the updated weights.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeSamples, type Sample } from '@vime/core';
import { torchPythonOrSkip } from '@vime/core/testing';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  bundledTokenizerDir,
  exampleDir,
  pythonEnv,
  type Summary,
  scoreRow,
  startPolicyServer,
  type TrainRunResult,
} from '../src/index.js';
import { writeCoinTasks } from './__fixtures__/coin-tasks.js';

declare module 'vitest' {
  export interface ProvidedContext {
    offlineTasksDir: string;
  }
}

const repo = fileURLToPath(new URL('../../..', import.meta.url));
function run(cmd: string, args: string[], cwd: string, timeoutMs: number) {
  return new Promise<{ code: number | null; output: string }>((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

const maxGap = (row: Sample, a: ArrayLike<number>) => {
  let max = 0;
  for (let i = 0; i < row.response_length; i++)
    if (row.loss_mask?.[i] === 1) max = Math.max(max, Math.abs(a[i]! - row.rollout_log_probs![i]!));
  return max;
};

describe('the closed loop in miniature on CPU (tiny model, 2 GRPO steps, plain torch trainer)', () => {
  const python = torchPythonOrSkip();
  if (!python) return;
  const tmp = mkdtempSync(join(tmpdir(), 'vime-closed-loop-'));
  const out = join(tmp, 'run');
  const ckpt = join(tmp, 'ckpt');
  let result: TrainRunResult;
  let summary: Summary;
  let first: { code: number | null; output: string };
  let cli: { code: number | null; output: string };
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  beforeAll(async () => {
    const dataset = writeCoinTasks(inject('offlineTasksDir'), join(tmp, 'coin'), 2);
    const init = spawnSync(
      python,
      [
        '-m',
        'vime_policy.init',
        '--preset',
        'tiny',
        '--seed',
        '0',
        '--out',
        ckpt,
        '--tokenizer',
        bundledTokenizerDir(),
      ],
      { cwd: exampleDir, env: pythonEnv(), encoding: 'utf8' },
    );
    expect(init.status, init.stderr).toBe(0);
    const train = (steps: number) =>
      run(
        process.execPath,
        [
          '--import',
          'tsx',
          '--conditions=@vime/source',
          'src/cli.ts',
          'train',
          ...['--out', out, '--model', ckpt, '--dataset', dataset, '--python', python],
          ...['--train-tasks', '2', '--heldout-tasks', '0', '--steps', String(steps), '--prompts', '2'],
          ...['--samples', '6', '--concurrency', '6', '--max-turns', '1', '--max-tokens', '12'],
          ...['--max-context', '4096', '--backend', 'torch', '--device', 'cpu', '--lr', '0.01'],
          ...['--no-validate', '--quiet'],
        ],
        exampleDir,
        // a hang guard: a loaded 2-core machine took over 150 s for step 1 beside the suite's heaviest files
        300_000,
      );
    // Step 1, then the same command for 2 steps: it continues after step 1 (as after a stop).
    first = await train(1);
    expect(first.code, first.output.slice(-4000)).toBe(0);
    cli = await train(2);
    expect(cli.code, cli.output.slice(-4000)).toBe(0);
    result = JSON.parse(readFileSync(join(out, 'train', 'closed-loop.json'), 'utf8'));
    summary = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8'));
  }, 600_000);

  const batch = (step: number) => decodeSamples(readFileSync(join(out, 'train', 'steps', `${step}.msgpack`)));

  it('ran the real trainer process with its plain torch backend, labelled as such', () => {
    expect(result.trainer.backend).toBe('torch');
    expect(result.trainer.label).toMatch(/plain torch/);
    expect(cli.output).toMatch(/trainer ready: torch \(plain torch/);
  });

  it('continued a stopped run from its last trained step: same weights, next version', () => {
    expect(first.output).toMatch(/step 1: 12 rollouts/);
    expect(cli.output).toMatch(/continuing after step 1 from .*weights\/step-1 \(weight version 1\)/);
    expect(cli.output).not.toMatch(/step 1: 12 rollouts/);
  });

  it('served weight version 0, then 1: every row carries the version that sampled it', () => {
    expect(result.steps.map((s) => [s.servedVersion, s.nextVersion])).toEqual([
      ['0', '1'],
      ['1', '2'],
    ]);
    for (const [step, version] of [
      [1, '0'],
      [2, '1'],
    ] as const) {
      const rows = batch(step);
      expect(rows.length).toBeGreaterThanOrEqual(10);
      for (const r of rows) expect(r.weight_versions).toEqual([version]);
    }
    expect(summary.claims.versionChangesEveryStep).toBe(true);
    expect(summary.claims.everyRowCarriesItsVersion).toBe(true);
  });

  it('had a learning signal at step 1 (mixed coin-test rewards, non-zero advantages)', () => {
    const step1 = result.summary.steps[0]!;
    expect(step1.advantages.nonZero, 'every group got one reward: rerun (p ≈ 0.001)').toBeGreaterThan(0);
    expect(result.steps[0]!.train.metrics.grad_norm).toBeGreaterThan(0);
  });

  it('sampled step 2 from the updated weights: its log-probs are those of version 1, not of version 0', async () => {
    const [probe1, probe2] = result.steps.map((s) => s.probe!);
    // Step 1's row rescored by the server before its update equals its rollout log-probs; the update
    // moved the log-probs of that same sequence.
    expect(probe1!.replay.max).toBeLessThan(1e-4);
    expect(probe1!.change.mean).toBeGreaterThan(1e-3);
    // Step 2's row, rescored under version 1 (the server then), is what the rollout recorded ...
    expect(probe2!.replay.max).toBeLessThan(1e-4);
    // ... and the initial weights give other log-probs for the same tokens.
    const row = batch(2).find((r) => r.rollout_id === probe2!.rolloutId)!;
    const initial = await startPolicyServer({ modelPath: ckpt, python, device: 'cpu' });
    try {
      expect(maxGap(row, await scoreRow(initial.url, row))).toBeGreaterThan(1e-3);
    } finally {
      await initial.close();
    }
  });

  it('passes vime-grpo check and the token audit at every step; the trainer recomputed the rollout log-probs', () => {
    for (const s of result.steps) {
      const checks = s.checks!;
      expect(checks.grpoCheck.verdict).toBe('match');
      expect(checks.tokenAudit, JSON.stringify(checks.tokenAudit.problems)).toMatchObject({ ok: true });
      expect(checks.tokenAudit.samples).toBe(batch(s.step).length);
      // float32 on CPU, the same model code on both sides.
      expect(s.logprobAbsDiffMean).toBeLessThan(1e-4);
    }
    const dumps = join(out, 'train', 'trainer');
    const check = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        '--conditions=@vime/source',
        join(repo, 'packages/grpo/src/cli.ts'),
        'check',
        join(dumps, 'rollout_data', '2.pt'),
        join(dumps, 'train_data', '2.pt'),
      ],
      { cwd: repo, encoding: 'utf8' },
    );
    expect(check.status, `${check.stdout}${check.stderr}`).toBe(0);
  });

  it('records the trainer in metrics.jsonl and the report’s step-time split', () => {
    const lines = readFileSync(join(out, 'train', 'metrics.jsonl'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    // The second invocation resumed the run: its lines follow the first's, as in the trainer's own log.
    expect(lines.filter((l) => l.kind === 'run')).toHaveLength(2);
    const steps = lines.filter((l) => l.kind === 'step');
    expect(steps.map((s) => s.step)).toEqual([1, 2]);
    const trainerLines = readFileSync(join(out, 'train', 'trainer', 'metrics.jsonl'), 'utf8').split('\n');
    expect(trainerLines.filter(Boolean).map((l) => JSON.parse(l).step)).toEqual([1, 2]);
    for (const s of steps) {
      expect(s.scalars['perf/train_time']).toBeGreaterThan(0);
      expect(s.scalars['perf/update_weights_time']).toBeGreaterThan(0);
      expect(s.scalars['train/weight_version']).toBe(s.step);
      expect(s.scalars['train/logprob_abs_diff_mean']).toBeLessThan(1e-4);
    }
    const report = JSON.parse(readFileSync(join(out, 'train', 'report.json'), 'utf8'));
    // Step 1 was handed off by the first invocation (not timed by this one); step 2 by this one.
    expect(Object.keys(report.steps)).toEqual(['1', '2']);
    expect(report.steps['2'].train_time_sec).toBeGreaterThan(0);
    expect(report.steps['2'].update_weights_time_sec).toBeGreaterThan(0);
    expect(report.step_notes.update_weights).toBeUndefined();
    // The trainer's curves: step 2 from this invocation's trainer hook, step 1 (trained before the restart)
    // from the step line the first invocation wrote to metrics.jsonl.
    expect(report.trainer.keys).toMatchObject({
      policy_loss: expect.stringMatching(/loss$/),
      grad_norm: expect.any(String),
    });
    for (const step of ['1', '2']) {
      const t = report.trainer.per_step[step];
      expect(t.logprob_gap, `step ${step}`).toBe(
        steps[Number(step) - 1].scalars['train/logprob_abs_diff_mean'],
      );
      expect(Number.isFinite(t.policy_loss), `step ${step}`).toBe(true);
      expect(t.grad_norm, `step ${step}`).toBeGreaterThan(0);
    }
  });
});
