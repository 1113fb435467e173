import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createSample, VimeError } from '@vime/core';
import { describe, expect, it } from 'vitest';
import { dumpsGolden, loadGolden } from '../__fixtures__/golden.js';
import { main } from '../command.js';
import { grpoAdvantages } from '../estimators/advantages.js';
import { broadcastToTokens, splitTokens } from '../tokens/tokens.js';
import { checkAgainstTrainer } from './check.js';
import { readRolloutDump, readTrainDump } from './dump.js';

const bytes = (path: string) => new Uint8Array(readFileSync(`${dumpsGolden}${path}`));
const train = (dir: string, path: string) => readTrainDump(bytes(`${dir}${path}`), path);

describe('golden: checkAgainstTrainer on real slime dumps', () => {
  for (const dir of ['', 'cuda/']) {
    it(`${dir}grpo_binary: rollout + train dump agree with preset slime, bit for bit`, () => {
      const rolloutDump = readRolloutDump(bytes(`${dir}grpo_binary/rollout_data/3.pt`));
      const trainDump = train(dir, 'grpo_binary/train_data/3.pt');
      const report = checkAgainstTrainer({ rolloutDump, trainDump }, { preset: 'slime' });
      expect(report.verdict, `${dir}grpo_binary`).toBe('match');
      expect(report.rolloutId).toBe(3);
      expect(report.summary.samples).toBe(12);
      expect(report.summary.bitExactTokens).toBe(report.summary.tokens);
      expect(report.groups.map((g) => g.zeroVariance)).toEqual([false, true, false]);
      expect(report.samples.map((s) => s.rolloutPosition)).toEqual([...Array(12).keys()]);
      for (const s of report.samples)
        expect(s.reward.trainer, `${dir}grpo_binary sample ${s.row}`).toBe(s.reward.expected);
    });

    it(`${dir}drgrpo_continuous: train dump alone agrees with preset drGrpo, not slime`, () => {
      const trainDump = train(dir, 'drgrpo_continuous/train_data/5.pt');
      const ok = checkAgainstTrainer({ trainDump }, { preset: 'drGrpo', groupSize: 4 });
      expect(ok.verdict, `${dir}drgrpo_continuous`).toBe('match');
      expect(ok.summary.bitExactTokens).toBe(ok.summary.tokens);
      const wrong = checkAgainstTrainer({ trainDump }, { preset: 'slime', groupSize: 4 });
      expect(wrong.verdict).toBe('mismatch');
      expect(wrong.samples[0]!.firstMismatch?.token).toBe(0);
      expect(wrong.hints.join('\n')).toMatch(/preset 'drGrpo'/);
    });
  }

  it('names the first mismatching token of a tampered dump', () => {
    const rolloutDump = readRolloutDump(bytes('grpo_binary/rollout_data/3.pt'));
    const trainDump = train('', 'grpo_binary/train_data/3.pt');
    const sample = trainDump.samples.find((s) => s.rollout_position === 6)!;
    sample.advantages[4] = 0.125;
    const report = checkAgainstTrainer({ rolloutDump, trainDump });
    expect(report.verdict).toBe('mismatch');
    expect(report.summary.mismatchedSamples).toBe(1);
    const bad = report.samples.find((s) => !s.ok)!;
    expect(bad.rolloutPosition).toBe(6);
    expect(bad.firstMismatch).toEqual({
      token: 4,
      expected: 0,
      actual: 0.125,
      lossMask: sample.loss_masks[4],
    });
    expect(bad.maxAbsError).toBe(0.125);
  });

  it('refuses dumps of different rollouts', () => {
    const rolloutDump = readRolloutDump(bytes('grpo_binary/rollout_data/3.pt'));
    const trainDump = { ...train('', 'grpo_binary/train_data/3.pt'), rollout_id: 4 };
    expect(() => checkAgainstTrainer({ rolloutDump, trainDump })).toThrow(/rollout_id.*same rollout id/);
  });
});

