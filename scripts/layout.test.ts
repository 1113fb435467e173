/**
 * The house rules a reader relies on: no source file in `packages/*\/src` over 600 lines, no import
 * circle between a package's modules, and no deadline that a garbage collection can lose.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../', import.meta.url));
const exists = (path: string) => {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
};
const MAX_LINES = 600;

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === 'node_modules' ? [] : files(path);
    return /\.(ts|py)$/.test(name) ? [path] : [];
  });
}

const packages = readdirSync(join(root, 'packages')).filter((p) => {
  try {
    return statSync(join(root, 'packages', p, 'src')).isDirectory();
  } catch {
    return false;
  }
});
const sources = packages.flatMap((p) => files(join(root, 'packages', p, 'src')));

describe('layout', () => {
  it(`no file in packages/*/src has more than ${MAX_LINES} lines`, () => {
    const long = sources
      .map((f) => ({ file: relative(root, f), lines: readFileSync(f, 'utf8').split('\n').length - 1 }))
      .filter((f) => f.lines > MAX_LINES);
    expect(long).toEqual([]);
  });

  it('no AbortSignal.timeout inside AbortSignal.any (Node 20 loses it after a GC: use deadlineSignal)', () => {
    const examples = readdirSync(join(root, 'examples')).flatMap((e) => {
      const src = join(root, 'examples', e, 'src');
      return statSync(join(root, 'examples', e)).isDirectory() && exists(src) ? files(src) : [];
    });
    const lossy = [...sources, ...examples]
      .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
      .filter((f) => /AbortSignal\.any\([^;]*AbortSignal\.timeout\(/s.test(readFileSync(f, 'utf8')))
      .map((f) => relative(root, f));
    expect(lossy).toEqual([]);
  });

  it('no import circle between the modules of a package', () => {
    const graph = new Map<string, string[]>();
    for (const file of sources.filter((f) => f.endsWith('.ts') && !/\.test\.ts$/.test(f))) {
      const text = readFileSync(file, 'utf8');
      // Value imports only: `import type` is erased and cannot make a load-order circle.
      const targets = [
        ...text.matchAll(/^(?:import|export)(?!\s+type\b)[^;]*?from\s+'(\.{1,2}\/[^']+)\.js'/gms),
      ]
        .map((m) => resolve(dirname(file), `${m[1]}.ts`))
        .filter((t) => sources.includes(t));
      graph.set(file, targets);
    }
    const circles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const walk = (node: string, path: string[]) => {
      state.set(node, 'open');
      for (const next of graph.get(node) ?? []) {
        if (state.get(next) === 'open') {
          circles.push([...path.slice(path.indexOf(next)), next].map((f) => relative(root, f)).join(' → '));
        } else if (!state.has(next)) walk(next, [...path, next]);
      }
      state.set(node, 'done');
    };
    for (const node of graph.keys()) if (!state.has(node)) walk(node, [node]);
    expect(circles).toEqual([]);
  });
});
