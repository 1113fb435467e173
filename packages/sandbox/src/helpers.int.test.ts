import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxError } from '@vime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bubblewrapProvider } from './bubblewrap/provider.js';
import { dockerProvider } from './docker/provider.js';
import { execDetached, runSetup, stageFiles } from './helpers.js';
import { localProvider } from './host/local-provider.js';
import { dockerAvailable, dockerForTests, testImage } from './testing.js';
import type { Sandbox, SandboxProvider } from './types.js';

const rootDir = mkdtempSync(join(tmpdir(), 'vime-helpers-test-'));
afterAll(() => rmSync(rootDir, { recursive: true, force: true }));
const backends: Array<[string, () => SandboxProvider, string | undefined]> = [
  ['bubblewrap', () => bubblewrapProvider({ rootDir }), undefined],
  ['local', () => localProvider({ rootDir }), undefined],
];
if (dockerForTests()) backends.push(['docker', () => dockerProvider(), testImage]);

describe.each(backends)('helpers on %s', (_name, makeProvider, image) => {
  let sbx: Sandbox;
  beforeAll(async () => {
    sbx = await makeProvider().create({ workdir: '/testbed', ...(image ? { image } : {}) });
  });
  afterAll(async () => {
    await sbx?.terminate();
  });

  it('stages task files and hidden eval files', async () => {
    await stageFiles(sbx, [
      { path: 'src/app.py', content: 'print("app")\n' },
      { path: '/testbed/run.sh', content: '#!/bin/sh\necho run\n', mode: 0o755 },
      { path: 'data.bin', content: new Uint8Array([1, 2, 255]) },
    ]);
    expect((await sbx.exec('python3 src/app.py && ./run.sh')).stdout).toBe('app\nrun\n');
    expect(Array.from(await sbx.readFile('data.bin'))).toEqual([1, 2, 255]);
  });

  it('retries a transient setup failure and returns the successful run', async () => {
    // Fails like a flaky mirror twice, then succeeds.
    const cmd =
      'n=$(cat .attempts 2>/dev/null || echo 0); n=$((n+1)); echo $n > .attempts; ' +
      'if [ $n -lt 3 ]; then echo "Temporary failure resolving deb.debian.org" >&2; exit 100; fi; echo ready';
    const result = await runSetup(sbx, cmd, { backoffMs: 10 });
    expect(result.stdout).toBe('ready\n');
    expect((await sbx.readTextFile('.attempts')).trim()).toBe('3');
  });

  it('does not retry a real failure and reports its exit code and output tail', async () => {
    await sbx.exec('rm -f .count');
    const error = await runSetup(
      sbx,
      'echo $(( $(cat .count 2>/dev/null || echo 0) + 1 )) > .count; echo "SyntaxError: bad" >&2; exit 2',
      {
        backoffMs: 10,
      },
    ).catch((e: unknown) => e);
    expect(SandboxError.isInstance(error) && error.code === 'setup_failed').toBe(true);
    const data = (error as SandboxError).data!;
    expect(data).toMatchObject({ exitCode: 2, attempts: 1, timedOut: false });
    expect(String(data.outputTail)).toContain('SyntaxError: bad');
    expect((await sbx.readTextFile('.count')).trim()).toBe('1');
  });

  it('gives up after the retries with the last real exit code', async () => {
    const error = await runSetup(sbx, 'echo "connection reset by peer" >&2; exit 7', {
      retries: 2,
      backoffMs: 5,
    }).catch((e: unknown) => e);
    expect((error as SandboxError).data).toMatchObject({ exitCode: 7, attempts: 3 });
    expect((error as Error).message).toContain('connection reset by peer');
  });

  it('runs long commands detached and collects output and exit code from the marker', async () => {
    const r = await execDetached(sbx, 'sleep 0.3; echo done; echo warn >&2; exit 4', { pollIntervalMs: 100 });
    expect(r).toMatchObject({ exitCode: 4, stdout: 'done\n', stderr: 'warn\n', timedOut: false });
    const t = await execDetached(sbx, 'sleep 30', { timeoutMs: 500, pollIntervalMs: 100 });
    expect(t.timedOut).toBe(true);
  });
});

describe('execDetached', () => {
  it('survives polls whose stream drops', async () => {
    if (!(process.getuid?.() === 0 || dockerAvailable()))
      throw new Error('needs a Docker engine (scripts/docker-up.sh)');
    const sbx = await dockerProvider().create({ workdir: '/testbed', image: testImage });
    try {
      let drops = 0;
      // Every other poll loses its connection, as a flaky network to a remote engine would.
      const flaky: Sandbox = Object.create(sbx, {
        exec: {
          value: (cmd: string | readonly string[], o: object) => {
            if (typeof cmd === 'string' && cmd.startsWith('cat ') && drops++ % 2 === 0) {
              return Promise.reject(new SandboxError('exec stream broke: socket hang up'));
            }
            return sbx.exec(cmd, o);
          },
        },
      });
      const r = await execDetached(flaky, 'sleep 0.5; echo survived; exit 3', { pollIntervalMs: 50 });
      expect(r).toMatchObject({ exitCode: 3, stdout: 'survived\n' });
      expect(drops).toBeGreaterThan(1);
    } finally {
      await sbx.terminate();
    }
  });
});