describe('checkAgainstTrainer on samples + advantages', () => {
  const rewards = [1, 0, 0, 1, 1, 1, 0, 1];
  const lengths = [3, 5, 2, 4, 3, 3, 6, 2];
  const samples = rewards.map((reward, i) =>
    createSample({
      index: i,
      group_index: Math.floor(i / 4),
      reward,
      response_length: lengths[i]!,
      loss_mask: Array.from({ length: lengths[i]! }, (_, t) => (t === 1 ? 0 : 1)),
      status: 'completed',
    }),
  );

  it('matches advantages computed with the same preset', () => {
    const adv = broadcastToTokens(grpoAdvantages(rewards, { groupSize: 4 }), lengths, null);
    const report = checkAgainstTrainer(
      { samples, advantages: splitTokens(adv, lengths) },
      { preset: 'slime' },
    );
    expect(report.verdict).toBe('match');
  });

  it("spots slime's one-group fallback (fan-out rows) and says so", () => {
    const oneGroup = broadcastToTokens(grpoAdvantages(rewards, { groupSize: rewards.length }), lengths, null);
    const report = checkAgainstTrainer({ samples, advantages: splitTokens(oneGroup, lengths) });
    expect(report.verdict).toBe('mismatch');
    expect(report.hints.join('\n')).toMatch(/ONE group/);
  });

  it('verl zeroes masked tokens', () => {
    const adv = broadcastToTokens(
      grpoAdvantages(rewards, { groupSize: 4, preset: 'verl' }),
      lengths,
      samples.map((s) => s.loss_mask!),
      {
        mode: 'maskedTokens',
      },
    );
    expect(
      checkAgainstTrainer({ samples, advantages: splitTokens(adv, lengths) }, { preset: 'verl' }).verdict,
    ).toBe('match');
    const slime = checkAgainstTrainer(
      { samples, advantages: splitTokens(adv, lengths) },
      { preset: 'slime' },
    );
    expect(slime.samples.find((s) => !s.ok)?.firstMismatch?.lossMask).toBe(0);
  });

  it('rejects an unscored sample with a VimeError naming it', () => {
    const broken = samples.map((s, i) => (i === 5 ? { ...s, reward: null } : s));
    const adv = splitTokens(new Float32Array(lengths.reduce((a, b) => a + b)), lengths);
    let error: unknown;
    try {
      checkAgainstTrainer({ samples: broken, advantages: adv });
    } catch (e) {
      error = e;
    }
    expect(VimeError.isInstance(error)).toBe(true);
    expect((error as Error).message).toMatch(/samples\[5\]\.reward/);
  });
});

