/**
 * `vime-grpo check --preset auto` on dumps whose advantages another trainer's pinned code computed (one
 * per convention, golden/convention-dumps), and on the real slime dumps.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { conventionDumps, dumpsGolden } from '../__fixtures__/golden.js';
import { main } from '../command.js';
import type { CheckReport } from './check.js';

/** The flags each convention dump must be named by (the trainer configuration that produced it). */
const EXPECTED: Record<string, string> = {
  verl_grpo: '--preset verl',
  verl_grpo_no_std: '--preset verl --no-std-normalization',
  verl_grpo_vectorized: '--preset verlVectorized',
  verl_grpo_passk: '--estimator verl:grpo_passk',
  verl_rloo: '--estimator verl:rloo',
  verl_rloo_vectorized: '--estimator verl:rloo_vectorized',
  verl_opo: '--estimator verl:opo',
  verl_gpg: '--estimator verl:gpg',
  verl_reinforce_plus_plus_baseline: '--estimator verl:reinforce_plus_plus_baseline',
  verl_reinforce_plus_plus: '--estimator verl:reinforce_plus_plus',
  verl_remax: '--estimator verl:remax',
  verl_gae: '--estimator verl:gae',
  trl_group: '--preset trl',
  trl_batch: '--preset trl --scale batch',
  trl_none: '--preset trl --scale none',
  openrlhf_group_norm: '--preset openrlhf',
  openrlhf_dr_grpo: '--preset openrlhf --no-std-normalization',
  openrlhf_rloo: '--estimator openrlhf:rloo',
  openrlhf_reinforce_baseline: '--estimator openrlhf:reinforce_baseline',
  openrlhf_reinforce: '--estimator openrlhf:reinforce',
  openrlhf_gae: '--estimator openrlhf:gae',
};

async function run(...argv: string[]) {
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
}

const files = (dir: string, id: number) => [`${dir}rollout_data/${id}.pt`, `${dir}train_data/${id}.pt`];

/** The matches that are exactly as good as the best one (the dump cannot tell them apart). */
function tiedBest(report: CheckReport) {
  const [best] = report.auto!.matches;
  return report.auto!.matches.filter(
    (m) => m.bitExactTokens === best!.bitExactTokens && m.maxAbsError === best!.maxAbsError,
  );
}

describe('check --preset auto names the convention that produced a dump', () => {
  const manifest = JSON.parse(readFileSync(`${conventionDumps}manifest.json`, 'utf8')) as {
    cases: Record<string, { source: string }>;
  };

  it('has an expectation for every convention dump', () => {
    expect(Object.keys(manifest.cases).sort()).toEqual(Object.keys(EXPECTED).sort());
  });

  for (const [name, flags] of Object.entries(EXPECTED)) {
    it(`${name} (${manifest.cases[name]?.source.split(':')[0]})`, async () => {
      const dumps = files(`${conventionDumps}${name}/`, 7);
      const auto = await run('check', ...dumps, '--preset', 'auto', '--json');
      expect(auto.code, auto.stderr).toBe(0);
      const report = JSON.parse(auto.stdout) as CheckReport;
      expect(report.verdict).toBe('match');
      const best = tiedBest(report);
      expect(
        best.map((m) => m.flags),
        name,
      ).toContain(flags);
      // Every best match is bit-exact on every token.
      for (const m of best) expect(m.bitExactTokens, m.name).toBe(m.tokens);
      // Only conventions with identical math tie (slime's Dr.GRPO and TRL's scale_rewards="none").
      expect(best.length, best.map((m) => m.name).join(', ')).toBe(name === 'trl_none' ? 2 : 1);
      // The named flags reproduce it on their own; slime's default does not, and its hint says what does.
      const named = await run('check', ...dumps, ...flags.split(' '));
      expect(named.code, named.stdout).toBe(0);
      const slime = await run('check', ...dumps);
      expect(slime.code).toBe(3);
      expect(slime.stdout).toContain(`pass ${flags}`);
    });
  }

  it('names slime on real slime dumps (CPU and H200)', async () => {
    for (const dir of ['', 'cuda/']) {
      const r = await run(
        'check',
        ...files(`${dumpsGolden}${dir}grpo_binary/`, 3),
        '--preset',
        'auto',
        '--json',
      );
      const report = JSON.parse(r.stdout) as CheckReport;
      expect(tiedBest(report).map((m) => m.flags)).toEqual(['--preset slime']);
      expect(report.preset).toBe('slime');
    }
  });

  it("names slime's Dr.GRPO on a real slime Dr.GRPO dump, with the conventions it cannot tell apart", async () => {
    const train = `${dumpsGolden}drgrpo_continuous/train_data/5.pt`;
    const r = await run('check', train, '--group-size', '4', '--preset', 'auto');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/1\. +preset 'drGrpo'/);
    expect(r.stdout).toMatch(/the first 3 give identical values on this batch/);
    expect(r.stdout).toMatch(/verdict: MATCH as preset 'drGrpo'/);
  });

  it('reports the closest convention when none reproduces the trainer, exit 1', async () => {
    // A dump whose advantages were scaled by 2 after the fact: no trainer does that.
    const { readTrainDump, readRolloutDump, checkAgainstTrainer } = await import('../index.js');
    const [rollout, train] = files(`${conventionDumps}verl_grpo/`, 7);
    const trainDump = readTrainDump(new Uint8Array(readFileSync(train!)));
    for (const s of trainDump.samples) s.advantages = s.advantages.map((a) => a * 2);
    const report = checkAgainstTrainer(
      { rolloutDump: readRolloutDump(new Uint8Array(readFileSync(rollout!))), trainDump },
      { preset: 'auto' },
    );
    expect(report.verdict).toBe('mismatch');
    expect(report.auto?.matches).toEqual([]);
    expect(report.auto?.closest).not.toBeNull();
    expect(report.hints.join('\n')).toMatch(/none of the \d+ known conventions reproduces the trainer/);
  });

  it('runs as a process', async () => {
    const cli = fileURLToPath(new URL('../cli.ts', import.meta.url));
    const exec = promisify(execFile);
    const args = ['--import', 'tsx', '--conditions=@vime/source', cli, 'check'];
    const out = await exec(process.execPath, [
      ...args,
      ...files(`${conventionDumps}trl_batch/`, 7),
      '--preset',
      'auto',
    ]);
    expect(out.stdout).toMatch(/auto: 1 of \d+ conventions reproduce the trainer/);
    expect(out.stdout).toMatch(/verdict: MATCH as preset 'trl' with scale_rewards="batch"/);
    const bad = await exec(process.execPath, [
      ...args,
      ...files(`${conventionDumps}trl_batch/`, 7),
      '--scale',
      'nope',
    ]).catch((e: { code: number; stderr: string }) => e);
    expect((bad as { code: number }).code).toBe(2);
    expect((bad as { stderr: string }).stderr).toMatch(/--scale must be group, batch or none/);
  });
});
