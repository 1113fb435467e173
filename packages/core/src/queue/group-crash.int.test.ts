import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const repoRoot = fileURLToPath(new URL('../../../../', import.meta.url));
const fixture = fileURLToPath(new URL('../__fixtures__/queue-group-crash.ts', import.meta.url));
const trees = new Set<number>();
afterAll(() => {
  for (const pid of trees) killTree(pid);
});

function killTree(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {}
}

interface Run {
  child: ChildProcess;
  ready: Promise<void>;
  exit: Promise<number | null>;
  output: () => string;
}

/** Start the run in its own process group, so the whole tree (it and its engines) can be killed at once. */
function start(args: string[]): Run {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '--conditions=@vime/source', fixture, 'run', ...args],
    {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    },
  );
  trees.add(child.pid!);
  let output = '';
  let onReady: () => void;
  const ready = new Promise<void>((resolve) => {
    onReady = resolve;
  });
  child.stdout!.on('data', (d: Buffer) => {
    output += d.toString();
    if (output.includes('working\n')) onReady();
  });
  child.stderr!.on('data', (d: Buffer) => {
    output += d.toString();
  });
  const exit = new Promise<number | null>((resolve) =>
    // 'close', not 'exit': every byte of its output has arrived by then.
    child.on('close', (code) => {
      resolve(code);
    }),
  );
  return { child, ready, exit, output: () => output };
}

function lcg(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1_103_515_245 + 12_345) % 2 ** 31;
    return s / 2 ** 31;
  };
}

describe('GroupQueue under SIGKILL of the whole process tree', () => {
  it('recovers a fully async run killed 20 times: every group handed off once, no reward computed twice, no stale commit', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'vime-group-crash-'));
    // 512 sibling submits: 20 kills after at most 12 submits and a few more each leave most of them to do.
    const [groups, n, steps, perStep] = [128, 4, 64, 2];
    const args = [dir, String(groups), String(n), String(steps), String(perStep)];
    const random = lcg(21);
    try {
      for (let kill = 0; kill < 20; kill++) {
        const run = start(args);
        await Promise.race([run.ready, run.exit]);
        // Anywhere in the work (leases, engine calls, partials, grades, submits, hand-offs, GC): after a
        // random number of submits, then a random few milliseconds (cut short after 4 more submits, so a
        // fast machine does not finish the work between kills), so the kill lands in the work however
        // fast the machine is.
        const submits = 1 + Math.floor(random() * 12);
        const submitted = () => run.output().split('submitted\n').length - 1;
        while (submitted() < submits && run.child.exitCode === null)
          await new Promise((r) => setTimeout(r, 2));
        const jitterEnd = performance.now() + random() * 30;
        while (performance.now() < jitterEnd && submitted() < submits + 4 && run.child.exitCode === null)
          await new Promise((r) => setTimeout(r, 1));
        killTree(run.child.pid!);
        const code = await run.exit;
        trees.delete(run.child.pid!);
        // A run that finished before its kill would prove nothing: it must have died of the kill.
        expect(code, run.output()).toBeNull();
      }
      // The kills landed in the work: steps were trained before the last start.
      const trainedBefore = (await readdir(join(dir, 'trained'))).filter((f) => f.endsWith('.json')).length;
      expect(trainedBefore).toBeGreaterThan(0);
      expect(trainedBefore).toBeLessThan(steps);
      const last = start(args);
      const code = await Promise.race([
        last.exit,
        new Promise<string>((r) => setTimeout(() => r('timeout'), 240_000)),
      ]);
      trees.delete(last.child.pid!);
      expect(code, last.output()).toBe(0);
      const stats = JSON.parse(/^done (.*)$/m.exec(last.output())![1]!) as { handed: number; lost: number };
      expect(stats.handed).toBe(groups);

      // Every group handed off exactly once; every trained step unchanged across restarts.
      const trainedFiles = await readdir(join(dir, 'trained'));
      expect(trainedFiles.filter((f) => f.endsWith('.changed'))).toEqual([]);
      const handed: number[] = [];
      const handedAttempt = new Map<string, number>();
      for (let step = 1; step <= steps; step++) {
        const record = JSON.parse(await readFile(join(dir, 'trained', `${step}.json`), 'utf8')) as {
          trainerVersion: number;
          groups: Array<{ group: number; lag: number; siblings: Array<[number, number, string]> }>;
        };
        expect(record.trainerVersion).toBe(step - 1);
        for (const g of record.groups) {
          handed.push(g.group);
          expect(g.siblings).toHaveLength(n);
          for (const [slot, [attempt]] of g.siblings.entries())
            handedAttempt.set(`${g.group}/${slot}`, attempt);
        }
      }
      expect(handed.sort((a, b) => a - b)).toEqual(Array.from({ length: groups }, (_, i) => i));

      // No sibling reward computed twice: one grade per sibling.
      const grades = (await readFile(join(dir, 'grader.log'), 'utf8')).trim().split('\n');
      const gradedKeys = grades.map((l) => l.split(' ')[0]!);
      expect(gradedKeys.length).toBe(new Set(gradedKeys).size);
      expect(new Set(gradedKeys)).toEqual(new Set(handedAttempt.keys()));

      // After its receipt, no sibling is graded again, and only the attempt that held the slot committed.
      const events = (await readFile(join(dir, 'events.log'), 'utf8')).trim().split('\n');
      const receipted = new Map<string, number>();
      let calls = 0;
      for (const line of events) {
        const [kind, key, attempt] = line.split(' ') as [string, string, string];
        if (kind === 'call') {
          calls++;
          expect(receipted.has(key), `${key} graded after its receipt`).toBe(false);
        } else if (kind === 'receipt') {
          expect(receipted.get(key) ?? Number(attempt), `${key} committed by two attempts`).toBe(
            Number(attempt),
          );
          receipted.set(key, Number(attempt));
          expect(handedAttempt.get(key)).toBe(Number(attempt));
        }
      }
      expect(calls).toBeGreaterThanOrEqual(groups * n);

      // After GC the queue is small.
      const files = await readdir(join(dir, 'queue'));
      let bytes = 0;
      for (const f of files) bytes += (await stat(join(dir, 'queue', f))).size;
      expect(files.length).toBeLessThan(64);
      expect(bytes).toBeLessThan(8 << 20);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 600_000);
});