describe('vime-grpo check', () => {
  const run = async (...argv: string[]) => {
    let stdout = '';
    let stderr = '';
    const code = await main(argv, {
      stdout: (t: string) => {
        stdout += t;
      },
      stderr: (t: string) => {
        stderr += t;
      },
      env: {},
      cwd: process.cwd(),
    });
    return { code, stdout, stderr };
  };
  const rollout = `${dumpsGolden}grpo_binary/rollout_data/3.pt`;
  const trainPath = `${dumpsGolden}grpo_binary/train_data/3.pt`;

  it('exit 0 and a MATCH report when the trainer agrees', async () => {
    const r = await run('check', rollout, trainPath);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/verdict: MATCH/);
    expect(r.stdout).toMatch(/zero variance/);
  });

  it('exit 3 and the place of the mismatch when it does not', async () => {
    const r = await run('check', rollout, trainPath, '--preset', 'drGrpo');
    expect(r.code).toBe(3);
    expect(r.stdout).toMatch(/MISMATCH at token 0/);
    expect(r.stdout).toMatch(/hint: .*preset 'slime'/);
  });

  it('--json prints the report', async () => {
    const r = await run(
      'check',
      `${dumpsGolden}cuda/drgrpo_continuous/train_data/5.pt`,
      '--group-size',
      '4',
      '--preset',
      'drGrpo',
      '--json',
    );
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.verdict).toBe('match');
    expect(report.samples).toHaveLength(8);
  });

  it('exit 2 for unreadable or swapped inputs and bad flags', async () => {
    const missing = await run('check', `${dumpsGolden}nope.pt`, trainPath);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/cannot read .*nope\.pt: ENOENT/);
    const swapped = await run('check', trainPath, rollout);
    expect(swapped.code).toBe(2);
    expect(swapped.stderr).toMatch(/rollout dump .*pass the train_data/);
    const evil = await run(
      'check',
      rollout,
      fileURLToPath(new URL('../__fixtures__/evil.pt', import.meta.url)),
    );
    expect(evil.code).toBe(2);
    expect(evil.stderr).toMatch(/refusing pickle global/);
    expect((await run('check', rollout, trainPath, '--preset', 'nope')).code).toBe(2);
    expect((await run('check', trainPath)).stderr).toMatch(/--group-size/);
  });

  it('points mistakes at the fix: exit 2, one line naming the flag or command, no stack trace', async () => {
    const cases: Array<[string[], string]> = [
      [
        ['check', rollout, trainPath, '--presett', 'slime'],
        `Unknown option '--presett' (did you mean "--preset"?)`,
      ],
      [
        ['chekc', rollout, trainPath],
        'unknown command "chekc" (did you mean "check"?); commands: check, audit',
      ],
      [['audti', 'a', 'b'], 'unknown command "audti" (did you mean "audit"?)'],
      [
        ['check', trainPath, '--group-size', 'four'],
        '--group-size expects a positive whole number, got "four"',
      ],
      [['check', rollout, trainPath, '--atol=-1'], '--atol expects a number ≥ 0, got "-1"'],
      [['check', rollout, trainPath, '--kl-coef', 'x'], '--kl-coef expects a number, got "x"'],
      [['check', rollout, trainPath, '--preset', 'slim'], '--preset must be slime, '],
      [['check', rollout, trainPath, '--preset', 'slim'], 'got "slim" (did you mean "slime"?)'],
      [['check', rollout, trainPath, 'extra.pt'], 'unexpected argument "extra.pt"'],
    ];
    for (const [argv, message] of cases) {
      const r = await run(...argv);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/^vime-grpo: /);
      expect(r.stderr).toContain(message);
      expect(r.stderr.trimEnd().split('\n'), 'one line').toHaveLength(1);
      expect(r.stdout).toBe('');
    }
  });

  it('answers --help for the program and for each command', async () => {
    const top = await run('--help');
    expect(top.code).toBe(0);
    expect(top.stdout).toMatch(/^vime-grpo: [\s\S]*check <rollout.pt> <train.pt>[\s\S]*Exit codes:/);
    expect((await run('check', '--help')).stdout).toMatch(/^Usage: vime-grpo check/);
    expect((await run('audit', 'x', '--bogus', '-h')).stdout).toMatch(/^Usage: vime-grpo audit/);
    const none = await run();
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/Usage: vime-grpo <command>/);
  });

  it('the bin runs as a process with the documented exit status', async () => {
    const cli = fileURLToPath(new URL('../cli.ts', import.meta.url));
    const exec = promisify(execFile);
    const args = ['--import', 'tsx', '--conditions=@vime/source', cli, 'check', rollout, trainPath];
    const ok = await exec(process.execPath, args);
    expect(ok.stdout).toMatch(/verdict: MATCH/);
    const failed = await exec(process.execPath, [...args, '--preset', 'verl']).catch(
      (e: { code: number }) => e,
    );
    expect((failed as { code: number }).code).toBe(3);
  });

  it('the bin answers user errors with exit 2 and no stack trace', { timeout: 180_000 }, async () => {
    const cli = fileURLToPath(new URL('../cli.ts', import.meta.url));
    const exec = promisify(execFile);
    const dir = mkdtempSync(join(tmpdir(), 'vime-grpo-'));
    const corrupt = join(dir, 'train.pt');
    const corrupted = new Uint8Array(readFileSync(trainPath));
    corrupted[Buffer.from(corrupted).indexOf('torch._utils\n')] = 0xff; // a GLOBAL that is not UTF-8
    writeFileSync(corrupt, corrupted);
    // A bad flag and a corrupt dump through the real bin (the in-process cases above cover the rest).
    const cases = [
      ['check', rollout, trainPath, '--bogus'],
      ['check', rollout, corrupt],
    ];
    const results = await Promise.all(
      cases.map(
        (argv) =>
          exec(process.execPath, ['--import', 'tsx', '--conditions=@vime/source', cli, ...argv]).catch(
            (e: unknown) => e,
          ) as Promise<{ code: number; stderr: string }>,
      ),
    );
    rmSync(dir, { recursive: true });
    results.forEach((r, i) => {
      const what = cases[i]!.join(' ');
      expect(r.code, what).toBe(2);
      expect(r.stderr, what).toMatch(/^vime-grpo/);
      expect(r.stderr, what).not.toMatch(/\n\s+at /);
    });
  });
});

