/**
 * The Python this package runs inside sandboxes lives in `python/`: its own pytest suite passes, and both
 * the sources and the built bundle load it from there (the bundle carries none of it inline).
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { supervisorSource } from './bubblewrap/supervisor.js';
import { forwarderSource } from './channel.js';
import { pythonAssetPath } from './python-assets.js';

const run = promisify(execFile);
const packageRoot = fileURLToPath(new URL('../', import.meta.url));

describe('python/', () => {
  it('passes its pytest suite (python/tests), which collects tests', async () => {
    const r = await run('python3', ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'python/tests'], {
      cwd: packageRoot,
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' },
      timeout: 120_000,
    }).catch((error: { stdout?: string | undefined; stderr?: string | undefined; message: string }) => {
      throw new Error(`pytest failed: ${error.stdout ?? ''}${error.stderr ?? error.message}`);
    });
    const passed = Number(/(\d+) passed/.exec(r.stdout)?.[1] ?? 0);
    expect(passed, r.stdout).toBeGreaterThan(0);
    expect(r.stdout).not.toMatch(/failed|error/);
  }, 150_000);

  it('is what the sources load', () => {
    expect(pythonAssetPath('x.py')).toBe(join(packageRoot, 'python', 'x.py'));
    expect(supervisorSource()).toBe(
      readFileSync(join(packageRoot, 'python/vime_sandbox_supervisor.py'), 'utf8'),
    );
    expect(forwarderSource()).toBe(readFileSync(join(packageRoot, 'python/vime_proxy_forwarder.py'), 'utf8'));
  });

  it('is what the built dist loads: a proxy channel session starts from the bundle run by plain node', async () => {
    const dist = join(packageRoot, 'dist');
    const bundle = readdirSync(dist)
      .filter((f) => f.endsWith('.js'))
      .map((f) => readFileSync(join(dist, f), 'utf8'))
      .join('\n');
    expect(bundle, 'the bundle is stale: run pnpm run build').toContain('vime_sandbox_supervisor.py');
    expect(bundle).not.toContain('selectors.DefaultSelector');
    const fixture = fileURLToPath(new URL('./__fixtures__/dist-python.mjs', import.meta.url));
    const r = await run(process.execPath, [fixture], { cwd: packageRoot, timeout: 90_000 });
    const result = JSON.parse(r.stdout.trim().split('\n').at(-1) ?? '');
    expect(result).toMatchObject({ exitCode: 0, stdout: 'hello from the host\n' });
    expect(result.module).toBe(`file://${join(dist, 'index.js')}`);
  }, 120_000);
});
