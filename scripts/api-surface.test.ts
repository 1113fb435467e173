import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { packageSurface, surface } from './api-surface.js';

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

  it('lists a class, function or const exported as a type (`export type { C }`) as a type: no value at run time', () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-surface-'));
    try {
      writeFileSync(join(dir, 'a.ts'), 'export class C {}\nexport class D {}\nexport const k = 1;\n');
      writeFileSync(join(dir, 'b.ts'), "export type { C } from './a.js';\nexport { D, k } from './a.js';\n");
      writeFileSync(
        join(dir, 'index.ts'),
        "export { C, D } from './b.js';\nexport type { k } from './b.js';\nexport { D as E } from './a.js';\n",
      );
      expect(surface(join(dir, 'index.ts'))).toEqual(['type C', 'class D', 'class E', 'type k']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
