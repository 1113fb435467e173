/**
 * `pnpm bench fleet`'s rollout driver at a tiny N, through its command line (as the bench runs it): every
 * rollout is accounted for and nothing is left after a run; a run SIGKILLed mid-run leaves sandboxes
 * behind, and one reap through the same fleet leaves nothing. Real bubblewrap sandboxes and commands.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, describe, expect, it } from 'vitest';

const repo = join(import.meta.dirname, '..');
const driverPath = join(repo, 'bench', 'fleet-driver.ts');
const roots: string[] = [];
afterAll(() => {
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

function newRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'vime-fleet-bench-'));
  chmodSync(root, 0o755);
  roots.push(root);
  return root;
}

type Line = Record<string, unknown>;

/** Runs the driver to its end (or until `killWhen` says so, then SIGKILLs it); its JSON lines and exit. */
function runDriver(args: string[], killWhen?: (line: Line) => boolean) {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '--conditions=@vime/source', driverPath, ...args],
    {
      cwd: repo,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const lines: Line[] = [];
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  createInterface({ input: child.stdout }).on('line', (l) => {
    if (!l.startsWith('{')) return;
    const line = JSON.parse(l) as Line;
    lines.push(line);
    if (killWhen?.(line)) child.kill('SIGKILL');
  });
  // A bound far above what 8 rollouts take, so a hung driver fails the test with what it printed.
  const bound = setTimeout(() => child.kill('SIGKILL'), 25_000);
  return new Promise<{ lines: Line[]; code: number | null; signal: string | null; stderr: string }>(
    (resolve) =>
      child.once('close', (code, signal) => {
        clearTimeout(bound);
        resolve({ lines, code, signal, stderr });
      }),
  );
}

const common = (root: string, run: string) => [
  '--root',
  root,
  '--run',
  run,
  '--rollouts',
  '8',
  '--backends',
  '2',
];

describe('pnpm bench fleet: the rollout driver', () => {
  it('runs 8 rollouts on a fleet of two bubblewrap backends: each completed or counted, nothing left', async () => {
    const root = newRoot();
    const run = `fleet-int-${randomBytes(4).toString('hex')}`;
    const out = await runDriver(['drive', ...common(root, run), '--max-starting', '2']);
    const result = out.lines.find((l) => l.type === 'result') as
      | {
          completed: number;
          rewarded: number;
          failures: Record<string, number>;
          leftovers: { total: number };
          claims: { n: number };
        }
      | undefined;
    expect(
      result,
      `the driver's result line (exit ${out.code}, stderr: ${out.stderr.slice(-2000)})`,
    ).toBeDefined();
    const failed = Object.values(result!.failures).reduce((a, b) => a + b, 0);
    expect(result!.completed + failed).toBe(8);
    // Nothing here should fail: real sandboxes on this host, no fault injected.
    expect(result!.failures).toEqual({});
    expect(result!.rewarded).toBe(8);
    // An agent sandbox and a fresh grading sandbox per rollout.
    expect(result!.claims.n).toBe(16);
    expect(result!.leftovers.total).toBe(0);
    expect(out.lines.filter((l) => l.type === 'claimed')).toHaveLength(8);
  });

  it('a run SIGKILLed mid-run leaves sandboxes; one reap through the fleet leaves none', async () => {
    const root = newRoot();
    const run = `fleet-int-kill-${randomBytes(4).toString('hex')}`;
    // A model that never answers in time holds every rollout between its claim and its first command.
    const killed = await runDriver(
      ['drive', ...common(root, run), '--max-starting', '2', '--model-latency-ms', '600000'],
      (l) => l.type === 'claimed' && Number(l.claimed) === 4,
    );
    expect(killed.signal, `the driver killed after 4 claims (stderr: ${killed.stderr.slice(-2000)})`).toBe(
      'SIGKILL',
    );
    const reaped = await runDriver(['reap', ...common(root, run)]);
    const report = reaped.lines.find((l) => l.type === 'reap') as
      | {
          before: { folders: number; total: number };
          removed: number;
          errors: string[];
          after: { total: number };
        }
      | undefined;
    expect(
      report,
      `the reap's report (exit ${reaped.code}, stderr: ${reaped.stderr.slice(-2000)})`,
    ).toBeDefined();
    expect(report!.before.folders).toBeGreaterThanOrEqual(4);
    expect(report!.removed).toBeGreaterThanOrEqual(4);
    expect(report!.errors).toEqual([]);
    expect(report!.after.total).toBe(0);
  });

  it('a bad flag exits 2 naming it', async () => {
    const out = await runDriver(['drive', '--root', newRoot(), '--run', 'x', '--rollouts', '0']);
    expect(out.code).toBe(2);
    expect(out.stderr).toContain('--rollouts must be a whole number >= 1, got "0"');
    expect(out.stderr).not.toContain('    at ');
  });
});
