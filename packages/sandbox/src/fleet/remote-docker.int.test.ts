/**
 * The fleet over three real, private Docker engines on loopback TCP with TLS client verification
 * (certificates made here with openssl): the TLS checks, rollout-shaped work spread over the engines with
 * one engine stopped mid-run (its rollouts fail as infrastructure, the rest complete, nothing leaks), and
 * the lifetime the engine keeps. Needs root, dockerd and openssl (CI has them); skipped with the reason
 * printed otherwise, and failed under VIME_REQUIRE_ALL=1.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, SandboxError } from '@vime/core';
import { runRollouts } from '@vime/core/runner';
import { available } from '@vime/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCerts, startEngines, type TestCerts, type TlsEngine } from '../__fixtures__/tls-engines.js';
import { DockerEngine } from '../docker/engine-api.js';
import { dockerProvider } from '../docker/provider.js';
import { removeContainerSync } from '../docker/sandbox.js';
import { BACKEND_LOST } from '../errors.js';
import { RUN_LABEL } from '../lifecycle.js';
import { testImage } from '../testing.js';
import type { Sandbox } from '../types.js';
import { dockerBackend } from './docker.js';
import { type FleetProvider, fleetProvider } from './fleet.js';

function hasBinary(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const ready = available(
  'root with dockerd and openssl (private TLS engines)',
  process.getuid?.() === 0 && hasBinary('dockerd') && hasBinary('openssl'),
  "Run the tests as root with Debian's docker.io and openssl installed (CI does).",
);

/** Containers of `run` on an engine, stopped ones included. */
async function containersOf(engine: DockerEngine, run: string): Promise<string[]> {
  const list = await engine.json<Array<{ Id: string }>>('GET', '/containers/json', {
    query: { all: true, filters: JSON.stringify({ label: [`${RUN_LABEL}=${run}`] }) },
  });
  return list.map((c) => c.Id);
}

