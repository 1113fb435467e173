/**
 * The house rules a reader relies on: no source file over 600 lines and no function over 150 lines in the
 * packages and the examples; no import circle between a package's modules; examples that are wiring
 * (small, importing packages only, never each other) and packages that never import an example; and no
 * deadline that a garbage collection can lose.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../', import.meta.url));
const MAX_LINES = 600;
const MAX_FUNCTION_LINES = 150;
/** Examples are configuration and wiring: their TypeScript together stays this small (tests excluded). */
const MAX_EXAMPLE_LINES = 3000;

const isDir = (path: string) => {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
};
const SKIP = new Set(['node_modules', 'dist', '.tsbuild', 'evidence']);

function files(dir: string, pattern = /\.(ts|py)$/): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (isDir(path)) return SKIP.has(name) ? [] : files(path, pattern);
    return pattern.test(name) ? [path] : [];
  });
}

const packages = readdirSync(join(root, 'packages')).filter((p) => isDir(join(root, 'packages', p, 'src')));
const examples = readdirSync(join(root, 'examples')).filter((e) => isDir(join(root, 'examples', e)));
const sources = packages.flatMap((p) => files(join(root, 'packages', p, 'src')));
const exampleFiles = examples.flatMap((e) => files(join(root, 'examples', e)));
/** The project's Python distribution (`python/`), held to the same file cap. */
const pythonFiles = isDir(join(root, 'python')) ? files(join(root, 'python'), /\.py$/) : [];
const isTest = (f: string) => /\.test\.ts$/.test(f) || /\/test\//.test(f);
const code = (list: string[]) => list.filter((f) => f.endsWith('.ts') && !isTest(f));
const lineCount = (f: string) => readFileSync(f, 'utf8').split('\n').length - 1;

/** Every function (declarations, methods, arrows, closures) of `file` longer than `max` lines. */
function longFunctions(file: string, max: number): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const lines = source.getLineAndCharacterOfPosition(node.end).line - first + 1;
      if (lines > max) found.push(`${relative(root, file)}:${first + 1} (${lines} lines)`);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The `@vime/…` packages and `examples/` paths a file imports. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)].map((m) => m[1]!);
}

describe('layout', () => {
  it(`no file in packages/*/src, examples/ or python/ has more than ${MAX_LINES} lines`, () => {
    const long = [...sources, ...exampleFiles, ...pythonFiles]
      .map((f) => ({ file: relative(root, f), lines: lineCount(f) }))
      .filter((f) => f.lines > MAX_LINES);
    expect(long).toEqual([]);
  });

  it(`no function in packages/*/src or examples/ is longer than ${MAX_FUNCTION_LINES} lines (tests excepted)`, () => {
    const long = code([...sources, ...exampleFiles]).flatMap((f) => longFunctions(f, MAX_FUNCTION_LINES));
    expect(long).toEqual([]);
  });

  it(`the examples are wiring: their TypeScript is at most ${MAX_EXAMPLE_LINES} lines together (tests excepted)`, () => {
    const total = code(exampleFiles).reduce((sum, f) => sum + lineCount(f), 0);
    expect(total).toBeLessThanOrEqual(MAX_EXAMPLE_LINES);
  });

  it('no example imports another example, and no package imports an example', () => {
    const crossing: string[] = [];
    for (const example of examples) {
      const manifest = JSON.parse(readFileSync(join(root, 'examples', example, 'package.json'), 'utf8'));
      for (const dep of Object.keys({ ...manifest.dependencies, ...manifest.devDependencies }))
        if (dep.startsWith('@vime/example-')) crossing.push(`examples/${example}/package.json: ${dep}`);
    }
    for (const file of [...sources, ...exampleFiles].filter((f) => f.endsWith('.ts'))) {
      const own = relative(root, file).split('/').slice(0, 2).join('/');
      for (const spec of importsOf(file)) {
        const target = spec.startsWith('.') ? relative(root, resolve(dirname(file), spec)) : spec;
        const example = /^examples\/[^/]+/.exec(target)?.[0];
        if (spec.startsWith('@vime/example-') || (example && example !== own))
          crossing.push(`${relative(root, file)}: ${spec}`);
      }
    }
    for (const file of [...exampleFiles, ...pythonFiles].filter((f) => f.endsWith('.py'))) {
      const text = readFileSync(file, 'utf8');
      if (/sys\.path\.(insert|append)/.test(text)) crossing.push(`${relative(root, file)}: edits sys.path`);
    }
    expect(crossing).toEqual([]);
  });

  it('no AbortSignal.timeout inside AbortSignal.any (Node 20 loses it after a GC: use deadlineSignal)', () => {
    const lossy = code([...sources, ...exampleFiles])
      .filter((f) => /AbortSignal\.any\([^;]*AbortSignal\.timeout\(/s.test(readFileSync(f, 'utf8')))
      .map((f) => relative(root, f));
    expect(lossy).toEqual([]);
  });

  it('no import circle between the modules of a package', () => {
    const graph = new Map<string, string[]>();
    for (const file of code(sources)) {
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
