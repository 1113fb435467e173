import { type ChildProcess, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { SampleQueue } from './queue.js';

const repoRoot = fileURLToPath(new URL('../../../../', import.meta.url));
const fixture = fileURLToPath(new URL('../__fixtures__/queue-crash.ts', import.meta.url));
const children = new Set<ChildProcess>();
afterAll(() => {
  for (const child of children) child.kill('SIGKILL');
});

interface Proc {
  child: ChildProcess;
  ready: Promise<string>;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr: () => string;
}

function start(args: string[]): Proc {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=@vime/source', fixture, ...args], {
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const ready = new Promise<string>((resolve) => {
    let stdout = '';
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
      const line = stdout.split('\n').find((l) => l.startsWith('ready'));
      if (line) resolve(line);
    });
  });
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    }),
  );
  return { child, ready, exit, stderr: () => stderr };
}

/** Deterministic delays so a failure can be replayed. */
function lcg(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1_103_515_245 + 12_345) % 2 ** 31;
    return s / 2 ** 31;
  };
}

describe('SampleQueue under SIGKILL', () => {
  it('delivers every completed record exactly once while producer and consumer are killed repeatedly', async () => {
    const n = 320;
    const dir = await mkdtemp(join(tmpdir(), 'vime-queue-crash-'));
    const out = join(dir, 'out');
    const queueDir = join(dir, 'queue');
    await mkdir(out);
    const random = lcg(20_251_130);

    const tornAt = [40, 130, 220];
    const spawnRole = (role: 'producer' | 'consumer') =>
      start(
        role === 'producer'
          ? [role, queueDir, String(n), tornAt.join(',')]
          : [role, queueDir, String(n), out],
      );
    const kills = { producer: 0, consumer: 0 };
    const tornTails: number[] = [];

    // Run each side until it finishes. Five times per side it is SIGKILLed at a random moment and
    // restarted; the producer also kills itself in the middle of three writes (see the fixture).
    const supervise = async (role: 'producer' | 'consumer') => {
      let external = 0;
      for (;;) {
        const proc = spawnRole(role);
        const ready = await Promise.race([proc.ready, proc.exit.then(() => undefined)]);
        if (ready && role === 'producer') tornTails.push(Number(ready.split(' ')[1]));
        const killer =
          external < 5
            ? setTimeout(
                () => {
                  external++;
                  proc.child.kill('SIGKILL');
                },
                30 + random() * 220,
              )
            : undefined;
        const { code, signal } = await proc.exit;
        clearTimeout(killer);
        if (signal === 'SIGKILL') {
          kills[role]++;
          continue;
        }
        expect({ code, signal }, proc.stderr()).toEqual({ code: 0, signal: null });
        return;
      }
    };
    await Promise.all([supervise('producer'), supervise('consumer')]);
    expect(kills.producer).toBeGreaterThanOrEqual(3 + tornAt.length);
    expect(kills.consumer).toBeGreaterThanOrEqual(3);
    // Every self-inflicted torn write was found and cut off by the next producer.
    expect(tornTails.filter((bytes) => bytes > 0).length).toBeGreaterThanOrEqual(tornAt.length);

    // The consumer's committed batches chain from seq 1 to n, and hold every key exactly once, intact.
    const batches = await Promise.all(
      (await readdir(out))
        .filter((f) => f.endsWith('.json'))
        .map(async (f) => JSON.parse(await readFile(join(out, f), 'utf8'))),
    );
    batches.sort((a, b) => a.from - b.from);
    let position = 1;
    const keys: string[] = [];
    for (const batch of batches) {
      expect(batch.from).toBe(position);
      position = batch.next;
      for (const record of batch.records) {
        expect(record.intact, `record ${record.key}`).toBe(true);
        keys.push(record.key);
      }
    }
    expect(position).toBe(n + 1);
    expect(keys).toHaveLength(n);
    expect(new Set(keys)).toEqual(new Set(Array.from({ length: n }, (_, i) => `r${i}`)));

    // The queue agrees: nothing beyond n records, all consumed, consumed segments collected.
    const queue = await SampleQueue.open(queueDir);
    expect(queue.nextSeq).toBe(n + 1);
    expect(queue.committed).toBe(n + 1);
    for (let i = 0; i < n; i++) expect(queue.has(`r${i}`)).toBe(true);
    expect((await readdir(queueDir)).filter((f) => f.endsWith('.seg'))).toHaveLength(1);
    await queue.close();
    await rm(dir, { recursive: true, force: true });
  }, 180_000);
});
