/**
 * SIGTERM, SIGINT and SIGKILL at every step of a create (bubblewrap over an overlay rootfs, a bubblewrap
 * session, a container) and of a warm pool's life: a run stopped by SIGTERM or SIGINT cleans up and exits
 * with the signal; whatever any of them leaves, one `vime-sandbox reap --run RUN` removes (folders,
 * cgroups, mounts, processes, containers), also where metadata is torn or the folder is gone.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import {
  chownSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import {
  assertReadableByOthers,
  eventually,
  exited,
  isRoot,
  type Leftovers,
  leftovers,
  nodeArgs,
  nothing,
  OTHER_UID,
  repoRoot,
  startFixture,
  userDir,
} from './__fixtures__/support.js';
import { bubblewrapProvider } from './bubblewrap/provider.js';
import { DockerEngine, defaultDockerSocket } from './docker/engine-api.js';
import { dockerForTests, rootForTests } from './testing.js';

const withDocker = dockerForTests();
const cli = fileURLToPath(new URL('./cli.ts', import.meta.url));
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** At most this many runs at once (each is a node process plus its sandboxes). */
let slots = 3;
// A concurrent test's time includes its wait for a slot; each run bounds its own steps (`reach`).
const QUEUED_TIMEOUT_MS = 300_000;
const waiting: Array<() => void> = [];
async function slot<T>(fn: () => Promise<T>): Promise<T> {
  while (slots === 0) await new Promise<void>((r) => waiting.push(r));
  slots--;
  try {
    return await fn();
  } finally {
    slots++;
    waiting.shift()?.();
  }
}

interface Run {
  run: string;
  rootDir: string;
  home: string;
  child: ChildProcess;
  out: () => string;
  /** Sandbox ids seen so far (whatever their format). */
  ids: Set<string>;
  asOther: boolean;
}