describe('float32 residual of uniform groups', () => {
  it('reproduces the trainer bit for bit and warns about it', () => {
    // What torch 1.13 CPU gives for twelve rewards of 0.7 (measured): every advantage 0.11920928955078125.
    const rewards = [...Array(12).fill(0.7), 1, 0, 0, 1];
    const groups = [...Array(12).fill(0), 1, 1, 1, 1];
    const samples = rewards.map((reward, i) =>
      createSample({
        index: i,
        group_index: groups[i]!,
        reward,
        response_length: 2,
        loss_mask: [1, 1],
        status: 'completed',
      }),
    );
    const trainer = rewards.map((_, i) =>
      new Float32Array(2).fill(
        i < 12 ? 0.11920928955078125 : i === 12 || i === 15 ? 0.8660238981246948 : -0.8660238981246948,
      ),
    );
    const report = checkAgainstTrainer({ samples, advantages: trainer }, { allowUnevenGroups: true });
    expect(report.verdict).toBe('match');
    expect(report.summary.bitExactTokens).toBe(report.summary.tokens);
    expect(report.groups[0]!.zeroVariance).toBe(true);
    expect(report.warnings).toHaveLength(1);
    expect(report.warnings[0]).toMatch(/group 0 has identical rewards .*0\.1192/);
  });
});

describe('dict rewards (slime --reward-key)', () => {
  it('picks the scalar by key and asks for the key when it is missing', () => {
    const rewards = [
      { acc: 1, fmt: 0.5 },
      { acc: 0, fmt: 0.5 },
      { acc: 0, fmt: 1 },
      { acc: 1, fmt: 0 },
    ];
    const samples = rewards.map((reward, i) =>
      createSample({
        index: i,
        group_index: 0,
        reward,
        response_length: 1,
        loss_mask: [1],
        status: 'completed',
      }),
    );
    const expected = grpoAdvantages([1, 0, 0, 1], { groupSize: 4 });
    const advantages = Array.from(expected, (a) => [a]);
    expect(checkAgainstTrainer({ samples, advantages }, { rewardKey: 'acc' }).verdict).toBe('match');
    expect(checkAgainstTrainer({ samples, advantages }, { rewardKey: 'fmt' }).verdict).toBe('mismatch');
    expect(() => checkAgainstTrainer({ samples, advantages })).toThrow(/samples\[0\]\.reward.*rewardKey/);
  });
});

describe('REINFORCE++-baseline: KL shaping and whitening', () => {
  it('recomputes the whitened advantages from a train dump (golden compute_advantages_and_returns inputs)', () => {
    const [g] = loadGolden('slime__compute_advantages_and_returns__reinforce_plus_plus_baseline');
    const i = g!.inputs as { rewards: number[]; response_lengths: number[]; loss_masks: number[][] };
    const e = g!.expected as { advantages: number[][]; returns: number[][]; kl: number[][] };
    const samples = i.rewards.map((reward, s) => ({
      data_parallel_rank: 0,
      sample_index: s,
      rollout_position: s,
      tokens: new Int32Array(i.response_lengths[s]!),
      response_lengths: i.response_lengths[s]!,
      rewards: reward,
      loss_masks: Uint8Array.from(i.loss_masks[s]!),
      advantages: Float32Array.from(e.advantages[s]!),
      returns: Float32Array.from(e.returns[s]!),
      kl: Float32Array.from(e.kl[s]!),
    }));
    // The golden rewards are already centred, so centring them again changes nothing.
    const trainDump = { format_version: 2 as const, rollout_id: 0, samples, raw_reward: i.rewards };
    const options = { estimator: 'reinforce_plus_plus_baseline' as const, groupSize: 4, klCoef: 0.05 };
    const report = checkAgainstTrainer({ trainDump }, options);
    expect(report.verdict, report.samples.map((s) => s.firstMismatch).join()).toBe('match');
    expect(checkAgainstTrainer({ trainDump }, { ...options, klCoef: 0 }).verdict).toBe('mismatch');
    const unwhitened = checkAgainstTrainer({ trainDump }, { ...options, normalizeAdvantages: false });
    expect(unwhitened.hints.join('\n')).toMatch(/--normalize-advantages/);
  });
});
