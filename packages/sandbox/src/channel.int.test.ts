/**
 * The proxy channel of a bubblewrap or docker sandbox: the host's proxy socket answers at 127.0.0.1:<port> inside,
 * and nothing else does: not a server on the host's loopback (in every spelling), not the host's other
 * addresses, not a host abstract unix socket, not the outside. Read-only binds are readable, never writable.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { chmod } from 'node:fs/promises';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, type Server } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bubblewrapProvider } from './bubblewrap/provider.js';
import { PROXY_CHANNEL_PORT } from './channel.js';
import { DockerEngine, defaultDockerSocket } from './docker/engine-api.js';
import { dockerProvider } from './docker/provider.js';
import { localProvider } from './host/local-provider.js';
import { packTar } from './tar.js';
import { dockerForTests, testImage } from './testing.js';
import type { Sandbox } from './types.js';

const dir = mkdtempSync(join(tmpdir(), 'vime-channel-test-'));
// The sandbox user must be able to walk to the socket and to bind sources.
chmodSync(dir, 0o755);
const socketPath = join(dir, 'proxy.sock');
const rootDir = join(dir, 'sandboxes');
let proxy: HttpServer;
let loopback: Server;
let abstract: Server;
let loopbackPort = 0;
let reached = 0;
let sbx: Sandbox;
const isRoot = process.getuid?.() === 0;

// Connect from inside; prints "open" or the error's name (the exit code stays 0 either way).
const CONNECT = `
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    if host.startswith(('@', '/')):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect('\\0' + host[1:] if host.startswith('@') else host)
    else:
        s = socket.create_connection((host, port), timeout=3)
    print('open')
except OSError as e:
    print(type(e).__name__)
`;

beforeAll(async () => {
  proxy = createHttpServer((req, res) => {
    res.end(`proxy saw ${req.method} ${req.url} key=${req.headers['x-api-key'] ?? ''}`);
  });
  await new Promise<void>((resolve) => proxy.listen(socketPath, resolve));
  await chmod(socketPath, 0o666);
  loopback = createServer((s) => {
    reached++;
    s.destroy();
  });
  await new Promise<void>((resolve) => loopback.listen(0, '0.0.0.0', resolve));
  loopbackPort = (loopback.address() as { port: number }).port;
  abstract = createServer((s) => {
    reached++;
    s.destroy();
  });
  await new Promise<void>((resolve) => abstract.listen('\0vime-channel-test', resolve));
  sbx = await bubblewrapProvider({ rootDir }).create({ workdir: '/work', proxy: { socketPath } });
}, 60_000);

afterAll(async () => {
  await sbx?.terminate();
  await Promise.all(
    [proxy, loopback, abstract].map((s) => new Promise<void>((resolve) => s.close(() => resolve()))),
  );
  rmSync(dir, { recursive: true, force: true });
});

describe('bubblewrap proxy channel', () => {
  it('serves the host socket at http://127.0.0.1:<port> inside the sandbox', async () => {
    const r = await sbx.exec([
      'python3',
      '-c',
      'import sys, urllib.request as u; r = u.Request(sys.argv[1], headers={"x-api-key": "s1"}); print(u.urlopen(r, timeout=5).read().decode())',
      `http://127.0.0.1:${PROXY_CHANNEL_PORT}/v1/models`,
    ]);
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('proxy saw GET /v1/models key=s1');
    // Many connections in a row and at once: the forwarder relays each.
    const many = await sbx.exec([
      'python3',
      '-c',
      `import urllib.request as u, concurrent.futures as f
with f.ThreadPoolExecutor(8) as ex:
    print(sum(1 for b in ex.map(lambda i: u.urlopen("http://127.0.0.1:${PROXY_CHANNEL_PORT}/" + str(i), timeout=5).read(), range(40)) if b.startswith(b"proxy saw")))`,
    ]);
    expect(many.stdout.trim()).toBe('40');
  });

  it('reaches nothing else: host loopback in every spelling, host addresses, abstract sockets, outside', async () => {
    const hostAddresses = Object.values(networkInterfaces())
      .flat()
      .filter((a) => a && !a.internal)
      .map((a) => a!.address);
    const targets: Array<[string, number]> = [
      ['127.0.0.1', loopbackPort],
      ['localhost', loopbackPort],
      ['127.1', loopbackPort],
      ['0.0.0.0', loopbackPort],
      ['::1', loopbackPort],
      ['::ffff:127.0.0.1', loopbackPort],
      ...hostAddresses.map((a): [string, number] => [a, loopbackPort]),
      ['@vime-channel-test', 0],
      ['1.1.1.1', 443],
      ['8.8.8.8', 53],
      ['2606:4700:4700::1111', 443],
    ];
    for (const [host, port] of targets) {
      const r = await sbx.exec(['python3', '-c', CONNECT, host, String(port)]);
      expect([host, r.stdout.trim()]).not.toEqual([host, 'open']);
      expect(r.exitCode).toBe(0);
    }
    expect(reached).toBe(0);
  });

  it('binds host files read-only', async () => {
    const file = join(dir, 'tool');
    writeFileSync(file, '#!/bin/sh\necho tool ran\n', { mode: 0o755 });
    const other = await bubblewrapProvider({ rootDir }).create({
      workdir: '/work',
      readOnlyBinds: [{ source: file, target: '/opt/vime/bin/tool' }],
    });
    try {
      expect((await other.exec(['/opt/vime/bin/tool'])).stdout).toBe('tool ran\n');
      const write = await other.exec('echo x > /opt/vime/bin/tool');
      expect(write.exitCode).not.toBe(0);
    } finally {
      await other.terminate();
    }
  });

  it('refuses a bad channel or bind with the field named, and providers that cannot set one up', async () => {
    const provider = bubblewrapProvider({ rootDir });
    const file = join(dir, 'not-a-socket');
    writeFileSync(file, '');
    const hidden = join(dir, 'private');
    mkdirSync(hidden, { mode: 0o700 });
    writeFileSync(join(hidden, 'f'), '');
    const bad = [
      { workdir: '/work', proxy: { socketPath: 'relative.sock' } },
      { workdir: '/work', proxy: { socketPath: file } },
      { workdir: '/work', proxy: { socketPath, port: 0 } },
      { workdir: '/work', readOnlyBinds: [{ source: file, target: '/work/x' }] },
      { workdir: '/work', readOnlyBinds: [{ source: file, target: '/tmp/x' }] },
      { workdir: '/work', readOnlyBinds: [{ source: join(dir, 'missing'), target: '/opt/x' }] },
      { workdir: '/opt/work', readOnlyBinds: [{ source: dir, target: '/opt' }] },
      { workdir: '/work', readOnlyBinds: [{ source: file, target: '/work/../tmp/x' }] },
      ...(isRoot
        ? [{ workdir: '/work', readOnlyBinds: [{ source: join(hidden, 'f'), target: '/opt/x' }] }]
        : []),
    ];
    for (const spec of bad) {
      const error = await provider.create(spec).catch((e: unknown) => e);
      expect(ConfigError.isInstance(error), String(error)).toBe(true);
      expect(String(error)).toMatch(/spec\.(proxy|readOnlyBinds)/);
    }
    await expect(
      bubblewrapProvider({ rootDir, execMode: 'per-exec' }).create({
        workdir: '/work',
        proxy: { socketPath },
      }),
    ).rejects.toThrow(/session mode/);
    await expect(
      localProvider({ rootDir }).create({ workdir: '/work', proxy: { socketPath } }),
    ).rejects.toThrow(/not supported by the local provider/);
    // Docker checks the same fields before the engine is asked anything: no engine needs to run for this.
    const noEngine = dockerProvider({ socketPath: join(dir, 'no-engine.sock') });
    for (const spec of bad.slice(0, 8)) {
      const error = await noEngine.create(spec).catch((e: unknown) => e);
      expect(ConfigError.isInstance(error), String(error)).toBe(true);
      expect(String(error)).toMatch(/spec\.(proxy|readOnlyBinds)/);
    }
  });
});

/** A registry-free image with only `sleep` and its loader and libc: everything a sandbox needs but python3. */
async function importImageWithoutPython(engine: DockerEngine, name: string): Promise<void> {
  const libs = execFileSync('ldd', ['/usr/bin/sleep'], { encoding: 'utf8' })
    .split('\n')
    .map((line) => /(\/\S+) \(0x/.exec(line)?.[1])
    .filter((p): p is string => p !== undefined);
  const files = [['bin/sleep', '/usr/bin/sleep'], ...libs.map((p) => [p.slice(1), p])] as const;
  const dirs = new Set(
    files.flatMap(([inImage]) =>
      inImage
        .split('/')
        .slice(0, -1)
        .map((_, i, parts) => parts.slice(0, i + 1).join('/')),
    ),
  );
  const tar = packTar([
    ...[...dirs].sort().map((d) => ({ name: d, type: 'dir' as const })),
    ...files.map(([inImage, host]) => ({
      name: inImage,
      type: 'file' as const,
      content: readFileSync(host),
      mode: 0o755,
    })),
  ]);
  const [repo, tag] = name.split(':');
  await engine.request('POST', '/images/create', {
    query: { fromSrc: '-', repo, tag },
    body: tar,
    contentType: 'application/x-tar',
  });
}

describe.runIf(dockerForTests())('docker proxy channel', () => {
  const engine = new DockerEngine();
  const provider = dockerProvider({ engine });
  const tool = join(dir, 'docker-tool');
  const toolDir = join(dir, 'docker-tools');
  const port = 18765;
  const noPython = `vime/channel-test-no-python:${process.pid}`;
  let box: Sandbox;

  beforeAll(async () => {
    writeFileSync(tool, '#!/bin/sh\necho tool ran\n');
    mkdirSync(toolDir);
    writeFileSync(join(toolDir, 'data'), 'original\n');
    // Writable by everyone on the host: only the read-only mount may stop a write from inside.
    chmodSync(tool, 0o777);
    chmodSync(toolDir, 0o777);
    chmodSync(join(toolDir, 'data'), 0o666);
    box = await provider.create({
      image: testImage,
      workdir: '/work',
      labels: { 'vime.run': 'channel-test' },
      proxy: { socketPath, port },
      readOnlyBinds: [
        { source: tool, target: '/opt/vime/bin/tool' },
        { source: toolDir, target: '/opt/vime/tools' },
      ],
    });
  }, 60_000);

  afterAll(async () => {
    await box?.terminate();
    await engine.request('DELETE', `/images/${noPython}`, { query: { force: true }, ok: [404] });
    await engine.close();
  });

  it('serves the host socket at http://127.0.0.1:<port> from the first command on', async () => {
    // The first command after create: the forwarder accepts before the sandbox is handed out.
    const r = await box.exec([
      'python3',
      '-c',
      'import sys, urllib.request as u; r = u.Request(sys.argv[1], headers={"x-api-key": "s1"}); print(u.urlopen(r, timeout=5).read().decode())',
      `http://127.0.0.1:${port}/v1/models`,
    ]);
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('proxy saw GET /v1/models key=s1');
    const many = await box.exec([
      'python3',
      '-c',
      `import urllib.request as u, concurrent.futures as f
with f.ThreadPoolExecutor(8) as ex:
    print(sum(1 for b in ex.map(lambda i: u.urlopen("http://127.0.0.1:${port}/" + str(i), timeout=5).read(), range(40)) if b.startswith(b"proxy saw")))`,
    ]);
    expect(many.stdout.trim()).toBe('40');
  });

  it('reaches nothing else: host loopback in every spelling, host addresses and sockets, outside', async () => {
    const hostAddresses = Object.values(networkInterfaces())
      .flat()
      .filter((a) => a && !a.internal)
      .map((a) => a!.address);
    const targets: Array<[string, number]> = [
      ['127.0.0.1', loopbackPort],
      ['localhost', loopbackPort],
      ['127.1', loopbackPort],
      ['0.0.0.0', loopbackPort],
      ['::1', loopbackPort],
      ['::ffff:127.0.0.1', loopbackPort],
      ['172.17.0.1', loopbackPort],
      ['host.docker.internal', loopbackPort],
      ...hostAddresses.map((a): [string, number] => [a, loopbackPort]),
      ['@vime-channel-test', 0],
      // The host's own paths of the proxy socket and the engine socket are not in the container.
      [socketPath, 0],
      [defaultDockerSocket(), 0],
      ['/var/run/docker.sock', 0],
      ['1.1.1.1', 443],
      ['8.8.8.8', 53],
      ['2606:4700:4700::1111', 443],
    ];
    for (const [host, p] of targets) {
      const r = await box.exec(['python3', '-c', CONNECT, host, String(p)]);
      expect([host, r.stdout.trim()]).not.toEqual([host, 'open']);
      expect(r.exitCode).toBe(0);
    }
    expect(reached).toBe(0);
    expect((await box.exec(['python3', '-c', CONNECT, '127.0.0.1', String(port)])).stdout.trim()).toBe(
      'open',
    );
  });

  it('binds host files and folders read-only, whatever the spelling of the write', async () => {
    expect((await box.exec(['/opt/vime/bin/tool'])).stdout).toBe('tool ran\n');
    expect((await box.exec(['cat', '/opt/vime/tools/data'])).stdout).toBe('original\n');
    const writes = [
      'echo x > /opt/vime/bin/tool',
      'echo x >> /opt/vime/bin/tool',
      'truncate -s 0 /opt/vime/bin/tool',
      'chmod 600 /opt/vime/bin/tool',
      'touch /opt/vime/bin/tool',
      'rm -f /opt/vime/bin/tool',
      'mv /opt/vime/bin/tool /opt/vime/bin/other',
      'ln -sf /bin/sh /opt/vime/bin/tool',
      'cp /bin/sh /opt/vime/bin/tool',
      'echo x > /opt/vime/tools/new',
      'mkdir /opt/vime/tools/sub',
      'echo x > /opt/vime/tools/data',
      'rm -rf /opt/vime/tools/data',
      "python3 -c \"open('/opt/vime/tools/data', 'r+').write('x')\"",
      'mount -o remount,rw /opt/vime/tools',
      'rm -f /tmp/.vime-proxy.sock',
      'mv /tmp/.vime-proxy.sock /tmp/elsewhere',
    ];
    for (const write of writes) {
      const r = await box.exec(write);
      expect([write, r.exitCode]).not.toEqual([write, 0]);
    }
    expect(readFileSync(tool, 'utf8')).toBe('#!/bin/sh\necho tool ran\n');
    expect(readFileSync(join(toolDir, 'data'), 'utf8')).toBe('original\n');
    expect(readdirSync(toolDir)).toEqual(['data']);
    expect((await box.exec(['python3', '-c', CONNECT, '127.0.0.1', String(port)])).stdout.trim()).toBe(
      'open',
    );
  });

  it('refuses an image without python3 (naming it) and a bind into the host /usr, leaving no container', async () => {
    await importImageWithoutPython(engine, noPython);
    const error = await provider
      .create({
        image: noPython,
        workdir: '/work',
        labels: { 'vime.run': 'channel-test-refused' },
        proxy: { socketPath },
      })
      .catch((e: unknown) => e);
    expect(ConfigError.isInstance(error), String(error)).toBe(true);
    expect(String(error)).toContain(noPython);
    expect(String(error)).toMatch(/python3/);
    // Without a channel the same image runs: python3 is needed by the channel alone.
    const plain = await provider.create({ image: noPython, workdir: '/work' });
    await plain.terminate();
    await expect(
      provider.create({
        image: testImage,
        workdir: '/work',
        readOnlyBinds: [{ source: tool, target: '/usr/local/bin/tool' }],
      }),
    ).rejects.toThrow(/spec\.readOnlyBinds\[0\]\.target .*host's \/usr/);
    const left = await engine.json<unknown[]>('GET', '/containers/json', {
      query: { all: true, filters: JSON.stringify({ label: ['vime.run=channel-test-refused'] }) },
    });
    expect(left).toEqual([]);
  }, 60_000);
});