function start(
  mode: string,
  options: { asOther?: boolean | undefined; handler?: string | undefined } = {},
): Run {
  const asOther = options.asOther ?? false;
  const home = userDir('vime-signals-', asOther);
  dirs.push(home);
  const rootDir = join(home, 'root');
  const lower = join(home, 'lower');
  mkdirOwned(lower, asOther);
  const run = `sig-${mode}-${randomInt(1e9)}`;
  const child = startFixture('signal-run', [run, rootDir, mode, lower, options.handler ?? ''], {
    asOther,
    home,
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on('data', () => {});
  return { run, rootDir, home, child, out: () => out, ids: new Set(), asOther };
}

function mkdirOwned(dir: string, asOther: boolean): void {
  mkdirSync(dir, { mode: 0o755 });
  if (asOther) chownSync(dir, OTHER_UID, OTHER_UID);
}

function sandboxDirs(r: Run): string[] {
  try {
    const names = readdirSync(r.rootDir).filter((n) => n.startsWith('sbx-'));
    for (const n of names) r.ids.add(n);
    return names.map((n) => join(r.rootDir, n));
  } catch {
    return [];
  }
}

function metas(r: Run): Array<{ cgroups?: string[] | undefined }> {
  return sandboxDirs(r).flatMap((d) => {
    try {
      return [JSON.parse(readFileSync(join(d, 'meta.json'), 'utf8')) as { cgroups?: string[] | undefined }];
    } catch {
      return [];
    }
  });
}

async function containerState(run: string): Promise<string[]> {
  const engine = new DockerEngine(defaultDockerSocket());
  try {
    const list = await engine.json<Array<{ State: string }>>('GET', '/containers/json', {
      query: { all: true, filters: JSON.stringify({ label: [`vime.run=${run}`] }) },
    });
    return list.map((c) => c.State);
  } finally {
    await engine.close();
  }
}

/** Steps of a run that can be observed from outside it. */
const steps: Record<string, (r: Run) => boolean | Promise<boolean>> = {
  meta: (r) => metas(r).length > 0,
  mount: (r) => sandboxDirs(r).length > 0 && readFileSync('/proc/self/mountinfo', 'utf8').includes(r.rootDir),
  cgroup: (r) => metas(r).some((m) => (m.cgroups ?? []).some((cg) => existsSync(cg))),
  session: (r) =>
    sandboxDirs(r).some((d) => existsSync(join(d, 'pids')) && readdirSync(join(d, 'pids')).length > 0),
  created: (r) => r.out().includes('created'),
  container: async (r) => (await containerState(r.run)).length > 0,
  warming: (r) => r.out().includes('phase warming') && sandboxDirs(r).length > 0,
  claimed: (r) => r.out().includes('phase claimed'),
  releasing: (r) => r.out().includes('phase releasing'),
  closing: (r) => r.out().includes('phase closing'),
};

async function reach(r: Run, step: string): Promise<void> {
  const seen = steps[step]!;
  const end = Date.now() + 60_000;
  while (!(await seen(r))) {
    if (r.child.exitCode !== null)
      throw new Error(`the run exited (${r.child.exitCode}) before step ${step}: ${r.out()}`);
    if (Date.now() > end) throw new Error(`the run never reached step ${step}: ${r.out()}`);
    await new Promise((res) => setTimeout(res, 1));
  }
  sandboxDirs(r);
}

/** One `vime-sandbox reap --run RUN`, as the run's user. */
async function reap(r: Run): Promise<{ code: number; stdout: string }> {
  // An unprivileged user has no access to the engine here, and says so.
  const args = [
    ...nodeArgs,
    cli,
    'reap',
    '--run',
    r.run,
    '--root',
    r.rootDir,
    ...(r.asOther ? ['--no-docker'] : []),
  ];
  return promisify(execFile)(process.execPath, args, {
    cwd: repoRoot,
    env: { ...process.env, HOME: r.home, TMPDIR: r.home },
    ...(r.asOther ? { uid: OTHER_UID, gid: OTHER_UID } : {}),
  }).then(
    ({ stdout }) => ({ code: 0, stdout }),
    (e: { code: number; stdout: string; stderr: string }) => ({
      code: e.code,
      stdout: `${e.stdout}${e.stderr}`,
    }),
  );
}

const left = (r: Run): Promise<Leftovers> => leftovers(r.rootDir, r.run, { ids: [...r.ids] });

/** Signal the run at a step; check what it leaves, then that one reap leaves nothing. */
async function signalAt(mode: string, step: string, signal: NodeJS.Signals, asOther = false): Promise<void> {
  await slot(async () => {
    if (asOther) assertReadableByOthers();
    const r = start(mode, { asOther });
    try {
      await reach(r, step);
      r.child.kill(signal);
      const status = await exited(r.child);
      if (signal !== 'SIGKILL') {
        // Handled like a crash, then the signal's own exit status; and it cleaned up after itself.
        expect(status).toBe(signal);
        expect(await left(r)).toEqual(nothing);
      }
      const reaped = await reap(r);
      expect(reaped.code, reaped.stdout).toBe(0);
      expect(await left(r)).toEqual(nothing);
    } finally {
      r.child.kill('SIGKILL');
    }
  });
}

const createSteps: Array<[string, string]> = [
  ['overlay', 'meta'],
  ['overlay', 'mount'],
  ['overlay', 'cgroup'],
  ['overlay', 'created'],
  ['session', 'session'],
  ['session', 'created'],
  ...(withDocker
    ? ([
        ['docker', 'container'],
        ['docker', 'created'],
      ] as Array<[string, string]>)
    : []),
];
const poolSteps = ['warming', 'claimed', 'releasing', 'closing'];
const signals: NodeJS.Signals[] = ['SIGTERM', 'SIGINT', 'SIGKILL'];
// SIGINT takes the very path SIGTERM takes (one handler for both): a few steps are enough for it.
const stepsFor = <T>(signal: NodeJS.Signals, all: T[]): T[] =>
  signal === 'SIGINT' ? all.filter((_, i) => i % 3 === 1) : all;

describe.runIf(rootForTests())('a signal at every step of a create, as root', () => {
  describe.each(signals)('%s', (signal) => {
    it.concurrent.each(stepsFor(signal, createSteps))(
      '%s sandbox, at step %s',
      (mode, step) => signalAt(mode, step, signal),
      QUEUED_TIMEOUT_MS,
    );
  });
});

describe.runIf(rootForTests())("a signal at every step of a pool's life, as root", () => {
  describe.each(signals)('%s', (signal) => {
    it.concurrent.each(stepsFor(signal, poolSteps))(
      'at step %s',
      (step) => signalAt('pool', step, signal),
      QUEUED_TIMEOUT_MS,
    );
  });
});

describe(`a signal mid-create, as ${isRoot ? `uid ${OTHER_UID}` : 'this user'}`, () => {
  it.concurrent.each(signals)(
    '%s while a session starts',
    (signal) => signalAt('session', 'session', signal, isRoot),
    QUEUED_TIMEOUT_MS,
  );
});

describe.runIf(rootForTests())('what a crash leaves, found by run id', () => {
  it('a sandbox with torn (0-byte) metadata', async () => {
    const r = start('session');
    await reach(r, 'created');
    r.child.kill('SIGKILL');
    await exited(r.child);
    for (const d of sandboxDirs(r)) truncateSync(join(d, 'meta.json'), 0);
    expect((await left(r)).dirs.length).toBeGreaterThan(0);
    const reaped = await reap(r);
    expect(reaped.code, reaped.stdout).toBe(0);
    expect(reaped.stdout).toContain('torn metadata');
    expect(await left(r)).toEqual(nothing);
  });

  it('an overlay sandbox with torn metadata', async () => {
    const r = start('overlay');
    await reach(r, 'created');
    r.child.kill('SIGKILL');
    await exited(r.child);
    for (const d of sandboxDirs(r)) truncateSync(join(d, 'meta.json'), 0);
    expect((await left(r)).mounts.length).toBeGreaterThan(0);
    const reaped = await reap(r);
    expect(reaped.code, reaped.stdout).toBe(0);
    expect(await left(r)).toEqual(nothing);
  });

  it('an age-only reap from another root folder keeps a live per-exec sandbox and removes a crashed one', async () => {
    // A live sandbox of this process: per exec, its cgroups are empty between commands.
    const liveRoot = userDir('vime-signals-', false);
    const otherRoot = userDir('vime-signals-', false);
    dirs.push(liveRoot, otherRoot);
    const live = await bubblewrapProvider({ rootDir: liveRoot, execMode: 'per-exec' }).create({
      workdir: '/w',
    });
    try {
      const liveCgroups = (
        JSON.parse(readFileSync(join(liveRoot, live.id, 'meta.json'), 'utf8')) as { cgroups: string[] }
      ).cgroups;
      expect(liveCgroups.length).toBeGreaterThan(0);
      expect((await live.exec('true')).exitCode).toBe(0);
      // A crashed run's per-exec sandboxes whose folders are gone.
      const r = start('per-exec');
      await reach(r, 'created');
      const deadCgroups = metas(r).flatMap((m) => m.cgroups ?? []);
      r.child.kill('SIGKILL');
      await exited(r.child);
      for (const d of sandboxDirs(r)) rmSync(d, { recursive: true, force: true });
      expect(deadCgroups.length).toBeGreaterThan(0);
      // Two days old, so that a one-day sweep selects nothing of the tests running beside this one.
      const old = new Date(Date.now() - 2 * 86_400_000);
      for (const cg of [...liveCgroups, ...deadCgroups]) utimesSync(cg, old, old);
      const { stdout } = await promisify(execFile)(
        process.execPath,
        [...nodeArgs, cli, 'reap', '--older-than', '1d', '--root', otherRoot, '--no-docker'],
        { cwd: repoRoot },
      );
      expect(stdout).not.toContain(live.id);
      expect(liveCgroups.every((cg) => existsSync(cg))).toBe(true);
      expect((await live.exec('echo ok')).stdout).toBe('ok\n');
      expect(stdout).toContain('cgroup without a sandbox folder');
      expect(deadCgroups.filter((cg) => existsSync(cg))).toEqual([]);
      expect(await left(r)).toEqual(nothing);
    } finally {
      await live.terminate();
    }
  });

  it("a run's reap from another root folder keeps that run's live sandbox (several roots: a fleet of bubblewrap backends)", async () => {
    const liveRoot = userDir('vime-signals-', false);
    const otherRoot = userDir('vime-signals-', false);
    dirs.push(liveRoot, otherRoot);
    const run = `fleet-${randomInt(1e9)}`;
    const live = await bubblewrapProvider({ rootDir: liveRoot }).create({
      workdir: '/w',
      labels: { 'vime.run': run },
    });
    try {
      const liveCgroups = (
        JSON.parse(readFileSync(join(liveRoot, live.id, 'meta.json'), 'utf8')) as { cgroups: string[] }
      ).cgroups;
      expect(liveCgroups.length).toBeGreaterThan(0);
      expect((await live.exec('true')).exitCode).toBe(0);
      const { stdout } = await promisify(execFile)(
        process.execPath,
        [...nodeArgs, cli, 'reap', '--run', run, '--root', otherRoot, '--no-docker'],
        { cwd: repoRoot },
      );
      expect(stdout).not.toContain(live.id);
      expect(liveCgroups.filter((cg) => !existsSync(cg))).toEqual([]);
      expect((await live.exec('echo ok')).stdout).toBe('ok\n');
    } finally {
      await live.terminate();
    }
  });

  it('a cgroup with a process in it whose sandbox folder is gone', async () => {
    const r = start('session');
    await reach(r, 'created');
    const cgroups = metas(r).flatMap((m) => m.cgroups ?? []);
    r.child.kill('SIGKILL');
    await exited(r.child);
    // A process left in the sandbox's cgroup, and the state folder removed (a tmp cleaner, a reboot of /tmp).
    const stray = spawn('sleep', ['600'], { stdio: 'ignore' });
    writeFileSync(join(cgroups[0]!, 'cgroup.procs'), String(stray.pid));
    for (const d of sandboxDirs(r)) rmSync(d, { recursive: true, force: true });
    expect((await left(r)).cgroups.length).toBeGreaterThan(0);
    const reaped = await reap(r);
    expect(reaped.code, reaped.stdout).toBe(0);
    expect(reaped.stdout).toContain('cgroup without a sandbox folder');
    expect(await left(r)).toEqual(nothing);
    expect(await exited(stray)).toBe('SIGKILL');
  });
});

describe.runIf(rootForTests())("a program's own signal handlers", () => {
  it('one that exits at once: nothing is left, and its exit code stands', async () => {
    const r = start('session', { handler: 'exit' });
    await reach(r, 'cgroup');
    r.child.kill('SIGTERM');
    expect(await exited(r.child)).toBe(3);
    expect(await left(r)).toEqual(nothing);
  });

  it('one that keeps running: the sandboxes are gone, the process lives on', async () => {
    const r = start('session', { handler: 'keep' });
    await reach(r, 'created');
    r.child.kill('SIGTERM');
    expect(await eventually(async () => JSON.stringify(await left(r)) === JSON.stringify(nothing))).toBe(
      true,
    );
    expect(r.out()).toContain('handled SIGTERM');
    expect(r.child.exitCode).toBe(null);
    r.child.kill('SIGKILL');
    await exited(r.child);
  });
});
