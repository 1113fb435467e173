/**
 * The proxy channel of a bubblewrap sandbox: the host's proxy socket answers at 127.0.0.1:<port> inside,
 * and nothing else does: not a server on the host's loopback (in every spelling), not the host's other
 * addresses, not a host abstract unix socket, not the outside. Read-only binds are readable, never writable.
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { chmod } from 'node:fs/promises';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, type Server } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bubblewrapProvider } from './bubblewrap.js';
import { PROXY_CHANNEL_PORT } from './bwrap-channel.js';
import { dockerProvider } from './docker.js';
import { localProvider } from './local.js';
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
    if host.startswith('@'):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect('\\0' + host[1:])
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
    // Refused before the engine is asked anything: no engine needs to run for this.
    await expect(
      dockerProvider({ socketPath: join(dir, 'no-engine.sock') }).create({
        workdir: '/work',
        readOnlyBinds: [{ source: file, target: '/opt/x' }],
      }),
    ).rejects.toThrow(/spec.readOnlyBinds is not supported by the docker provider/);
  });
});
