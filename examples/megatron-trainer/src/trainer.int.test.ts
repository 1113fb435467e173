import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeSamples, encodeSamples } from '@vime/core';
import { torchPythonOrSkip } from '@vime/core/testing';
import {
  checkAgainstTrainer,
  grpoAdvantages,
  type RolloutDump,
  readRolloutDump,
  readTrainDump,
  type TrainDump,
} from '@vime/grpo';
import { afterAll, describe, expect, it } from 'vitest';
import { makeDemoBatch } from './batch.js';

const example = fileURLToPath(new URL('..', import.meta.url));
const repo = fileURLToPath(new URL('../../..', import.meta.url));
const evidence = join(example, 'evidence');
const goldenDumps = fileURLToPath(new URL('../../../golden/trainer-dumps/', import.meta.url));
const STEPS = [0, 1, 2, 3, 4];

const bytes = (path: string) => new Uint8Array(readFileSync(path));
const rolloutDump = (dir: string, id: number): RolloutDump =>
  readRolloutDump(bytes(join(dir, 'rollout_data', `${id}.pt`)));
const trainDump = (dir: string, id: number): TrainDump =>
  readTrainDump(bytes(join(dir, 'train_data', `${id}.pt`)));

/** The shape of a value as the reader hands it over: its kind and, for objects, its keys in order. */
function shape(value: unknown, depth = Number.POSITIVE_INFINITY): unknown {
  if (Array.isArray(value))
    return depth > 0 && value.length > 0 ? ['array', shape(value[0], depth - 1)] : 'array';
  if (ArrayBuffer.isView(value)) return value.constructor.name;
  if (value !== null && typeof value === 'object') {
    if (depth <= 0) return 'object';
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, shape(v, depth - 1)]));
  }
  return value === null ? 'null' : typeof value;
}

