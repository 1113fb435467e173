/**
 * The main job stopped by a signal, as a cluster or a person stops it: SIGTERM to its process (a scheduler),
 * SIGINT to its process group (Ctrl-C), during the start and mid-run. It ends with one line saying where the
 * finished work is and the shell's exit code for the signal, never a stack trace, and `--resume` goes on.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../../', import.meta.url));
const NODE_ARGS = ['--import', 'tsx', '--conditions=@vime/source'];
const CLI = 'packages/loop/src/cli.ts';
const ARGS = ['--steps', '2', '--prompts', '4', '--samples', '2', '--concurrency', '2', '--quiet'];

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'vime-coding-agent-stop-'));
  chmodSync(tmp, 0o755); // the sandbox user enters the sandboxes' folders (mkdtemp makes 0700)
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Start the CLI in a process group of its own, with its sandboxes in a temp folder of its own. */
function start(out: string, name: string, extra: string[] = ARGS) {
  const ownTmp = join(tmp, `${name}-tmp`);
  mkdirSync(ownTmp, { recursive: true, mode: 0o755 });
  const child: ChildProcess = spawn(process.execPath, [...NODE_ARGS, CLI, '--out', out, ...extra], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    env: { ...process.env, TMPDIR: ownTmp },
  });
  const run = { child, stdout: '', stderr: '' };
  child.stdout!.on('data', (d) => (run.stdout += d));
  child.stderr!.on('data', (d) => (run.stderr += d));
  const ended = new Promise<Ended>((resolve) => {
    const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 300_000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: run.stdout, stderr: run.stderr });
    });
  });
  return { run, ended, ownTmp };
}

async function until(ready: () => boolean | Promise<boolean>, what: string, ms = 240_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ready())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A rollout of the run was recorded (its metrics line is written once the queue has it). */
const rolloutRecorded = async (out: string) =>
  (await readFile(join(out, 'metrics.jsonl'), 'utf8').catch(() => ''))
    .split('\n')
    .some((line) => line.includes('"kind":"rollout"'));

/** One line on stderr, naming the signal; no stack trace. */
function expectOneLine(ended: Ended, signal: 'SIGINT' | 'SIGTERM'): string {
  const lines = ended.stderr.split('\n').filter((l) => l.trim() !== '');
  expect(lines, ended.stderr).toHaveLength(1);
  expect(ended.stderr).not.toMatch(/\n\s+at /);
  expect(lines[0]).toMatch(new RegExp(`^vime-loop: stopped by ${signal}`));
  expect(ended.signal).toBeNull();
  expect(ended.code).toBe(signal === 'SIGINT' ? 130 : 143);
  return lines[0]!;
}

describe('coding-agent stopped by a signal', () => {
  it.each([
    ['SIGTERM to its process', 'SIGTERM', false],
    ['SIGINT to its process group (Ctrl-C)', 'SIGINT', true],
  ] as const)(
    'mid-run, %s: one line naming the folder that keeps the work, and --resume finishes the run',
    { timeout: 600_000 },
    async (_, signal, group) => {
      const out = join(tmp, `mid-${signal}`);
      const { run, ended } = start(out, `mid-${signal}`);
      await until(() => rolloutRecorded(out), 'a recorded rollout');
      process.kill(group ? -run.child.pid! : run.child.pid!, signal);
      const stopped = await ended;
      const line = expectOneLine(stopped, signal);
      expect(line).toContain(`kept in ${out}: \`--resume ${out}\``);
      const resumed = start(out, `mid-${signal}`, ['--resume', out, '--quiet']);
      const done = await resumed.ended;
      expect(done.code, done.stderr.slice(-3000)).toBe(0);
      expect(Number(/resumed: (\d+) completed rollouts/.exec(done.stdout)?.[1] ?? 0)).toBeGreaterThanOrEqual(
        1,
      );
      // nothing the stop cut short was lost: every rollout of both steps was graded, none dropped
      for (const step of [1, 2]) {
        const results = JSON.parse(
          await readFile(join(out, 'steps', `${step}.results.json`), 'utf8'),
        ) as Array<{
          rolloutId: number;
          status: string;
        }>;
        expect(results.map((r) => r.rolloutId).sort((a, b) => a - b)).toEqual(
          Array.from({ length: 8 }, (_, i) => (step - 1) * 8 + i),
        );
        expect(results.filter((r) => r.status !== 'completed' && r.status !== 'truncated')).toEqual([]);
      }
    },
  );

  it('during the start, SIGTERM: one line, and no run folder left when the run had not begun', {
    timeout: 600_000,
  }, async () => {
    const out = join(tmp, 'start');
    const { run, ended } = start(out, 'start');
    // the handlers are set before anything else is done; stop while the task set and pools get ready
    await until(() => run.stdout.length > 0 || existsSync(out), 'the start');
    process.kill(run.child.pid!, 'SIGTERM');
    const stopped = await ended;
    const line = expectOneLine(stopped, 'SIGTERM');
    if (line.includes('had not started')) expect(existsSync(out)).toBe(false);
    else expect(existsSync(join(out, 'config.json'))).toBe(true);
  });
});
