import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '@vime/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_POOL_NAME_LENGTH, poolName } from './names.js';
import { killByEnv } from './process-markers.js';
import { packTar, unpackTar } from './tar.js';

describe('poolName', () => {
  it('makes Kubernetes-safe names and keeps the run suffix whole', () => {
    expect(poolName('SWE-smith/pandas-dev__pandas.95b5c9a2', 'run-42')).toBe(
      'swe-smith-pandas-dev-pandas-95b5c9a2-run-42',
    );
    expect(poolName('Image:Latest')).toBe('image-latest');
    expect(poolName('___')).toBe('pool');
  });

  it('never exceeds 58 characters, never truncates the suffix, and keeps long bases distinct', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 200 }), fc.stringMatching(/^[a-z0-9]{1,20}$/), (base, run) => {
        const name = poolName(base, run);
        expect(name.length).toBeLessThanOrEqual(MAX_POOL_NAME_LENGTH);
        expect(name).toMatch(/^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/);
        expect(name.endsWith(`-${run}`)).toBe(true);
      }),
    );
    const long = 'x'.repeat(80);
    expect(poolName(`${long}a`, 'r1')).not.toBe(poolName(`${long}b`, 'r1'));
  });

  it('rejects a suffix that leaves no room', () => {
    expect(() => poolName('base', 'r'.repeat(55))).toThrow(ConfigError);
    expect(() => poolName('base', '///')).toThrow(/no usable characters/);
  });
});

describe('tar', () => {
  it('packs archives that GNU tar reads, with long names, modes and owners', () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-tar-'));
    const longName = `${'deep/'.repeat(30)}file.txt`;
    const archive = packTar([
      { name: 'a/b', type: 'dir', uid: 1000, gid: 1000 },
      { name: 'a/b/x.sh', type: 'file', content: '#!/bin/sh\n', mode: 0o755, uid: 1000, gid: 1000 },
      { name: longName, type: 'file', content: new Uint8Array([1, 2, 3]) },
    ]);
    writeFileSync(join(dir, 'x.tar'), archive);
    const listing = execFileSync('tar', ['-tvf', join(dir, 'x.tar'), '--numeric-owner']).toString();
    expect(listing).toMatch(/^drwxr-xr-x 1000\/1000 .* a\/b\/$/m);
    expect(listing).toMatch(/^-rwxr-xr-x 1000\/1000 .* a\/b\/x\.sh$/m);
    expect(listing).toContain(longName);
    execFileSync('tar', ['-xf', join(dir, 'x.tar'), '-C', dir]);
    expect(readFileSync(join(dir, longName))).toEqual(Buffer.from([1, 2, 3]));
    rmSync(dir, { recursive: true, force: true });
  });

  it('reads archives GNU tar writes (long names, symlinks, dirs)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-tar-'));
    const longDir = join(dir, 'src', 'p'.repeat(120));
    execFileSync('mkdir', ['-p', longDir]);
    writeFileSync(join(longDir, 'f.txt'), 'payload');
    execFileSync('ln', ['-s', 'target/elsewhere', join(dir, 'src', 'link')]);
    const archive = execFileSync('tar', ['-C', join(dir, 'src'), '-cf', '-', '.']);
    const entries = unpackTar(archive);
    const file = entries.find((e) => e.name.endsWith('f.txt'));
    expect(file?.type).toBe('file');
    expect(file?.name).toBe(`./${'p'.repeat(120)}/f.txt`);
    expect(Buffer.from(file!.content).toString()).toBe('payload');
    const link = entries.find((e) => e.name === './link');
    expect(link).toMatchObject({ type: 'symlink', linkname: 'target/elsewhere' });
    expect(entries.find((e) => e.name === './')?.type).toBe('dir');
    rmSync(dir, { recursive: true, force: true });
  });

  it('round-trips its own archives', () => {
    fc.assert(
      fc.property(
        fc.stringMatching(/^[a-z0-9_.-]{1,150}$/),
        fc.uint8Array({ maxLength: 2000 }),
        (name, content) => {
          const [entry] = unpackTar(packTar([{ name, type: 'file', content, mode: 0o600, uid: 7, gid: 8 }]));
          expect(entry).toMatchObject({ name, type: 'file', mode: 0o600, uid: 7, gid: 8 });
          expect(Array.from(entry!.content)).toEqual(Array.from(content));
        },
      ),
    );
  });
});

describe('killByEnv', () => {
  /** Processes (but this one) whose environment carries `name=value`. */
  function marked(name: string, value: string): number[] {
    const needle = Buffer.from(`${name}=${value}\0`);
    return readdirSync('/proc').flatMap((e) => {
      if (!/^\d+$/.test(e) || Number(e) === process.pid) return [];
      try {
        return readFileSync(`/proc/${e}/environ`).includes(needle) ? [Number(e)] : [];
      } catch {
        return [];
      }
    });
  }

  it('leaves no marked process, even children forked while it scans or not dead yet', async () => {
    for (let round = 0; round < 5; round++) {
      const value = `units-${process.pid}-${round}`;
      // forks a sleeper every millisecond or so (gently: other tests share the machine), so one pass over
      // /proc misses the newest
      const spawner = spawn('sh', ['-c', 'while :; do sleep 30 & sleep 0.002; done'], {
        env: { ...process.env, VIME_TEST_MARK: value },
        stdio: 'ignore',
      });
      try {
        const started = Date.now();
        while (marked('VIME_TEST_MARK', value).length < 20 && Date.now() - started < 10_000) {
          await new Promise((r) => setTimeout(r, 10));
        }
        killByEnv('VIME_TEST_MARK', value);
        expect(marked('VIME_TEST_MARK', value)).toEqual([]);
      } finally {
        spawner.kill('SIGKILL');
        for (const pid of marked('VIME_TEST_MARK', value)) process.kill(pid, 'SIGKILL');
      }
    }
  });
});
