import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { QueueError } from './format.js';
import { acquireLock } from './lock.js';
import { SampleQueue } from './queue.js';

const repoRoot = fileURLToPath(new URL('../../../../', import.meta.url));
const fixture = fileURLToPath(new URL('../__fixtures__/queue-lock.ts', import.meta.url));
const children = new Set<ChildProcess>();
afterAll(() => {
  for (const child of children) child.kill('SIGKILL');
});

interface Racer {
  name: string;
  child: ChildProcess;
  lines: string[];
  /** Resolves with the first line matching `pattern`. */
  line: (pattern: RegExp) => Promise<string>;
  exit: Promise<unknown>;
}

function startRacer(dir: string, name: string, count: number, holdMs: number): Racer {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '--conditions=@vime/source', fixture, dir, name, String(count), String(holdMs)],
    { cwd: repoRoot, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  children.add(child);
  const lines: string[] = [];
  const waiters: Array<() => void> = [];
  let buffered = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => {
    buffered += d.toString();
    const parts = buffered.split('\n');
    buffered = parts.pop()!;
    lines.push(...parts);
    for (const wake of waiters.splice(0)) wake();
  });
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exit = new Promise((resolve) =>
    child.on('exit', (code, signal) => {
      children.delete(child);
      for (const wake of waiters.splice(0)) wake();
      resolve({ code, signal });
    }),
  );
  const line = async (pattern: RegExp): Promise<string> => {
    for (;;) {
      const found = lines.find((l) => pattern.test(l));
      if (found) return found;
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`${name} exited without ${pattern}: ${lines.join(' | ')} ${stderr}`);
      }
      await new Promise<void>((resolve) => waiters.push(resolve));
    }
  };
  return { name, child, lines, line, exit };
}

/** Start `n` producers, release them at once, and wait until each opened or was refused. */
async function race(dir: string, round: string, n: number, count: number, holdMs: number) {
  const racers = Array.from({ length: n }, (_, i) => startRacer(dir, `${round}p${i}`, count, holdMs));
  await Promise.all(racers.map((r) => r.line(/^ready$/)));
  for (const r of racers) r.child.stdin!.write('go\n');
  const outcomes = await Promise.all(racers.map((r) => r.line(/^(open|locked)/)));
  return { racers, winners: racers.filter((_, i) => outcomes[i] === 'open'), outcomes };
}

const acked = (racers: Racer[]) =>
  racers.flatMap((r) => r.lines.filter((l) => l.startsWith('ack ')).map((l) => l.slice(4)));

describe('producer lock', () => {
  it('lets exactly one of five racing producer processes in, whatever lock file a dead or live process left', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'vime-queue-lock-'));
    const ackedKeys: string[] = [];
    const lockFile = join(dir, 'producer.lock');

    // A producer SIGKILLed while holding the lock leaves its lock file behind (a stale lock).
    const victim = startRacer(dir, 'victim', 100_000, 60_000);
    await victim.line(/^ready$/);
    victim.child.stdin!.write('go\n');
    await victim.line(/^ack victim-3$/);
    victim.child.kill('SIGKILL');
    await victim.exit;
    ackedKeys.push(...acked([victim]));
    expect((await readFile(lockFile, 'utf8')).trim()).toBe(String(victim.child.pid));

    const rounds: Array<[string, () => Promise<void>]> = [
      ['stale lock of a SIGKILLed producer', async () => {}],
      // Process ids are reused: a live, unrelated process's pid must not lock the queue forever.
      ['lock file naming a live unrelated process', () => writeFile(lockFile, `${process.pid}\n`)],
      ['zeroed lock file', () => writeFile(lockFile, Buffer.alloc(8))],
      ['garbage lock file', () => writeFile(lockFile, 'not a pid\n')],
      ['no lock file', () => rm(lockFile)],
    ];
    for (const [i, [label, prepare]] of rounds.entries()) {
      await prepare();
      const { racers, winners, outcomes } = await race(dir, `r${i}`, 5, 6, 300);
      expect(
        winners.map((w) => w.name),
        `${label}: ${outcomes.join(', ')}`,
      ).toHaveLength(1);
      expect(
        outcomes.filter((o) => o === 'locked queue_locked'),
        label,
      ).toHaveLength(4);
      if (i === 0) {
        // Kill this round's winner while it appends: the next round must get in at once.
        await winners[0]!.line(/^ack /);
        winners[0]!.child.kill('SIGKILL');
      }
      await Promise.all(racers.map((r) => r.exit));
      ackedKeys.push(...acked(racers));
    }

    // Every acknowledged append survived, exactly once, and nothing else is in the queue.
    const queue = await SampleQueue.open(dir);
    for (const key of ackedKeys) expect(queue.has(key), key).toBe(true);
    const keys: string[] = [];
    for (;;) {
      const batch = await queue.read({ max: 1000 });
      if (batch.records.length === 0) break;
      keys.push(...batch.records.map((r) => r.key));
    }
    expect(new Set(keys).size).toBe(keys.length);
    expect(keys.length).toBe(queue.nextSeq - 1);
    for (const key of ackedKeys) expect(keys).toContain(key);
    await queue.close();
    await rm(dir, { recursive: true, force: true });
  }, 180_000);

  it('is one kernel lock whichever helper takes it (util-linux flock or perl), released on close', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'vime-queue-lock-'));
    const path = join(dir, 'x.lock');
    for (const [first, second] of [
      ['flock', 'perl'],
      ['perl', 'flock'],
    ] as const) {
      const release = await acquireLock(path, 'producer', { helper: first });
      const error = await acquireLock(path, 'producer', { helper: second }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(QueueError);
      expect((error as QueueError).code).toBe('queue_locked');
      expect((error as QueueError).message).toContain('held by this process');
      await release();
      const again = await acquireLock(path, 'producer', { helper: second });
      await again();
    }
    await rm(dir, { recursive: true, force: true });
  });
});
