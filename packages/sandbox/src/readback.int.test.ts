/**
 * Reading sandbox files back to the host is capped: a huge file, an endless device or a FIFO that never
 * ends fails with `file_too_large` (naming the cap and the fix) instead of filling this process's memory,
 * on every backend.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testImage } from './__fixtures__/support.js';
import { bubblewrapProvider } from './bubblewrap/provider.js';
import { dockerProvider } from './docker/provider.js';
import { localProvider } from './host/local-provider.js';
import { DEFAULT_MAX_READ_BYTES } from './output.js';
import { dockerForTests } from './testing.js';
import type { Sandbox, SandboxProvider } from './types.js';

const rootDir = mkdtempSync(join(tmpdir(), 'vime-readback-test-'));
afterAll(() => rmSync(rootDir, { recursive: true, force: true }));

const backends: Array<[string, () => SandboxProvider, string | undefined]> = [
  ['bubblewrap', () => bubblewrapProvider({ rootDir }), undefined],
  ['bubblewrap (per-exec)', () => bubblewrapProvider({ rootDir, execMode: 'per-exec' }), undefined],
  ['local', () => localProvider({ rootDir }), undefined],
];
if (dockerForTests()) backends.push(['docker', () => dockerProvider(), testImage]);

const tooLarge = (e: unknown) => SandboxError.isInstance(e) && e.code === 'file_too_large';

describe.each(backends)('%s read-backs are capped', (_name, makeProvider, image) => {
  let sbx: Sandbox;
  beforeAll(async () => {
    sbx = await makeProvider().create({ workdir: '/testbed', limits: 'none', ...(image ? { image } : {}) });
    // Sparse: large to read, free to make.
    const r = await sbx.exec(
      'truncate -s 600M huge && head -c 2097152 /dev/zero > two-mib && ln -s /dev/zero zeros && mkfifo fifo',
    );
    expect(r.exitCode, r.output).toBe(0);
  });
  afterAll(async () => {
    await sbx?.terminate();
  });

  it('refuses a 600 MB file with the default cap, without reading it into memory', async () => {
    const before = process.memoryUsage().rss;
    const error = await sbx.readFile('huge').catch((e: unknown) => e);
    // Reading it whole would cost at least its 600 MB (and several times that while decoding).
    const grew = process.memoryUsage().rss - before;
    expect(tooLarge(error), String(error)).toBe(true);
    expect((error as Error).message).toContain(`larger than the ${DEFAULT_MAX_READ_BYTES}-byte read cap`);
    expect((error as Error).message).toContain('pass a larger { maxBytes } to readFile');
    expect(grew).toBeLessThan(300 << 20);
  });

  it('honours a smaller and a larger maxBytes', async () => {
    await expect(sbx.readFile('two-mib', { maxBytes: 1 << 20 })).rejects.toSatisfy(tooLarge);
    expect((await sbx.readFile('two-mib', { maxBytes: 2 << 20 })).length).toBe(2 << 20);
    await expect(sbx.readTextFile('two-mib', { maxBytes: 1000 })).rejects.toSatisfy(tooLarge);
  });

  it('refuses an endless device behind a symlink and a FIFO that never ends', async () => {
    // The engine's archive endpoint cannot see into the container's /dev mount at all (not found).
    await expect(sbx.readFile('zeros', { maxBytes: 1 << 20 })).rejects.toSatisfy(
      (e: unknown) =>
        tooLarge(e) || (SandboxError.isInstance(e) && /not a regular file|no such file/.test(e.message)),
    );
    // A writer that never stops: the read must stop at the cap, not wait for the end.
    const writer = sbx.exec('yes > fifo', { timeoutMs: 30_000 }).catch(() => undefined);
    const error = await sbx.readFile('fifo', { maxBytes: 1 << 20 }).catch((e: unknown) => e);
    expect(
      tooLarge(error) ||
        (SandboxError.isInstance(error) && /not a regular file/.test((error as Error).message)),
      String(error),
    ).toBe(true);
    await sbx.exec('pkill -x yes; true');
    await writer;
  });
});
