import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeSamples } from '@vime/core';
import { afterAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../../', import.meta.url));
const NODE_ARGS = ['--import', 'tsx', '--conditions=@vime/source'];
const CLI = 'packages/loop/src/cli.ts';
const trees = new Set<number>();
afterAll(() => {
  for (const pid of trees) killTree(pid);
});

function killTree(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {}
}

function lcg(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1_103_515_245 + 12_345) % 2 ** 31;
    return s / 2 ** 31;
  };
}

/** The CLI in its own process group (it, its stand-in engines and sandboxes die together). */
function start(args: string[]): { child: ChildProcess; exit: Promise<number | null>; output: () => string } {
  const child = spawn(process.execPath, [...NODE_ARGS, CLI, ...args], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  trees.add(child.pid!);
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d));
  child.stderr!.on('data', (d: Buffer) => (output += d));
  const exit = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, exit, output: () => output };
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('the coding-agent loop under SIGKILL of the whole process tree', () => {
  it('resumes an async run SIGKILLed 20 times from the same folder: each group handed off once, each sibling graded once after its receipt, trained steps unchanged, the queue small', {
    timeout: 900_000,
  }, async () => {
    const tmp = await mkdtemp(join(tmpdir(), 'vime-ca-crash-'));
    const out = join(tmp, 'run');
    const [steps, prompts, samples] = [8, 3, 2];
    const flags = ['--steps', `${steps}`, '--prompts', `${prompts}`, '--samples', `${samples}`];
    const common = [
      ...flags,
      '--engines',
      '2',
      '--concurrency',
      '2',
      '--mode',
      'async',
      '--no-validate',
      '--quiet',
    ];
    const random = lcg(6);
    const seen = new Map<string, string>();
    const snapshotSteps = async () => {
      for (const name of await readdir(join(out, 'steps')).catch(() => [] as string[])) {
        const hash = sha(await readFile(join(out, 'steps', name)));
        const before = seen.get(name);
        // A step handed off is final: a restart never rewrites it differently.
        expect(before ?? hash, `${name} changed across a restart`).toBe(hash);
        seen.set(name, hash);
      }
    };
    try {
      // A rollout's metrics line is written once its sibling is receipted (a resumed run appends).
      const rolloutLines = async () =>
        (await readFile(join(out, 'metrics.jsonl'), 'utf8').catch(() => '')).split('"kind":"rollout"')
          .length - 1;
      let kills = 0;
      let starts = 0;
      for (let kill = 0; kill < 20; kill++) {
        const before = await rolloutLines();
        starts++;
        const run = start(kill === 0 ? ['--out', out, ...common] : ['--resume', out, '--quiet']);
        // Into the work, after this start made progress (a sibling receipted), then a random 0–0.5 s:
        // setup, agent turns, grades, submits, hand-offs, GC.
        while ((await rolloutLines()) <= before && run.child.exitCode === null)
          await new Promise((r) => setTimeout(r, 50));
        await new Promise((r) => setTimeout(r, random() * 500));
        killTree(run.child.pid!);
        if ((await run.exit) === null) kills++;
        trees.delete(run.child.pid!);
        await snapshotSteps();
        if (existsSync(join(out, 'report.json'))) break; // finished before its kill: nothing left to do
      }
      // Twenty kills, each into work still to do (a run that finished before its kill proves nothing).
      expect(kills).toBe(20);
      const last = start(['--resume', out, '--quiet']);
      const code = await last.exit;
      trees.delete(last.child.pid!);
      expect(code, last.output().slice(-3000)).toBe(0);
      await snapshotSteps();
      // metrics.jsonl keeps what every start wrote: a run line each.
      const metrics = await readFile(join(out, 'metrics.jsonl'), 'utf8');
      expect(metrics.split('"kind":"run"').length - 1).toBe(starts + 1);
      // What the killed starts receipted was taken from the queue, not run again.
      const resumed = Number(/resumed: (\d+) completed rollouts/.exec(last.output())?.[1] ?? 0);
      expect(resumed).toBeGreaterThanOrEqual(Math.min(kills, steps * prompts * samples));

      const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
      const units = report.work_units as Record<string, number>;
      const ids = new Set<number>();
      let handedGroups = 0;
      for (let step = 1; step <= steps; step++) {
        const rows = decodeSamples(await readFile(join(out, 'steps', `${step}.msgpack`)));
        const byGroup = new Map<number, Set<number>>();
        for (const row of rows) {
          const g = row.group_index!;
          expect(Math.floor(g / prompts) + 1, `group ${g} trained in step ${step}`).toBe(step);
          byGroup.set(g, (byGroup.get(g) ?? new Set()).add(row.rollout_id!));
          expect(row.metadata.staleness).toMatchObject({ trainer_version: 0, lag: 0 });
        }
        // Only complete groups, each sibling once, no rollout in two steps.
        for (const siblings of byGroup.values()) {
          expect(siblings.size).toBe(samples);
          for (const id of siblings) {
            expect(ids.has(id), `rollout ${id} trained twice`).toBe(false);
            ids.add(id);
          }
        }
        handedGroups += byGroup.size;
        const results = JSON.parse(
          await readFile(join(out, 'steps', `${step}.results.json`), 'utf8'),
        ) as Array<{ rolloutId: number }>;
        expect(new Set(results.map((r) => r.rolloutId)).size).toBe(prompts * samples);
      }
      // Grader calls: each trained sibling graded exactly once under the attempt that was receipted, and
      // never again after it; only a grade killed before its receipt was computed again (a new attempt).
      const grades = (await readFile(join(out, 'grades.jsonl'), 'utf8'))
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l) as { rollout_id: number; attempt: number });
      for (let step = 1; step <= steps; step++) {
        for (const row of decodeSamples(await readFile(join(out, 'steps', `${step}.msgpack`)))) {
          const receipted = (row.metadata.staleness as { attempt: number }).attempt;
          const mine = grades.filter((g) => g.rollout_id === row.rollout_id);
          expect(
            mine.filter((g) => g.attempt === receipted),
            `rollout ${row.rollout_id}`,
          ).toHaveLength(1);
          expect(
            mine.every((g) => g.attempt <= receipted),
            `rollout ${row.rollout_id}`,
          ).toBe(true);
        }
      }
      expect(grades.length).toBeLessThanOrEqual(steps * prompts * samples + kills * 2);

      // Every group handed off exactly once, or dropped and counted.
      expect(units.created).toBe(steps * prompts);
      expect(units.handed).toBe(handedGroups);
      const dropped = Object.entries(units)
        .filter(([k]) => k.startsWith('dropped: '))
        .reduce((a, [, n]) => a + n, 0);
      expect((units.handed ?? 0) + dropped).toBe(units.created);
      // After GC the queue is small.
      const files = await readdir(join(out, 'queue'));
      let bytes = 0;
      for (const f of files) bytes += (await stat(join(out, 'queue', f))).size;
      expect(files.length).toBeLessThan(64);
      expect(bytes).toBeLessThan(8 << 20);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  });
});
