/**
 * Leak tests: a run SIGKILLed mid-flight leaves folders, cgroups, processes and containers, and
 * `reapOrphans` (API and CLI) removes all of it; a run stopped by SIGTERM or `process.exit` cleans up by
 * itself; normal runs leave nothing.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SandboxError } from '@vime/core';
import { afterAll, describe, expect, it } from 'vitest';
import { hostSleepers } from './__fixtures__/support.js';
import { bubblewrapProvider } from './bubblewrap/provider.js';
import { DockerEngine, defaultDockerSocket } from './docker/engine-api.js';
import { dockerProvider } from './docker/provider.js';
import { localProvider } from './host/local-provider.js';
import { reapOrphans } from './reap.js';
import { dockerForTests, testImage } from './testing.js';
import type { SandboxEvents } from './types.js';

const withDocker = dockerForTests();
const fixture = fileURLToPath(new URL('./__fixtures__/leaky-run.ts', import.meta.url));
const cli = fileURLToPath(new URL('./cli.ts', import.meta.url));
const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
const nodeArgs = ['--import', 'tsx', '--conditions=@vime/source'];

function startRun(run: string, rootDir: string, mode: 'hang' | 'exit' | 'term-mid-create', tagBase: number) {
  const child = spawn(
    process.execPath,
    [...nodeArgs, fixture, run, rootDir, withDocker ? '1' : '0', mode, String(tagBase)],
    {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const ready = new Promise<{ ids: string[] }>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]!) as { ids: string[] });
    });
    child.once('exit', (code, signal) =>
      reject(new Error(`run exited early (${code ?? signal}): ${stderr}`)),
    );
  });
  return { child, ready };
}

const exited = (child: ChildProcess) =>
  new Promise<NodeJS.Signals | number | null>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.signalCode ?? child.exitCode);
    else child.once('exit', (code, signal) => resolve(signal ?? code));
  });

async function containersOf(run: string): Promise<string[]> {
  if (!withDocker) return [];
  const engine = new DockerEngine(defaultDockerSocket());
  try {
    const list = await engine.json<Array<{ Id: string }>>('GET', '/containers/json', {
      query: { all: true, filters: JSON.stringify({ label: [`vime.run=${run}`] }) },
    });
    return list.map((c) => c.Id);
  } finally {
    await engine.close();
  }
}

async function eventually(check: () => boolean | Promise<boolean>, ms = 30_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return check();
}

const sandboxDirs = (rootDir: string) => readdirSync(rootDir).filter((n) => n.startsWith('sbx-'));
const roots: string[] = [];
const newRoot = () => {
  const dir = mkdtempSync(join(tmpdir(), 'vime-leak-'));
  roots.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of roots) rmSync(dir, { recursive: true, force: true });
});

describe('leak-proofing', () => {
  it('reapOrphans removes everything a SIGKILLed run left: folders, cgroups, processes, containers', async () => {
    const rootDir = newRoot();
    const run = `leak-kill-${randomInt(1e9)}`;
    const base = 700_000 + randomInt(90_000);
    const tags = [base + 1, base + 2, base + 3, base + 4];
    const { child, ready } = startRun(run, rootDir, 'hang', base);
    const { ids } = await ready;
    expect(ids).toHaveLength(withDocker ? 3 : 2);
    const cgroups = sandboxDirs(rootDir).flatMap(
      (n) =>
        (JSON.parse(readFileSync(join(rootDir, n, 'meta.json'), 'utf8')) as { cgroups: string[] }).cgroups,
    );
    expect(cgroups.length).toBeGreaterThan(0);

    child.kill('SIGKILL');
    await exited(child);
    // What a crash leaves: the folders, the cgroups, the local run's processes, the container.
    expect(sandboxDirs(rootDir)).toHaveLength(2);
    expect(cgroups.every((cg) => existsSync(cg))).toBe(true);
    expect(hostSleepers([base + 2, base + 3]).length).toBe(2);
    if (withDocker) expect(await containersOf(run)).toHaveLength(1);

    const reaped: Parameters<SandboxEvents['leak-reaped']>[0][] = [];
    const { EventEmitter } = await import('eventemitter3');
    const events = new EventEmitter<SandboxEvents>();
    events.on('leak-reaped', (e) => reaped.push(e));
    const report = await reapOrphans({ run, rootDir, events });
    expect(report.errors).toEqual([]);
    expect(report.removed.map((r) => r.id).sort()).toEqual([...ids].sort());
    expect(reaped.map((r) => r.provider).sort()).toEqual(
      (withDocker ? ['bubblewrap', 'docker', 'local'] : ['bubblewrap', 'local']).sort(),
    );

    expect(sandboxDirs(rootDir)).toEqual([]);
    expect(cgroups.some((cg) => existsSync(cg))).toBe(false);
    expect(await eventually(() => hostSleepers(tags).length === 0)).toBe(true);
    expect(await containersOf(run)).toEqual([]);
    // A second sweep finds nothing.
    expect((await reapOrphans({ run, rootDir })).removed).toEqual([]);
  });

  it('the CLI reaps a crashed run too', async () => {
    const rootDir = newRoot();
    const run = `leak-cli-${randomInt(1e9)}`;
    const base = 600_000 + randomInt(90_000);
    const { child, ready } = startRun(run, rootDir, 'hang', base);
    await ready;
    child.kill('SIGKILL');
    await exited(child);
    const dry = await promisify(execFile)(
      process.execPath,
      [...nodeArgs, cli, 'reap', '--run', run, '--root', rootDir, '--dry-run'],
      { cwd: repoRoot },
    );
    expect(dry.stdout).toContain(`would remove ${withDocker ? 3 : 2}`);
    expect(sandboxDirs(rootDir)).toHaveLength(2);
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [...nodeArgs, cli, 'reap', '--run', run, '--root', rootDir],
      {
        cwd: repoRoot,
      },
    );
    expect(stdout).toContain(`removed ${withDocker ? 3 : 2}, kept 0 of live runs, 0 errors`);
    expect(sandboxDirs(rootDir)).toEqual([]);
    expect(await eventually(() => hostSleepers([base + 1, base + 2, base + 3, base + 4]).length === 0)).toBe(
      true,
    );
    expect(await containersOf(run)).toEqual([]);
    const usage = await promisify(execFile)(process.execPath, [...nodeArgs, cli, 'reap'], {
      cwd: repoRoot,
    }).catch((e: { code: number; stderr: string }) => e);
    expect((usage as { code: number }).code).toBe(2);
    expect((usage as { stderr: string }).stderr).toContain('needs `run`');
  });

  it.each(['SIGTERM', 'exit'] as const)('a run stopped by %s cleans up after itself', async (how) => {
    const rootDir = newRoot();
    const run = `leak-${how}-${randomInt(1e9)}`;
    const base = 500_000 + randomInt(90_000);
    const { child, ready } = startRun(run, rootDir, how === 'exit' ? 'exit' : 'hang', base);
    await ready;
    if (how === 'SIGTERM') child.kill('SIGTERM');
    const status = await exited(child);
    expect(status).toBe(how === 'SIGTERM' ? 'SIGTERM' : 0);
    expect(await eventually(() => sandboxDirs(rootDir).length === 0)).toBe(true);
    expect(await eventually(() => hostSleepers([base + 1, base + 2, base + 3, base + 4]).length === 0)).toBe(
      true,
    );
    expect(await containersOf(run)).toEqual([]);
  });

  it('a signal during creates in flight waits for them and removes them', async () => {
    const rootDir = newRoot();
    const run = `leak-midcreate-${randomInt(1e9)}`;
    const { child, ready } = startRun(run, rootDir, 'term-mid-create', 300_000);
    await ready;
    expect(await exited(child)).toBe('SIGTERM');
    expect(sandboxDirs(rootDir)).toEqual([]);
    expect(await containersOf(run)).toEqual([]);
  });

  it('leaves sandboxes of a live run alone unless asked', async () => {
    const rootDir = newRoot();
    const run = `leak-live-${randomInt(1e9)}`;
    const sbx = await localProvider({ rootDir }).create({ workdir: '/w', labels: { 'vime.run': run } });
    const report = await reapOrphans({ run, rootDir, docker: false });
    expect(report).toMatchObject({ removed: [], skippedLive: 1 });
    expect(await sbx.isAlive()).toBe(true);
    const forced = await reapOrphans({ olderThanMs: 0, run, rootDir, docker: false, includeLive: true });
    expect(forced.removed.map((r) => r.id)).toEqual([sbx.id]);
    expect(await sbx.isAlive()).toBe(false);
    await sbx.terminate();
    await expect(reapOrphans({ rootDir })).rejects.toThrow(/needs `run`/);
    // An age alone selects nothing this young.
    expect((await reapOrphans({ olderThanMs: 86_400_000, rootDir, docker: false })).removed).toEqual([]);
  });

  it('terminates a sandbox at the end of its lifetime', async () => {
    const rootDir = newRoot();
    const provider = bubblewrapProvider({ rootDir });
    const reasons: string[] = [];
    provider.events.on('terminate', (e) => reasons.push(e.reason));
    // Long enough for the session to start on a loaded host (it counts from the create).
    const sbx = await provider.create({ workdir: '/w', lifetimeMs: 2000 });
    expect(await eventually(() => reasons.length > 0, 10_000)).toBe(true);
    expect(reasons).toEqual(['lifetime']);
    expect(await sbx.isAlive()).toBe(false);
    expect(sandboxDirs(rootDir)).toEqual([]);
  });

  it('a lifetime that ends before the session is ready fails the create, saying so, and leaves nothing', async () => {
    const rootDir = newRoot();
    const provider = bubblewrapProvider({ rootDir });
    const error = await provider.create({ workdir: '/w', lifetimeMs: 1 }).catch((e: unknown) => e);
    expect(SandboxError.isInstance(error), String(error)).toBe(true);
    expect((error as Error).message).toMatch(
      /reached the end of its lifetime \(lifetimeMs 1\) before its session was ready; give it a longer lifetimeMs/,
    );
    expect(sandboxDirs(rootDir)).toEqual([]);
  });

  it('normal runs leave no folders, processes or containers', async () => {
    const rootDir = newRoot();
    const run = `leak-normal-${randomInt(1e9)}`;
    const labels = { 'vime.run': run };
    const providers = [bubblewrapProvider({ rootDir }), localProvider({ rootDir })];
    if (withDocker) providers.push(dockerProvider());
    const tag = 400_000 + randomInt(90_000);
    const ids: string[] = [];
    for (const provider of providers) {
      const sbx = await provider.create({
        workdir: '/testbed',
        labels,
        limits: provider.name === 'local' ? {} : { memoryBytes: 256 << 20, pids: 64 },
        ...(provider.name === 'docker' ? { image: testImage } : {}),
      });
      ids.push(sbx.id);
      try {
        await sbx.exec(`sleep ${tag} & echo started`);
        await sbx.writeFile('a.txt', 'x');
      } finally {
        await sbx.terminate();
      }
    }
    expect(sandboxDirs(rootDir)).toEqual([]);
    expect(await eventually(() => hostSleepers([tag]).length === 0)).toBe(true);
    expect(await containersOf(run)).toEqual([]);
    const mine = execFileSync('find', [
      '/sys/fs/cgroup',
      '-maxdepth',
      '5',
      '-type',
      'd',
      '-name',
      'vime-sbx-*',
    ])
      .toString()
      .split('\n')
      .filter((p) => ids.some((id) => p.endsWith(`vime-${id}`)));
    expect(mine).toEqual([]);
  });
});
