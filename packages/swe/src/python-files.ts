/**
 * The Python this package runs inside sandboxes (`python/*.py`, tested there with pytest), read once. Files
 * are found through this package's own `package.json`, resolved by name (a package may refer to itself
 * through its `exports`): one path that is right from the sources (tsx, vitest) and from the bundle
 * (`dist/*.js`), with no build step that copies files.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { ConfigError } from '@vime/core';

const cache = new Map<string, string>();

/** The source of `python/<name>`. */
export function pythonSource(name: string): string {
  let source = cache.get(name);
  if (source === undefined) {
    const root = dirname(createRequire(import.meta.url).resolve('@vime/swe/package.json'));
    const path = join(root, 'python', name);
    try {
      source = readFileSync(path, 'utf8');
    } catch (error) {
      throw new ConfigError(
        `@vime/swe's ${name} is missing at ${path} (it ships in the package's python/ folder); reinstall @vime/swe`,
        { cause: error },
      );
    }
    cache.set(name, source);
  }
  return source;
}
