import { describe, expect, it } from 'vitest';
import { main } from './main.js';

describe('vime plan --simulate', () => {
  const run = async (args: string[]) => {
    let stdout = '';
    let stderr = '';
    const code = await main(args, {
      stdout: (t) => (stdout += t),
      stderr: (t) => (stderr += t),
      env: {},
      cwd: process.cwd(),
    });
    return { code, stdout, stderr };
  };

  it('prints the curve for the plan and the answer for a target step', async () => {
    const r = await run([
      'plan',
      '--simulate',
      '--engines',
      '2',
      '--mode',
      'sync',
      '--max-engines',
      '3',
      '--target-step',
      '20m',
    ]);
    expect(r.stdout).toMatch(
      /Simulation \(sync, 184 rollouts per step\), fitted on reference sync_1eng, reference async_1eng/,
    );
    expect(r.stdout).toMatch(/^\s+2\s+\d+\s+\d+\s+\d+\s+\d+ <- plan$/m);
    expect(r.stdout).toMatch(/target 1200 s: 2 engine\(s\)/);
    const json = await run(['plan', '--simulate', '--json', '--max-engines', '3']);
    const out = JSON.parse(json.stdout);
    expect(out.simulation.curve.points).toHaveLength(3);
    expect(out.simulation.fit.sources.decodeTokensPerSec).toBe('fitted');
  });

  it('refuses simulation flags without --simulate and records it cannot fit', async () => {
    const lone = await run(['plan', '--from', 'x.json']);
    expect(lone.code).toBe(2);
    expect(lone.stderr).toMatch(/--from needs --simulate/);
    const missing = await run(['plan', '--simulate', '--from', '/nonexistent/report.json']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--from \/nonexistent\/report\.json: cannot read it/);
    expect(missing.stderr).not.toMatch(/\n\s+at /);
  });
});
