/**
 * `pnpm release:pack [dir] [--no-build]`: builds the packages and writes one installable tarball per package
 * into `release/` (or `dir`), then checks each tarball as a user receives it: its package.json names only
 * what the tarball holds (no `@vime/source` condition, no `src/`, no `workspace:` range; every file an
 * export or a bin names is inside), every `@vime/*` dependency is this release's version, the LICENSE is
 * the repository's, and every relative link of its Markdown resolves (to a file and heading inside the
 * tarball, or inside a `@vime/*` package it depends on, which an install puts beside it).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/** One packed package, unpacked into a temporary folder for the checks. */
export interface Packed {
  name: string;
  version: string;
  tarball: string;
  /** The unpacked `package/` folder. */
  dir: string;
  manifest: Manifest;
}

interface Manifest {
  name: string;
  version: string;
  exports?: unknown;
  bin?: Record<string, string>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

/** Packs every package of `packages/` into `out` (built first unless `build` is false) and unpacks each. */
export function packRelease(out: string, { build = true } = {}): Packed[] {
  if (build) execFileSync('pnpm', ['run', 'build'], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
  rmSync(out, { recursive: true, force: true });
  const listed = JSON.parse(
    execFileSync('pnpm', ['-r', '--filter', './packages/*', 'pack', '--pack-destination', out, '--json'], {
      cwd: root,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  ) as { name: string; version: string; filename: string }[];
  const unpacked = mkdtempSync(join(tmpdir(), 'vime-release-'));
  return listed.map(({ name, version, filename }) => {
    const dir = join(unpacked, name.replace('/', '+'));
    execFileSync('mkdir', ['-p', dir]);
    execFileSync('tar', ['-xzf', filename, '-C', dir]);
    const manifest = JSON.parse(readFileSync(join(dir, 'package', 'package.json'), 'utf8')) as Manifest;
    return { name, version, tarball: filename, dir: join(dir, 'package'), manifest };
  });
}

/** Every string an `exports` map points at. */
function exportTargets(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (typeof value !== 'object' || value === null) return [];
  return Object.values(value).flatMap(exportTargets);
}

/** What is wrong with a packed package.json (an empty list when nothing is). */
export function manifestProblems(pkg: Packed, version: string): string[] {
  const problems: string[] = [];
  const text = JSON.stringify(pkg.manifest);
  if (text.includes('@vime/source')) problems.push('package.json keeps the @vime/source condition');
  if (text.includes('workspace:')) problems.push('package.json keeps a workspace: range');
  if (/"\.?\/?src\//.test(text)) problems.push('package.json names a file under src/, which is not shipped');
  if (pkg.version !== version) problems.push(`version ${pkg.version}, the release is ${version}`);
  for (const [dep, range] of Object.entries({
    ...pkg.manifest.dependencies,
    ...pkg.manifest.peerDependencies,
  })) {
    if (dep.startsWith('@vime/') && range !== version)
      problems.push(`depends on ${dep}@${range}, not this release's ${version}`);
  }
  const targets = [...exportTargets(pkg.manifest.exports), ...Object.values(pkg.manifest.bin ?? {})];
  for (const target of targets) {
    if (!existsSync(join(pkg.dir, target)))
      problems.push(`${target} is named in package.json but not packed`);
  }
  return problems;
}

/** GitHub's anchors of a Markdown file's headings. */
export function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of markdown.replace(/^```[\s\S]*?^```/gm, '').split('\n')) {
    const heading = /^#{1,6}\s+(.*)$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = heading
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\- _]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

function markdownFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === 'node_modules' ? [] : markdownFiles(path);
    return name.endsWith('.md') ? [path] : [];
  });
}

/**
 * Relative links of a package's Markdown that lead nowhere once installed. A link may leave the package
 * only for a `@vime/*` package it depends on (`../swe`): an install puts that one beside it.
 */
export function linkProblems(pkg: Packed, all: Packed[]): string[] {
  const home = dirname(pkg.dir);
  const beside = new Map(
    all
      .filter((p) => p.name in (pkg.manifest.dependencies ?? {}))
      .map((p) => [join(home, p.name.slice('@vime/'.length)), p.dir]),
  );
  const problems: string[] = [];
  for (const file of markdownFiles(pkg.dir)) {
    const text = readFileSync(file, 'utf8').replace(/^```[\s\S]*?^```/gm, '');
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (!target || /^[a-z]+:/i.test(target)) continue;
      const [path = '', anchor] = target.split('#');
      let resolved = path === '' ? file : resolve(dirname(file), path);
      const rel = relative(pkg.dir, resolved);
      if (rel.startsWith('..')) {
        const sibling = [...beside].find(([at]) => resolved === at || resolved.startsWith(`${at}/`));
        resolved = sibling ? join(sibling[1], relative(sibling[0], resolved)) : '';
      }
      const where = `${relative(pkg.dir, file)}: (${target})`;
      if (!resolved || !existsSync(resolved)) {
        problems.push(`${where} leads nowhere in an install`);
        continue;
      }
      if (statSync(resolved).isDirectory()) resolved = join(resolved, 'README.md');
      if (anchor && !(existsSync(resolved) && headingAnchors(readFileSync(resolved, 'utf8')).has(anchor)))
        problems.push(`${where}: no heading #${anchor} there`);
    }
  }
  return problems;
}

/** Every problem of a release, each prefixed with its package. */
export function releaseProblems(packed: Packed[]): string[] {
  const license = readFileSync(join(root, 'LICENSE'), 'utf8');
  const version = packed[0]?.version ?? '';
  return packed.flatMap((pkg) => {
    const licensed =
      existsSync(join(pkg.dir, 'LICENSE')) && readFileSync(join(pkg.dir, 'LICENSE'), 'utf8') === license;
    return [
      ...(licensed ? [] : ['LICENSE missing or not the repository’s']),
      ...manifestProblems(pkg, version),
      ...linkProblems(pkg, packed),
    ].map((problem) => `${pkg.name}: ${problem}`);
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const out = resolve(args.find((a) => !a.startsWith('--')) ?? join(root, 'release'));
  const packed = packRelease(out, { build: !args.includes('--no-build') });
  for (const pkg of packed) {
    console.log(
      `${relative(process.cwd(), pkg.tarball)}  ${(statSync(pkg.tarball).size / 1024).toFixed(0)} KiB`,
    );
  }
  const problems = releaseProblems(packed);
  for (const problem of problems) console.error(problem);
  for (const pkg of packed) rmSync(dirname(dirname(pkg.dir)), { recursive: true, force: true });
  process.exit(problems.length === 0 ? 0 : 1);
}
