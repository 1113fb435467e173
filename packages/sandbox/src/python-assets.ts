/**
 * The Python this package runs inside sandboxes (the session supervisor, the proxy channel's forwarder)
 * ships as real files in the package's `python/` folder, tested there with pytest.
 *
 * They are found through the package's own `package.json`, resolved by name (a package may refer to
 * itself through its `exports`): that one path is right from the sources (`src/**` run by tsx or vitest)
 * and from the bundle (`dist/*.js`, whatever chunk the code lands in), with no build step that copies
 * files and nothing that depends on how deep the calling module sits.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { SandboxError } from '@vime/core';

const loaded = new Map<string, string>();

/** The absolute path of `python/<name>` in this package. */
export function pythonAssetPath(name: string): string {
  const root = dirname(createRequire(import.meta.url).resolve('@vime/sandbox/package.json'));
  return join(root, 'python', name);
}

/** The source of `python/<name>`, read once. A missing file is a broken install, said so plainly. */
export function pythonAsset(name: string): string {
  let source = loaded.get(name);
  if (source === undefined) {
    const path = pythonAssetPath(name);
    try {
      source = readFileSync(path, 'utf8');
    } catch (error) {
      throw new SandboxError(
        `@vime/sandbox's ${name} is missing at ${path} (it ships in the package's python/ folder); reinstall @vime/sandbox`,
        { cause: error, code: 'sandbox_unavailable' },
      );
    }
    loaded.set(name, source);
  }
  return source;
}
