/**
 * The provider contract, run against every backend that can run here: bubblewrap and local always,
 * docker when a daemon answers (scripts/docker-up.sh starts one; CI runs as root and always has it), and
 * kubernetes against a STAND-IN API server (no real one runs here; see __fixtures__/kube-apiserver.ts),
 * so the provider's requests are exactly those the official client sends.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { mkdir, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandinApiServer } from './__fixtures__/kube-apiserver.js';
import { bubblewrapProvider } from './bubblewrap/provider.js';
import type { BwrapSandbox } from './bubblewrap/sandbox.js';
import { DOCKER_API_MAX, DockerEngine } from './docker/engine-api.js';
import { dockerProvider } from './docker/provider.js';
import { localProvider } from './host/local-provider.js';
import { kubernetesProvider } from './kubernetes/provider.js';
import { dockerForTests, testImage } from './testing.js';
import type { Sandbox, SandboxProvider } from './types.js';

const rootDir = mkdtempSync(join(tmpdir(), 'vime-sbx-test-'));
afterAll(() => rmSync(rootDir, { recursive: true, force: true }));
const isRoot = process.getuid?.() === 0;
const kubeStandin = await startStandinApiServer();
afterAll(() => kubeStandin.close());

const backends: Array<[string, () => SandboxProvider, string | undefined]> = [
  ['bubblewrap', () => bubblewrapProvider({ rootDir }), undefined],
  ['bubblewrap (per-exec)', () => bubblewrapProvider({ rootDir, execMode: 'per-exec' }), undefined],
  ['local', () => localProvider({ rootDir }), undefined],
];
if (dockerForTests()) backends.push(['docker', () => dockerProvider(), testImage]);
backends.push([
  'kubernetes (stand-in API server)',
  () => kubernetesProvider({ kubeConfig: kubeStandin.kubeConfig() }),
  'python:3.12-slim',
]);

describe.each(backends)('%s provider', (name, makeProvider, image) => {
  let provider: SandboxProvider;
  let sbx: Sandbox;
  const created: string[] = [];
  const terminated: string[] = [];

  beforeAll(async () => {
    provider = makeProvider();
    provider.events.on('create', (e) => created.push(e.id));
    provider.events.on('terminate', (e) => terminated.push(e.id));
    sbx = await provider.create({
      workdir: '/testbed',
      env: { GREETING: 'hello' },
      labels: { 'vime.run': 'providers-test' },
      ...(image ? { image } : {}),
    });
  });
  afterAll(async () => {
    await sbx?.terminate();
  });

  it('labels the sandbox with its run and id', () => {
    expect(sbx.labels['vime.run']).toBe('providers-test');
    expect(sbx.labels['vime.sandbox']).toBe(sbx.id);
    expect(created).toContain(sbx.id);
    expect(sbx.provider).toBe(name.split(' ')[0]);
  });

  it('runs shell strings and argv with exit codes, separate and merged output', async () => {
    const r = await sbx.exec('echo out; echo err >&2; exit 3');
    expect(r.exitCode).toBe(3);
    expect(r.stdout).toBe('out\n');
    expect(r.stderr).toBe('err\n');
    expect(r.output).toContain('out\n');
    expect(r.output).toContain('err\n');
    expect(r.timedOut).toBe(false);
    expect(r.durationMs).toBeGreaterThan(0);
    const argv = await sbx.exec(['printf', '%s|', 'a b', '$HOME', ';ls']);
    expect(argv.stdout).toBe('a b|$HOME|;ls|');
  });

  it('applies spec env, per-exec env and cwd', async () => {
    await sbx.exec('mkdir -p sub/dir');
    const r = await sbx.exec('echo $GREETING $EXTRA; pwd', { env: { EXTRA: 'x' }, cwd: 'sub/dir' });
    expect(r.stdout.split('\n')[0]).toBe('hello x');
    expect(r.stdout.trim().endsWith('/sub/dir')).toBe(true);
    const abs = await sbx.exec('pwd', { cwd: '/testbed/sub' });
    expect(abs.stdout.trim().endsWith('/sub')).toBe(true);
  });

  it('passes stdin', async () => {
    const r = await sbx.exec(['wc', '-c'], { stdin: 'x'.repeat(12345) });
    expect(r.stdout.trim()).toBe('12345');
  });

  it('writes and reads bytes and text, creating parents', async () => {
    const bytes = new Uint8Array([0, 1, 2, 255, 254, 10]);
    await sbx.writeFile('/testbed/deep/er/bin.dat', bytes);
    expect(Array.from(await sbx.readFile('deep/er/bin.dat'))).toEqual(Array.from(bytes));
    await sbx.writeFile('notes/a.txt', 'héllo\n');
    expect(await sbx.readTextFile('/testbed/notes/a.txt')).toBe('héllo\n');
    await sbx.writeFile('run.sh', '#!/bin/sh\necho ran\n', { mode: 0o755 });
    expect((await sbx.exec('./run.sh')).stdout).toBe('ran\n');
    expect((await sbx.exec('cat notes/a.txt')).stdout).toBe('héllo\n');
  });

  // In per-exec mode /tmp lives for one command only (each exec is a fresh bwrap).
  if (name !== 'bubblewrap (per-exec)') {
    it('moves files to and from the private /tmp both ways (a size-bounded tmpfs on every isolating backend)', async () => {
      await sbx.writeFile('/tmp/agent.diff', 'from the host\n');
      expect((await sbx.exec('cat /tmp/agent.diff')).stdout).toBe('from the host\n');
      await sbx.exec('echo from the sandbox > /tmp/made.txt');
      expect(await sbx.readTextFile('/tmp/made.txt')).toBe('from the sandbox\n');
    });
  }

  it('fails a read of a missing file with a SandboxError', async () => {
    await expect(sbx.readFile('missing.txt')).rejects.toSatisfy((e) => SandboxError.isInstance(e));
  });

  it('copies a host folder in, owned by the sandbox user, usable by git and pytest', async () => {
    const src = mkdtempSync(join(tmpdir(), 'vime-copyin-'));
    writeFileSync(join(src, 'calc.py'), 'def add(a, b):\n    return a + b\n');
    await mkdir(join(src, 'tests'));
    writeFileSync(
      join(src, 'tests', 'test_calc.py'),
      'from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n',
    );
    execFileSync('git', ['init', '-q', src]);
    execFileSync('git', ['-C', src, 'add', '-A']);
    execFileSync('git', ['-C', src, '-c', 'user.email=t@e', '-c', 'user.name=t', 'commit', '-qm', 'init']);
    await sbx.copyIn(src, '/testbed/repo');
    const r = await sbx.exec(
      'git status --porcelain && git log --oneline | wc -l && python3 -m pytest -q -p no:cacheprovider tests',
      { cwd: '/testbed/repo', env: { PYTHONPATH: '.' } },
    );
    expect(r.exitCode, r.output).toBe(0);
    expect(r.stdout).toMatch(/^1\n/);
    expect(r.stdout).toContain('1 passed');
    const edit = await sbx.exec('echo "# change" >> calc.py && git diff --stat', { cwd: '/testbed/repo' });
    expect(edit.stdout).toContain('calc.py');
    rmSync(src, { recursive: true, force: true });
  });

  it('times out, kills the tree and reports timedOut', async () => {
    const t0 = performance.now();
    const r = await sbx.exec('sleep 30', { timeoutMs: 500 });
    expect(r.timedOut).toBe(true);
    expect(performance.now() - t0).toBeLessThan(10_000);
    const after = await sbx.exec('echo still-usable');
    expect(after.stdout).toBe('still-usable\n');
  });

  it('aborts a running exec with the caller signal', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('stop')), 300);
    await expect(sbx.exec('sleep 30', { signal: controller.signal })).rejects.toThrow('stop');
  });

  it('caps large output keeping head and tail', async () => {
    const r = await sbx.exec('seq 1 200000', { maxOutputBytes: 4096 });
    expect(r.truncated).toBe(true);
    expect(r.stdout.startsWith('1\n2\n3\n')).toBe(true);
    expect(r.stdout.endsWith('199999\n200000\n')).toBe(true);
    expect(r.stdout).toContain('bytes elided');
    expect(r.stdout.length).toBeLessThan(4096 + 100);
  });

  it('decodes non-UTF-8 output with replacement characters', async () => {
    const r = await sbx.exec(['printf', 'ok\\377\\376end']);
    expect(r.stdout).toBe('ok\uFFFD\uFFFDend');
  });

  it('enforces CPU-seconds, file-size and address-space limits', async () => {
    const limited = await provider.create({
      workdir: '/testbed',
      limits: { cpuSeconds: 1, fileSizeBytes: 1 << 20, addressSpaceBytes: 512 << 20 },
      ...(image ? { image } : {}),
    });
    try {
      const cpu = await limited.exec('while :; do :; done', { timeoutMs: 20_000 });
      expect(cpu.timedOut).toBe(false);
      expect(cpu.exitCode).toBeGreaterThan(128);
      const big = await limited.exec('head -c 5000000 /dev/zero > big; echo rc=$?; wc -c < big');
      expect(big.stdout).toMatch(/rc=(153|1)\n1048576\n/);
      const mem = await limited.exec(['python3', '-c', 'x = bytearray(1 << 30)']);
      expect(mem.exitCode).toBe(1);
      expect(mem.stderr).toContain('MemoryError');
      expect((await limited.exec(['python3', '-c', 'x = bytearray(64 << 20); print(len(x))'])).stdout).toBe(
        '67108864\n',
      );
    } finally {
      await limited.terminate();
    }
  });

  it('emits exec events', async () => {
    const seen: Array<{ id: string; exitCode: number | null }> = [];
    const listener = (e: { id: string; exitCode: number | null }) => seen.push(e);
    provider.events.on('exec', listener);
    await sbx.exec('exit 5');
    provider.events.off('exec', listener);
    expect(seen).toContainEqual(expect.objectContaining({ id: sbx.id, exitCode: 5 }));
  });

  it('is alive until terminated; terminate is idempotent and cleans up', async () => {
    const other = await provider.create({ workdir: '/testbed', ...(image ? { image } : {}) });
    expect(await other.isAlive()).toBe(true);
    await Promise.all([other.terminate(), other.terminate()]);
    await other.terminate();
    expect(await other.isAlive()).toBe(false);
    expect(terminated.filter((id) => id === other.id)).toHaveLength(1);
    await expect(other.exec('true')).rejects.toSatisfy((e) => SandboxError.isInstance(e));
    if (name !== 'docker') expect(existsSync(join(rootDir, other.id))).toBe(false);
  });

  it('a command in flight when the sandbox is terminated fails as sandbox_terminated, as one sent after', async () => {
    const other = await provider.create({ workdir: '/testbed', ...(image ? { image } : {}) });
    const inFlight = expect(other.exec('sleep 30')).rejects.toMatchObject({ code: 'sandbox_terminated' });
    await new Promise((resolve) => setTimeout(resolve, 500));
    await other.terminate();
    await inFlight;
    await expect(other.exec('true')).rejects.toMatchObject({ code: 'sandbox_terminated' });
  });
});

describe.runIf(dockerForTests())('docker specifics', () => {
  it('negotiates the API version with the engine instead of hard-coding one', async () => {
    const engine = new DockerEngine();
    try {
      const server = JSON.parse(
        execFileSync('docker', ['version', '--format', '{{json .Server}}']).toString(),
      ) as { ApiVersion: string };
      const [major, minor] = server.ApiVersion.split('.').map(Number) as [number, number];
      const [maxMajor, maxMinor] = DOCKER_API_MAX.split('.').map(Number) as [number, number];
      const expected = major * 1000 + minor < maxMajor * 1000 + maxMinor ? server.ApiVersion : DOCKER_API_MAX;
      expect(await engine.apiVersion()).toBe(expected);
    } finally {
      await engine.close();
    }
  });

  it('labels containers with the run and names a missing image with the fix', async () => {
    const provider = dockerProvider();
    const sbx = await provider.create({
      workdir: '/w',
      image: testImage,
      labels: { 'vime.run': 'labels-test' },
    });
    try {
      const engine = new DockerEngine();
      const info = await engine.json<{ Config: { Labels: Record<string, string>; User: string } }>(
        'GET',
        `/containers/vime-${sbx.id}/json`,
      );
      await engine.close();
      expect(info.Config.Labels).toMatchObject({ 'vime.run': 'labels-test', 'vime.sandbox': sbx.id });
      expect(info.Config.User).toBe('1000:1000');
    } finally {
      await sbx.terminate();
    }
    await expect(provider.create({ workdir: '/w', image: 'vime/absent:never' })).rejects.toThrow(
      /never pulls/,
    );
  });
});

describe('bubblewrap specifics', () => {
  it('runs as an unprivileged uid with a read-only system, private /tmp and no network', async () => {
    const provider = bubblewrapProvider({ rootDir });
    const sbx = await provider.create({ workdir: '/work' });
    try {
      const r = await sbx.exec(
        'id -u; touch /usr/x 2>&1; touch /etc/x 2>&1; ls /tmp | wc -l; cat /proc/net/dev | tail -n +3 | cut -d: -f1',
      );
      const lines = r.stdout.trim().split('\n');
      if (isRoot) expect(lines[0]).not.toBe('0');
      expect(r.stdout).toMatch(/touch: cannot touch '\/usr\/x': Read-only file system/);
      expect(r.stdout).toMatch(/touch: cannot touch '\/etc\/x': Read-only file system/);
      expect(lines.at(-2)?.trim()).toBe('0');
      expect(lines.at(-1)?.trim()).toBe('lo');
      expect(sbx.capabilities).toEqual({ persistentProcesses: true, isolatedNetwork: true });
    } finally {
      await sbx.terminate();
    }
  });

  it('replaces a killed session at once: a command right after the kill starts a new one', async () => {
    const provider = bubblewrapProvider({ rootDir });
    const sbx = (await provider.create({ workdir: '/work' })) as BwrapSandbox;
    try {
      const session = await sbx.startSession();
      // Where no cgroup is writable, a timeout kills the whole session; the supervisor may have answered
      // the killed command before the session's exit is seen.
      session.close();
      expect(session.alive).toBe(false);
      const r = await sbx.exec('echo ok');
      expect(r).toMatchObject({ exitCode: 0, stdout: 'ok\n' });
      await session.gone;
    } finally {
      await sbx.terminate();
    }
  });

  it('runs the bwrap that PATH names, also outside the system folders (a bundled bwrap)', async () => {
    // The launcher runs with a fixed system PATH; a bwrap found only on the caller's PATH must still be used.
    const bin = mkdtempSync(join(tmpdir(), 'vime-bwrap-bin-'));
    chmodSync(bin, 0o755); // the probe runs it as the sandbox user
    const real = execFileSync('sh', ['-c', 'command -v bwrap'], { encoding: 'utf8' }).trim();
    const log = join(bin, 'calls');
    writeFileSync(log, '');
    chmodSync(log, 0o666); // written by the launcher after it drops to the sandbox user
    writeFileSync(join(bin, 'bwrap'), `#!/bin/sh\necho called >> ${log}\nexec ${real} "$@"\n`, {
      mode: 0o755,
    });
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    try {
      const sbx = await bubblewrapProvider({ rootDir }).create({ workdir: '/work' });
      try {
        expect((await sbx.exec('echo ok')).stdout).toBe('ok\n');
      } finally {
        await sbx.terminate();
      }
      // The probe runs it once; the sandbox's own launch must run it too.
      expect(readFileSync(log, 'utf8').split('\n').filter(Boolean).length).toBeGreaterThan(1);
    } finally {
      process.env.PATH = path;
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it("probes bwrap with a sandbox's own system folders, not the host's whole mount tree", async () => {
    // `--ro-bind / /` re-mounts every host mount, so another sandbox's overlay coming or going failed it.
    const bin = mkdtempSync(join(tmpdir(), 'vime-bwrap-args-'));
    chmodSync(bin, 0o755);
    const real = execFileSync('sh', ['-c', 'command -v bwrap'], { encoding: 'utf8' }).trim();
    const log = join(bin, 'calls');
    writeFileSync(log, '');
    chmodSync(log, 0o666);
    writeFileSync(join(bin, 'bwrap'), `#!/bin/sh\necho "$*" >> ${log}\nexec ${real} "$@"\n`, { mode: 0o755 });
    try {
      const sbx = await bubblewrapProvider({ rootDir, bwrapPath: join(bin, 'bwrap') }).create({
        workdir: '/work',
      });
      await sbx.terminate();
      const probe = readFileSync(log, 'utf8')
        .split('\n')
        .find((l) => l.endsWith(' true'))!;
      expect(probe).toMatch(/^--ro-bind \/usr \/usr .*--ro-bind \/etc \/etc --unshare-all/);
      expect(probe).not.toMatch(/--ro-bind \/ \//);
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it('fails closed with an actionable error when bwrap is missing', async () => {
    const provider = bubblewrapProvider({ rootDir, bwrapPath: '/nonexistent/bwrap' });
    await expect(provider.create({ workdir: '/work' })).rejects.toThrow(/apt-get install bubblewrap/);
    expect(await readdir(rootDir)).not.toContain(expect.stringMatching(/^sbx-/) as unknown as string);
  });

  it('rejects an unknown image name, naming the fix', async () => {
    const provider = bubblewrapProvider({ rootDir });
    await expect(provider.create({ workdir: '/work', image: 'python:3.11' })).rejects.toThrow(
      /options\.images/,
    );
  });
});

describe('bubblewrap start-up check', () => {
  it('runs with the sandbox system PATH, whatever PATH the host process has (a bundle gives a PATH of its own)', async () => {
    const bwrap = execFileSync('sh', ['-c', 'command -v bwrap'], { encoding: 'utf8' }).trim();
    const rootDir = mkdtempSync(join(tmpdir(), 'vime-probe-path-'));
    const hostPath = process.env.PATH;
    // Only a folder the probe's sandbox does not bind: `true` is found there on the host, not inside.
    const own = mkdtempSync(join(tmpdir(), 'vime-own-bin-'));
    execFileSync('ln', ['-s', '/usr/bin/true', join(own, 'true')]);
    process.env.PATH = own;
    try {
      const sandbox = await bubblewrapProvider({ rootDir, bwrapPath: bwrap }).create({ workdir: '/work' });
      await sandbox.terminate();
    } finally {
      process.env.PATH = hostPath;
      rmSync(rootDir, { recursive: true, force: true });
      rmSync(own, { recursive: true, force: true });
    }
  });
});
