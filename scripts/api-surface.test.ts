import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { packageSurface } from './api-surface.js';

// Each package's public surface is committed in its api.txt, so a change to it is a visible diff.
const packagesDir = fileURLToPath(new URL('../packages/', import.meta.url));
const packages = readdirSync(packagesDir);

describe('public API surface', () => {
  it.each(packages)(
    '@vime/%s exports exactly what its api.txt lists (`pnpm run api` rewrites it)',
    (name) => {
      const dir = join(packagesDir, name);
      expect(packageSurface(dir)).toBe(readFileSync(join(dir, 'api.txt'), 'utf8'));
    },
    // compiling a package's sources is CPU work whose duration depends on the machine's load, not on the code
    300_000,
  );

  it.each(packages)('@vime/%s names every export in its root (no `export *`)', (name) => {
    const root = readFileSync(join(packagesDir, name, 'src/index.ts'), 'utf8');
    expect(root).not.toMatch(/export (type )?\*/);
  });
});