function vimeGrpo(args: string[]) {
  const result = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--conditions=@vime/source', join(repo, 'packages/grpo/src/cli.ts'), ...args],
    { cwd: repo, encoding: 'utf8' },
  );
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}
const scratch = mkdtempSync(join(tmpdir(), 'vime-megatron-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

// The trainer is the project's Python distribution (python/ at the repository root), as the README runs it.
const pythonPath = [join(repo, 'python', 'src'), process.env.PYTHONPATH].filter(Boolean).join(delimiter);

function runPython(python: string, args: string[], input?: string) {
  const result = spawnSync(python, args, {
    cwd: example,
    encoding: 'utf8',
    input,
    env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', PYTHONPATH: pythonPath },
  });
  return { status: result.status, stdout: result.stdout, output: `${result.stdout}${result.stderr}` };
}

// Its pytest suite runs with the project's (scripts/python.int.test.ts); here the trainer meets the SDK.
describe('the trainer’s Python side on CPU (batch reader, group normalisation, packing, loss, dumps)', () => {
  const python = torchPythonOrSkip();
  if (!python) return;

  it('reads a batch written by encodeSamples and rejects a corrupted one by sample and field', () => {
    const samples = makeDemoBatch({
      seed: 7,
      groups: [
        [1, 0, 1, 0, 0, 0],
        [0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
      ],
    });
    const path = join(scratch, 'six.msgpack');
    writeFileSync(path, encodeSamples(samples));
    const out = join(scratch, 'six');
    const ok = runPython(python, ['-m', 'vime_megatron.dry_run', '--batch', path, '--out', out]);
    expect(ok.status, ok.output).toBe(0);
    expect(ok.output).toContain('for 12 samples');
    // The Python side normalised the rewards itself; the SDK must agree token for token.
    const report = checkAgainstTrainer({ rolloutDump: rolloutDump(out, 0), trainDump: trainDump(out, 0) });
    expect(report.verdict).toBe('match');
    expect(report.summary.bitExactTokens).toBe(report.summary.tokens);
    expect(
      checkAgainstTrainer({ trainDump: trainDump(out, 0) }, { preset: 'drGrpo', groupSize: 6 }).verdict,
    ).toBe('mismatch');

    const broken = samples.map((s) => ({ ...s }));
    broken[5]!.reward = null;
    broken[5]!.status = 'failed';
    const badPath = join(scratch, 'broken.msgpack');
    writeFileSync(badPath, encodeSamples(broken));
    const bad = runPython(python, ['-m', 'vime_megatron.dry_run', '--batch', badPath, '--out', out]);
    expect(bad.status).toBe(2);
    expect(bad.output).not.toContain('Traceback');
    expect(bad.output).toContain("sample [5].reward: missing (status 'failed')");
  });
  it('runs the loop trainer (plain torch) on an encodeSamples batch; its dumps pass vime-grpo check', {
    timeout: 300_000,
  }, () => {
    const tiny = join(scratch, 'tiny');
    const init = runPython(python, ['-m', 'vime_policy.init', '--preset', 'tiny', '--out', tiny]);
    expect(init.status, init.output).toBe(0);
    const batch = join(scratch, 'loop-1.msgpack');
    writeFileSync(batch, encodeSamples(makeDemoBatch({ seed: 3 })));
    const out = join(scratch, 'loop');
    const run = runPython(
      python,
      [
        '-m',
        'vime_megatron.loop_trainer',
        '--backend',
        'torch',
        '--device',
        'cpu',
        '--model-path',
        tiny,
        '--out',
        out,
      ],
      `${JSON.stringify({ step: 1, batch })}\n`,
    );
    expect(run.status, run.output).toBe(0);
    const events = run.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(events.map((e) => e.event)).toEqual(['ready', 'step']);
    expect(events[0]).toMatchObject({ backend: 'torch', label: 'plain torch', weight_version: '0' });
    expect(events[1]).toMatchObject({
      step: 1,
      weight_version: '1',
      checkpoint: join(out, 'weights', 'step-1'),
    });
    const dumps = { rolloutDump: rolloutDump(out, 1), trainDump: trainDump(out, 1) };
    const report = checkAgainstTrainer(dumps, { preset: 'slime' });
    expect(report.verdict).toBe('match');
    expect(report.summary.bitExactTokens).toBe(report.summary.tokens);
    const cli = vimeGrpo([
      'check',
      join(out, 'rollout_data', '1.pt'),
      join(out, 'train_data', '1.pt'),
      '--preset',
      'slime',
    ]);
    expect(cli.status, cli.output).toBe(0);
  });
});

describe('the committed H200 run (evidence/)', () => {
  const batch = decodeSamples(bytes(join(evidence, 'batch.msgpack')));
  const metrics = JSON.parse(readFileSync(join(evidence, 'h200', 'metrics.json'), 'utf8'));

  it('trained on the batch that makeDemoBatch() and encodeSamples produce', () => {
    expect(encodeSamples(makeDemoBatch())).toEqual(bytes(join(evidence, 'batch.msgpack')));
  });

  it('wrote dumps that @vime/grpo reads exactly as it reads slime’s own', () => {
    const ours = {
      rollout: rolloutDump(join(evidence, 'h200'), 0),
      train: trainDump(join(evidence, 'h200'), 0),
    };
    for (const slimeDir of ['grpo_binary', 'cuda/grpo_binary']) {
      const dir = join(goldenDumps, slimeDir);
      const theirs = { rollout: rolloutDump(dir, 3), train: trainDump(dir, 3) };
      expect(shape(ours.train)).toEqual(shape(theirs.train));
      // Rollout samples carry free-form content (label, prompt, metadata): compare the field names in
      // order, and the kinds of the per-token and reward fields.
      const [a, b] = [ours.rollout.samples[0]!, theirs.rollout.samples[0]!];
      expect(Object.keys(a)).toEqual(Object.keys(b));
      for (const key of ['tokens', 'response_length', 'reward', 'loss_mask', 'rollout_log_probs', 'status']) {
        expect(shape(a[key]), key).toEqual(shape(b[key]));
      }
      expect(Object.keys(ours.rollout)).toEqual(Object.keys(theirs.rollout));
    }
  });

  it('trained on the Vime batch: same samples, tokens and raw rewards', () => {
    for (const step of STEPS) {
      const dump = trainDump(join(evidence, 'h200'), step);
      expect(dump.rollout_id).toBe(step);
      expect(dump.raw_reward).toEqual(batch.map((s) => s.reward));
      dump.samples.forEach((s, i) => {
        expect(s.rollout_position).toBe(i);
        expect(Array.from(s.tokens!)).toEqual(Array.from(batch[i]!.tokens));
        expect(Array.from(s.loss_masks)).toEqual(Array.from(batch[i]!.loss_mask!));
        expect(Array.from(s.rollout_log_probs!)).toEqual(Array.from(batch[i]!.rollout_log_probs!));
      });
    }
  });

  it('agrees with the SDK’s advantages at every step, bit for bit, and a wrong preset is flagged', () => {
    const sdk = grpoAdvantages(
      batch.map((s) => s.reward as number),
      { preset: 'slime', groups: batch.map((s) => s.group_index!) },
    );
    for (const step of STEPS) {
      const dumps = {
        rolloutDump: rolloutDump(join(evidence, 'h200'), step),
        trainDump: trainDump(join(evidence, 'h200'), step),
      };
      const report = checkAgainstTrainer(dumps, { preset: 'slime' });
      expect(report.verdict).toBe('match');
      expect(report.summary.bitExactTokens).toBe(report.summary.tokens);
      for (const [i, s] of dumps.trainDump.samples.entries())
        expect(s.advantages.every((a) => a === sdk[i])).toBe(true);
      for (const preset of ['drGrpo', 'verl'] as const) {
        expect(checkAgainstTrainer(dumps, { preset }).verdict).toBe('mismatch');
      }
    }
    const train = join(evidence, 'h200', 'train_data', '0.pt');
    const rollout = join(evidence, 'h200', 'rollout_data', '0.pt');
    const right = vimeGrpo(['check', rollout, train, '--preset', 'slime']);
    expect(right.status, right.output).toBe(0);
    const wrong = vimeGrpo(['check', rollout, train, '--preset', 'drGrpo']);
    expect(wrong.status, wrong.output).toBe(3);
    expect(wrong.output).toContain('MISMATCH');
  });

  it('changed the parameters at every step and moved log p with the sign of the advantage', () => {
    expect(metrics.steps.length).toBeGreaterThanOrEqual(3);
    for (const step of metrics.steps) {
      expect(step.update_successful).toBe(true);
      expect(step.param_delta_l2).toBeGreaterThan(0);
    }
    // From the dumps themselves: the trainer's log p before step 0 and before the last step.
    const first = trainDump(join(evidence, 'h200'), STEPS[0]!);
    const last = trainDump(join(evidence, 'h200'), STEPS.at(-1)!);
    const moved = { positive: [] as number[], negative: [] as number[] };
    first.samples.forEach((s, i) => {
      const after = last.samples[i]!.log_probs!;
      s.log_probs!.forEach((before, t) => {
        if (s.loss_masks[t] !== 1 || s.rewards === 0) return;
        moved[s.rewards > 0 ? 'positive' : 'negative'].push(after[t]! - before);
      });
    });
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    expect(moved.positive.length).toBeGreaterThan(100);
    expect(moved.negative.length).toBeGreaterThan(100);
    expect(mean(moved.positive)).toBeGreaterThan(0.1);
    expect(mean(moved.negative)).toBeLessThan(-0.1);
    expect(metrics.log_prob_movement.positive.mean_delta_log_prob).toBeGreaterThan(0);
    expect(metrics.log_prob_movement.negative.mean_delta_log_prob).toBeLessThan(0);
  });
});
