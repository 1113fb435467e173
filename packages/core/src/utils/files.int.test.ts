import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../errors.js';
import { ensureDirectory, pathError, readTextFile } from './files.js';

const dir = mkdtempSync(join(tmpdir(), 'vime-files-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
writeFileSync(join(dir, 'a-file'), 'text');
mkdirSync(join(dir, 'a-dir'));

describe('readTextFile', () => {
  it('reads relative to cwd and names the field and the path as given', async () => {
    expect(await readTextFile('a-file', '--config', { cwd: dir })).toBe('text');
    for (const [path, code] of [
      ['missing', 'ENOENT'],
      ['a-dir', 'EISDIR'],
      ['a-file/below', 'ENOTDIR'],
    ] as const) {
      const error = await readTextFile(path, '--config', { cwd: dir }).catch((e: unknown) => e);
      expect(ConfigError.isInstance(error), path).toBe(true);
      expect((error as Error).message).toMatch(new RegExp(`^--config ${path}: cannot read it: ${code} \\(`));
      expect((error as Error).message).not.toContain(dir);
    }
  });
});

describe('ensureDirectory', () => {
  it('creates missing levels and accepts an existing directory', async () => {
    await ensureDirectory('new/deeper/still', '--out', { cwd: dir });
    expect(statSync(join(dir, 'new/deeper/still')).isDirectory()).toBe(true);
    await ensureDirectory(join(dir, 'new'), '--out');
    await ensureDirectory('.', '--out', { cwd: dir });
  });

  it('refuses a file, or a path below one, creating nothing', async () => {
    for (const path of ['a-file', 'a-file/x', 'a-file/x/y']) {
      const error = await ensureDirectory(path, '--out', { cwd: dir }).catch((e: unknown) => e);
      expect(ConfigError.isInstance(error)).toBe(true);
      expect((error as Error).message).toBe(
        `--out ${path}: ${join(dir, 'a-file')} is a file, not a directory; name a directory`,
      );
    }
  });

  it('fails at once where mkdir answers ENOENT under an existing parent (Node’s mkdir -p loops there)', async () => {
    for (const path of ['/proc/nope', '/proc/self/nope/deeper']) {
      const error = await ensureDirectory(path, '--out').catch((e: unknown) => e);
      expect(ConfigError.isInstance(error), path).toBe(true);
      expect((error as Error).message).toMatch(new RegExp(`^--out ${path}: cannot create /proc/.*: ENOENT`));
    }
  });
});

describe('pathError', () => {
  it('leaves failures of the disk itself alone', () => {
    const full = Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
    expect(pathError(full, '--out', 'x', 'write it')).toBe(full);
    expect(pathError(new TypeError('bug'), '--out', 'x', 'write it')).toBeInstanceOf(TypeError);
  });
});

describe('writeFileAtomic', () => {
  it('leaves the old content or the new, never a part, in a writer SIGKILLed mid-write', async () => {
    const path = join(dir, 'atomic.bin');
    const size = 4 << 20;
    // A writer that rewrites the file forever, each time with a new digit (0..9) repeated `size` times.
    const writer = `
      import { writeFileAtomic } from ${JSON.stringify(new URL('./files.ts', import.meta.url).pathname)};
      for (let i = 0; ; i++) {
        await writeFileAtomic(process.argv[1], String(i % 10).repeat(${size}));
        if (i === 0) process.stdout.write('wrote\\n');
      }`;
    for (let round = 0; round < 5; round++) {
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', writer, path], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
      await new Promise((r) => setTimeout(r, 20 + round * 37));
      child.kill('SIGKILL');
      await new Promise((r) => child.once('close', r));
      const content = readFileSync(path, 'latin1');
      expect(content.length, `round ${round}`).toBe(size);
      expect(content).toBe(content[0]!.repeat(size));
    }
  });
});
