import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The published shape of every package: built ESM that plain Node imports (no source condition).
const root = fileURLToPath(new URL('../../../', import.meta.url));
const packages = readdirSync(`${root}packages`);

/** The root entry's values (functions, constants, classes) that the package's `api.txt` lists. */
function runtimeNames(apiFile: string): string[] {
  const [, root = ''] = readFileSync(apiFile, 'utf8').split(/^# .*$/m);
  return root
    .split('\n')
    .map((line) => line.match(/^(?:function|const|class) (\S+)$/)?.[1])
    .filter((name): name is string => name !== undefined)
    .sort();
}

describe('built packages', () => {
  it.each(packages)(
    '@vime/%s: exports map puts types first, ships no tests, and its build imports as ESM with every value api.txt lists',
    (name) => {
      const dir = `${root}packages/${name}/`;
      const pkg = JSON.parse(readFileSync(`${dir}package.json`, 'utf8'));
      expect(pkg.type).toBe('module');
      expect(pkg.sideEffects).toBe(false);
      for (const [entry, target] of Object.entries(pkg.exports as Record<string, unknown>)) {
        // Data files (package.json, a JSON Schema) export as plain paths; code exports carry types first.
        if (entry.endsWith('.json')) {
          expect(typeof target, entry).toBe('string');
          continue;
        }
        expect(Object.keys(target as object).filter((k) => k !== '@vime/source')[0], entry).toBe('types');
      }
      expect(pkg.files).toContain('!dist/**/*.test.*');
      expect(
        existsSync(`${dir}dist/index.js`),
        `run \`pnpm run build\` before the tests (${dir}dist is missing)`,
      ).toBe(true);
      const out = execFileSync(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `const m = await import('@vime/${name}'); console.log(JSON.stringify(Object.keys(m)))`,
        ],
        { cwd: root, encoding: 'utf8' },
      );
      expect(JSON.parse(out).sort()).toEqual(runtimeNames(`${dir}api.txt`));
    },
  );
});
