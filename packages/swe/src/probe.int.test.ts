/**
 * The grading probe lives in `python/vime_patch_probe.py`: its own pytest suite passes, and both the
 * sources and the built bundle load it from there (the bundle carries none of it inline).
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { localProvider, type Sandbox } from '@vime/sandbox';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sandboxHacks } from './probe.js';

const run = promisify(execFile);
const packageRoot = fileURLToPath(new URL('../', import.meta.url));

describe('the patch probe (python/)', () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await localProvider().create({ workdir: '/testbed' });
  });
  afterAll(() => sandbox?.terminate());

  it('passes its pytest suite (python/tests), which collects tests', async () => {
    const r = await run('python3', ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'python/tests'], {
      cwd: packageRoot,
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' },
      timeout: 120_000,
    }).catch((error: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`pytest failed: ${error.stdout ?? ''}${error.stderr ?? error.message}`);
    });
    const passed = Number(/(\d+) passed/.exec(r.stdout)?.[1] ?? 0);
    expect(passed, r.stdout).toBeGreaterThan(0);
    expect(r.stdout).not.toMatch(/failed|error/);
  }, 150_000);

  it('is what the sources run in the sandbox', async () => {
    await sandbox.writeFile('pytest.py', '');
    await sandbox.writeFile('setup.cfg', '[tool:pytest]\naddopts = -q\n');
    const flags = await sandboxHacks(sandbox, { added: ['pytest.py'], changed: ['setup.cfg'] });
    expect(flags.map((f) => f.kind).sort()).toEqual(['module_shadowing', 'test_config_changed']);
    expect(await sandbox.readTextFile('.git/vime-probe.py')).toBe(
      readFileSync(join(packageRoot, 'python/vime_patch_probe.py'), 'utf8'),
    );
  });

  it('is what the built dist runs: plain node, @vime/swe from dist/', async () => {
    const dist = join(packageRoot, 'dist');
    const bundle = readdirSync(dist)
      .filter((f) => f.endsWith('.js'))
      .map((f) => readFileSync(join(dist, f), 'utf8'))
      .join('\n');
    expect(bundle, 'the bundle is stale: run pnpm run build').toContain('vime_patch_probe.py');
    expect(bundle).not.toContain('stdlib_module_names');
    const fixture = fileURLToPath(new URL('./__fixtures__/dist-probe.mjs', import.meta.url));
    const r = await run(process.execPath, [fixture], { cwd: packageRoot, timeout: 60_000 });
    const result = JSON.parse(r.stdout.trim().split('\n').at(-1) ?? '');
    expect(result.module).toBe(`file://${join(dist, 'index.js')}`);
    expect(result.flags).toEqual([
      {
        kind: 'module_shadowing',
        detail: "json.py defines a module 'json' that shadows the standard library",
      },
    ]);
  }, 90_000);
});
