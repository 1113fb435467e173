/**
 * Checks that need the grading sandbox itself, run there after the patch is applied and before the tests:
 * which names the sandbox's own Python treats as standard-library modules, which folders are packages
 * (a module in a folder that is not a package can land on the import path), and what the changed runner
 * configuration files say once parsed. Its answer is a list of `HackFlag`s as JSON.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { ConfigError } from '@vime/core';
import type { Sandbox } from '@vime/sandbox';
import type { HackFlag } from './antihack.js';
import { sh } from './git.js';

/** Top-level modules of the test runners; a patch that adds one shadows the runner. */
const RUNNER_MODULES = [
  'pytest',
  '_pytest',
  'py',
  'pluggy',
  'iniconfig',
  'unittest',
  'doctest',
  'nose',
  'xdist',
];

/**
 * The probe's source, `python/vime_patch_probe.py` (tested there with pytest), read once. It is found
 * through this package's own `package.json`, resolved by name (a package may refer to itself through its
 * `exports`): one path that is right from the sources (tsx, vitest) and from the bundle (`dist/*.js`),
 * with no build step that copies files.
 */
let probeSource: string | undefined;
function probe(): string {
  if (probeSource === undefined) {
    const root = dirname(createRequire(import.meta.url).resolve('@vime/swe/package.json'));
    const path = join(root, 'python', 'vime_patch_probe.py');
    try {
      probeSource = readFileSync(path, 'utf8');
    } catch (error) {
      throw new ConfigError(
        `@vime/swe's patch probe is missing at ${path} (it ships in the package's python/ folder); reinstall @vime/swe`,
        { cause: error },
      );
    }
  }
  return probeSource;
}

/**
 * Run the probe over the paths the patch added and changed in the grading sandbox (Python repositories only). A probe that
 * cannot run adds nothing: the patch-level checks still apply, and the tests decide.
 */
export async function sandboxHacks(
  sandbox: Sandbox,
  files: { added: readonly string[]; changed: readonly string[] },
  options: { python?: string | undefined; signal?: AbortSignal | undefined } = {},
): Promise<HackFlag[]> {
  if (files.added.length + files.changed.length === 0) return [];
  await sandbox.writeFile('.git/vime-probe.py', probe(), { signal: options.signal });
  const r = await sh(
    sandbox,
    `${options.python ?? 'python3'} -I .git/vime-probe.py '${JSON.stringify(RUNNER_MODULES)}'`,
    {
      signal: options.signal,
      timeoutMs: 60_000,
      stdin: JSON.stringify(files),
    },
  );
  if (r.exitCode !== 0) return [];
  try {
    return JSON.parse(r.stdout) as HackFlag[];
  } catch {
    return [];
  }
}