describe.runIf(ready)('a fleet over remote Docker engines with TLS', () => {
  // Short: dockerd's containerd socket lives under the exec root, and a unix socket path has 107 bytes.
  const dir = mkdtempSync(join(tmpdir(), 'vfl-'));
  let certs: TestCerts;
  let engines: TlsEngine[] = [];
  const clients: DockerEngine[] = [];

  beforeAll(async () => {
    certs = makeCerts(join(dir, 'certs'));
    engines = await startEngines(dir, certs, 3);
    for (const e of engines) clients.push(e.client());
  }, 240_000);

  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all(engines.map((e) => e.remove()));
    rmSync(dir, { recursive: true, force: true });
  }, 240_000);

  it('verifies the engine with the given CA and presents the client certificate; plain TCP is refused', async () => {
    const host = engines[0]!.host;
    expect(await clients[0]!.apiVersion()).toMatch(/^1\.\d+$/);
    const wrongCa = new DockerEngine({ host, tls: { ...certs.client, ca: certs.otherCa } });
    const stranger = new DockerEngine({ host, tls: { ca: certs.client.ca, ...certs.stranger } });
    try {
      for (const client of [wrongCa, stranger]) {
        const error = await client.ping(AbortSignal.timeout(10_000)).catch((e: unknown) => e);
        expect(SandboxError.isInstance(error) && error.code).toBe('sandbox_unavailable');
      }
      const refused = (await wrongCa.ping().catch((e: unknown) => e)) as Error;
      expect(refused.message).toMatch(/certificate/i);
    } finally {
      await Promise.all([wrongCa.close(), stranger.close()]);
    }
    expect(() => new DockerEngine({ host })).toThrow(/needs tls: \{ ca, cert, key \}/);
    expect(() => new DockerEngine({ host: 'http://127.0.0.1:2375' })).toThrow(ConfigError);
    // This host's proxy socket and files are not on a remote engine's host: refused, not bound there.
    const remote = dockerProvider({ host, tls: certs.client, handleSignals: false });
    const proxy = await remote
      .create({ workdir: '/testbed', image: testImage, proxy: { socketPath: join(dir, 'proxy.sock') } })
      .catch((e: unknown) => e);
    expect(ConfigError.isInstance(proxy) && proxy.message).toMatch(/spec\.proxy names paths of this host/);
    // The process-exit cleanup (a child process, nothing async runs at exit) reaches a TLS engine too.
    const sbx = await remote.create({
      workdir: '/testbed',
      image: testImage,
      labels: { [RUN_LABEL]: 'exit-hook' },
    });
    expect(await containersOf(clients[0]!, 'exit-hook')).toHaveLength(1);
    removeContainerSync(clients[0]!, `vime-${sbx.id}`);
    expect(await containersOf(clients[0]!, 'exit-hook')).toEqual([]);
    await sbx.terminate();
  });

  it('spreads rollouts over the engines; a stopped engine fails its own as infrastructure, the rest complete, nothing leaks', async () => {
    const run = `fleet-int-${Date.now().toString(36)}`;
    const fleet: FleetProvider = fleetProvider({
      backends: engines.map((e, i) =>
        dockerBackend({
          name: `engine-${i}`,
          host: e.host,
          tls: certs.client,
          capacity: 4,
          createsPerSecond: 10,
        }),
      ),
      lifetimeMs: 600_000,
      run,
      maxStarting: 6,
      pingIntervalMs: 500,
      retryDrainedMs: 600_000,
    });
    const repo = join(dir, 'repo');
    mkdirSync(join(repo, 'data'), { recursive: true });
    writeFileSync(join(repo, 'data', 'seed.txt'), 'seed line\n');
    const placed = new Map<string, string>();
    const live: Sandbox[] = [];
    let atGate = 0;
    let openGate!: () => void;
    const gate = new Promise<void>((r) => {
      openGate = r;
    });
    const tasks = Array.from({ length: 12 }, (_, i) => ({ id: `task-${i}` }));
    const results = runRollouts(
      tasks,
      async (task, ctx) => {
        const sbx = await fleet.create({ workdir: '/testbed', image: testImage }, { signal: ctx.signal });
        placed.set(task.id, sbx.labels['vime.backend']!);
        live.push(sbx);
        try {
          await sbx.copyIn(repo, '/testbed');
          await sbx.writeFile('input.txt', `${task.id}\n`);
          const joined = await sbx.exec('cat input.txt data/seed.txt > both.txt && wc -l < both.txt');
          if (joined.stdout.trim() !== '2') throw new Error(`unexpected: ${joined.output}`);
          atGate++;
          await gate;
          const summed = await sbx.exec('sleep 2; sha256sum both.txt | cut -c1-64');
          const back = await sbx.readTextFile('both.txt');
          const ok =
            summed.exitCode === 0 && summed.stdout.trim().length === 64 && back === `${task.id}\nseed line\n`;
          return { reward: ok ? 1 : 0 };
        } finally {
          await sbx.terminate();
        }
      },
      { concurrency: 12, guardMs: 180_000 },
    );
    const finished: Array<{ taskId: string; status: string }> = [];
    const collected = (async () => {
      const out = [];
      for await (const r of results) {
        out.push(r);
        finished.push(r);
      }
      return out;
    })();
    await until(
      () => atGate === 12 || finished.length > 0,
      'all 12 rollouts at the gate',
      () => ({ atGate, finished }),
    );
    expect(finished).toEqual([]);
    // Placement: capacity 4 on each of three engines for 12 rollouts, so exactly 4 on each.
    const byBackend = (name: string) => [...placed].filter(([, b]) => b === name).map(([t]) => t);
    expect(['engine-0', 'engine-1', 'engine-2'].map((b) => byBackend(b).length)).toEqual([4, 4, 4]);
    // The engine keeps the lifetime: the container's only process ends then and the engine removes it.
    const sample = live.find((s) => s.labels['vime.backend'] === 'engine-0')!;
    const inspect = await clients[0]!.json<{
      Config: { Cmd: string[] };
      HostConfig: { AutoRemove: boolean };
    }>('GET', `/containers/vime-${sample.id}/json`);
    expect(inspect.Config.Cmd).toEqual(['sleep', '600']);
    expect(inspect.HostConfig.AutoRemove).toBe(true);

    openGate();
    await engines[1]!.stop();
    const all = await collected;
    for (const r of all) {
      const backend = placed.get(r.taskId);
      if (backend === 'engine-1') {
        expect(r.status, `${r.taskId} on the stopped engine`).toBe('failed');
        expect('reward' in r).toBe(false);
        expect(r.status === 'failed' && r.error.code).toBe(BACKEND_LOST);
      } else {
        expect(r.status === 'completed' && r.reward, `${r.taskId} on ${backend}: ${JSON.stringify(r)}`).toBe(
          1,
        );
      }
    }
    expect(all).toHaveLength(12);
    expect(fleet.stats().map((s) => [s.name, s.live, s.lost])).toEqual([
      ['engine-0', 0, false],
      ['engine-1', 0, true],
      ['engine-2', 0, false],
    ]);
    expect(await containersOf(clients[0]!, run)).toEqual([]);
    expect(await containersOf(clients[2]!, run)).toEqual([]);
    // The stopped engine, started again, removed the containers it stopped by itself (AutoRemove); a
    // reap of every backend finds nothing left.
    await engines[1]!.start();
    expect(await containersOf(clients[1]!, run)).toEqual([]);
    const reaped = await fleet.reapOrphans({ run, includeLive: true });
    expect(reaped).toEqual({ removed: [], skippedLive: 0, errors: [] });
    await fleet.close();
  }, 300_000);
});

async function until(check: () => boolean, what: string, seen: () => unknown): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`waited 120 s for ${what}; saw ${JSON.stringify(seen())}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
