/**
 * The suite's three tiers, told apart by a test file's name:
 * - `*.attack.test.ts`: hostile input, floods, fork bombs and signals that need the machine to themselves;
 *   they run last, one file at a time;
 * - `*.int.test.ts`, `*.e2e.test.ts` and whatever sits in an `e2e/` folder: real components (bubblewrap,
 *   Docker, git and pytest, Python, Chromium, child processes);
 * - every other `*.test.ts`: unit tests, pure computation and in-process code (loopback servers of their
 *   own at most), fully parallel. `unitViolations` checks that a unit test uses none of the real components.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

export type Tier = 'unit' | 'integration' | 'attack';

export const TEST_FILES = [
  'packages/*/src/**/*.test.ts',
  'scripts/**/*.test.ts',
  'examples/*/src/**/*.test.ts',
  'examples/*/test/**/*.test.ts',
];
const ATTACK_SUFFIX = '.attack.test.ts';
const INTEGRATION_SUFFIXES = ['.int.test.ts', '.e2e.test.ts'];
/** `TEST_FILES` narrowed to the files whose name ends with `suffix`. */
const named = (suffix: string) => TEST_FILES.map((glob) => glob.replace('.test.ts', suffix));
export const ATTACK_FILES = named(ATTACK_SUFFIX);
export const INTEGRATION_FILES = [
  ...INTEGRATION_SUFFIXES.flatMap(named),
  'packages/*/src/**/e2e/**/*.test.ts',
];

/** Every test file under `root` that `TEST_FILES` names, relative to `root`. */
export function testFiles(root: string): string[] {
  const walk = (dir: string): string[] =>
    readdirSync(dir).flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return name === 'node_modules' || name === 'dist' ? [] : walk(path);
      return name.endsWith('.test.ts') ? [relative(root, path)] : [];
    });
  const tops = ['scripts', ...readdirSync(join(root, 'packages')).map((p) => `packages/${p}/src`)];
  for (const e of readdirSync(join(root, 'examples'))) tops.push(`examples/${e}/src`, `examples/${e}/test`);
  return tops.filter((t) => existsSync(join(root, t))).flatMap((t) => walk(join(root, t)));
}

export function tierOf(file: string): Tier {
  if (file.endsWith(ATTACK_SUFFIX)) return 'attack';
  if (INTEGRATION_SUFFIXES.some((suffix) => file.endsWith(suffix)) || file.includes('/e2e/'))
    return 'integration';
  return 'unit';
}

/**
 * What a unit test may not touch: child processes, sandboxes, the offline task set (built with git and
 * pytest), Python, Chromium, harness installs, and the loops and servers that start all of these.
 */
const REAL_COMPONENTS = new Set([
  'child_process',
  'spawn',
  'spawnSync',
  'execFile',
  'execFileSync',
  'execSync',
  'runProcess',
  'runProcessOk',
  'bubblewrapProvider',
  'dockerProvider',
  'localProvider',
  'providerFor',
  'DockerEngine',
  'buildOfflineTaskSet',
  'sharedOfflineSet',
  'renderHtmlInChromium',
  'findPython',
  'torchPythonOrSkip',
  'installHarness',
  'runHarness',
  'runLoop',
  'loopMain',
  'serveMain',
]);

/** The identifiers of `file` (comments and strings left out), and the local helper files it imports. */
function scan(file: string): { identifiers: Set<string>; helpers: string[] } {
  const text = readFileSync(file, 'utf8');
  const scanner = ts.createScanner(ts.ScriptTarget.Latest, true, ts.LanguageVariant.Standard, text);
  const identifiers = new Set<string>();
  for (let kind = scanner.scan(); kind !== ts.SyntaxKind.EndOfFileToken; kind = scanner.scan()) {
    if (kind === ts.SyntaxKind.Identifier) identifiers.add(scanner.getTokenValue());
  }
  if (/from '(node:)?child_process'/.test(text)) identifiers.add('child_process');
  const helpers = [...text.matchAll(/from '(\.{1,2}\/[^']+)\.js'/g)]
    .map((m) => resolve(dirname(file), `${m[1]}.ts`))
    .filter((f) => existsSync(f) && /__fixtures__|testing/.test(f));
  return { identifiers, helpers };
}

/** The real components a unit test file uses, itself or through the test helpers it imports. */
export function unitViolations(file: string): string[] {
  const found = new Set<string>();
  const seen = new Set<string>();
  const visit = (path: string, depth: number) => {
    if (seen.has(path) || depth > 3) return;
    seen.add(path);
    const { identifiers, helpers } = scan(path);
    for (const id of identifiers) if (REAL_COMPONENTS.has(id)) found.add(id);
    for (const helper of helpers) visit(helper, depth + 1);
  };
  visit(file, 0);
  return [...found].sort();
}
