/**
 * bubblewrap over a prepared rootfs folder: the rootfs stays read-only underneath, every sandbox gets its
 * own writable layer. The rootfs here is a minimal one assembled from the host's own binaries and their
 * shared libraries (no download), enough for the file operations and a shell.
 */
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxProvider } from '../types.js';
import { bubblewrapProvider } from './provider.js';

const TOOLS = ['sh', 'cat', 'mkdir', 'dirname', 'ls', 'touch', 'id', 'tar', 'chmod', 'rm', 'wc'];

/** Copy `path` into `root` at the same place, following and recreating every symlink on the way. */
function copyWithLinks(path: string, root: string): void {
  let current = path;
  for (let hops = 0; hops < 10; hops++) {
    const target = join(root, current);
    mkdirSync(dirname(target), { recursive: true });
    const st = lstatSync(current);
    if (!st.isSymbolicLink()) {
      if (!existsSync(target)) execFileSync('cp', ['-p', current, target]);
      return;
    }
    const link = readlinkSync(current);
    if (!existsSync(target)) symlinkSync(link, target);
    current = link.startsWith('/') ? link : join(dirname(current), link);
  }
}

function buildMiniRootfs(root: string): void {
  for (const d of ['usr/bin', 'usr/lib', 'usr/lib64', 'usr/sbin', 'etc', 'opt', 'tmp']) {
    mkdirSync(join(root, d), { recursive: true });
  }
  // Mirror the host's merged-/usr top-level links, resolved inside the rootfs.
  for (const name of ['bin', 'sbin', 'lib', 'lib64']) {
    try {
      if (lstatSync(`/${name}`).isSymbolicLink()) symlinkSync(readlinkSync(`/${name}`), join(root, name));
    } catch {
      // not on this host
    }
  }
  for (const tool of TOOLS) {
    const bin = realpathSync(
      execFileSync('sh', ['-c', `command -v ${tool}`])
        .toString()
        .trim(),
    );
    copyWithLinks(bin, root);
    const dest = join(root, 'usr/bin', tool);
    if (!existsSync(dest)) execFileSync('cp', ['-p', bin, dest]);
    const libs = execFileSync('ldd', [bin])
      .toString()
      .matchAll(/(\/[^\s)]+)/g);
    for (const [lib] of libs) copyWithLinks(lib, root);
  }
  writeFileSync(join(root, 'etc/rootfs-marker'), 'mini rootfs\n');
  execFileSync('chmod', ['1777', join(root, 'opt'), join(root, 'tmp')]);
}

describe('bubblewrap over a rootfs folder', () => {
  const rootDir = mkdtempSync(join(tmpdir(), 'vime-rootfs-test-'));
  const rootfs = join(mkdtempSync(join(tmpdir(), 'vime-rootfs-')), 'mini');
  let provider: SandboxProvider;

  beforeAll(() => {
    buildMiniRootfs(rootfs);
    provider = bubblewrapProvider({ rootDir, images: { mini: rootfs } });
  });
  afterAll(() => {
    execFileSync('rm', ['-rf', dirname(rootfs), rootDir]);
  });

  it('runs on the rootfs, with a per-sandbox writable layer over a read-only lower', async () => {
    const a = await provider.create({ workdir: '/testbed', image: 'mini' });
    const b = await provider.create({ workdir: '/testbed', image: rootfs });
    try {
      const r = await a.exec('cat /etc/rootfs-marker; ls /usr/bin | wc -l; ls /usr/bin/python3 2>&1; id -u');
      expect(r.stdout).toContain('mini rootfs');
      expect(r.stdout).toMatch(/No such file/);
      expect(Number(r.stdout.split('\n')[1])).toBeLessThan(40);
      if (process.getuid?.() === 0) expect(r.stdout.trim().split('\n').at(-1)).not.toBe('0');

      expect((await a.exec('echo layer-a > /opt/state && cat /opt/state')).stdout).toBe('layer-a\n');
      expect((await a.exec('cat /opt/state')).stdout).toBe('layer-a\n');
      expect((await b.exec('cat /opt/state 2>&1')).stdout).toMatch(/No such file/);
      expect(existsSync(join(rootfs, 'opt/state'))).toBe(false);
      expect((await a.exec('touch /etc/rootfs-marker 2>&1; touch /usr/bin/x 2>&1')).stdout).toMatch(
        /Permission denied|Read-only/,
      );

      await a.writeFile('src/main.txt', 'in the work dir\n');
      expect(await a.readTextFile('/testbed/src/main.txt')).toBe('in the work dir\n');
      const src = mkdtempSync(join(tmpdir(), 'vime-rootfs-src-'));
      writeFileSync(join(src, 'f.txt'), 'copied');
      await a.copyIn(src, 'copied');
      expect(await a.readTextFile('copied/f.txt')).toBe('copied');
      execFileSync('rm', ['-rf', src]);
    } finally {
      await Promise.all([a.terminate(), b.terminate()]);
    }
    expect(readdirSync(rootDir).filter((n) => n.startsWith('sbx-'))).toEqual([]);
    expect(readdirSync(rootfs).sort()).toEqual(expect.arrayContaining(['etc', 'opt', 'usr']));
    expect(readdirSync(join(rootfs, 'opt'))).toEqual([]);
    const mounts = execFileSync('cat', ['/proc/self/mounts']).toString();
    expect(mounts).not.toContain(rootDir);
  });

  it('rejects a rootfs path that is not a folder', async () => {
    await expect(provider.create({ workdir: '/testbed', image: '/nonexistent/rootfs' })).rejects.toThrow(
      /is not a folder/,
    );
  });
});
