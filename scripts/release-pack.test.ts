/**
 * The checks `pnpm release:pack` runs on each tarball, on unpacked packages written here: what a packed
 * package.json may name, and which Markdown links resolve once the package is installed.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { headingAnchors, linkProblems, manifestProblems, type Packed } from './release-pack.js';

const made: string[] = [];
afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** An unpacked package `name` in `home` (the folder an install puts `@vime/*` packages side by side in). */
function unpacked(
  home: string,
  name: string,
  manifest: Partial<Packed['manifest']>,
  files: Record<string, string>,
) {
  const dir = join(home, name.slice('@vime/'.length), 'package');
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return {
    name,
    version: '0.2.0',
    tarball: `${dir}.tgz`,
    dir,
    manifest: { name, version: '0.2.0', ...manifest },
  };
}

function home(): string {
  const dir = mkdtempSync(join(tmpdir(), 'vime-release-test-'));
  made.push(dir);
  return dir;
}

describe('a packed package.json', () => {
  const exportsMap = { '.': { types: './dist/index.d.ts', import: './dist/index.js' } };
  const files = { 'dist/index.js': '', 'dist/index.d.ts': '' };

  it('passes when it names only packed files and this release of its siblings', () => {
    const pkg = unpacked(
      home(),
      '@vime/grpo',
      { exports: exportsMap, dependencies: { '@vime/core': '0.2.0' } },
      files,
    );
    expect(manifestProblems(pkg, '0.2.0')).toEqual([]);
  });

  it('fails on the workspace condition, a src/ path, a workspace range, another version and an absent file', () => {
    const pkg = unpacked(
      home(),
      '@vime/grpo',
      {
        exports: { '.': { '@vime/source': './src/index.ts', ...exportsMap['.'] }, './x': './dist/x.js' },
        dependencies: { '@vime/core': 'workspace:*', '@vime/metrics': '0.1.0', zod: '4.6.7' },
        bin: { 'vime-grpo': './dist/cli.js' },
      },
      files,
    );
    expect(manifestProblems(pkg, '0.2.0')).toEqual([
      'package.json keeps the @vime/source condition',
      'package.json keeps a workspace: range',
      'package.json names a file under src/, which is not shipped',
      "depends on @vime/core@workspace:*, not this release's 0.2.0",
      "depends on @vime/metrics@0.1.0, not this release's 0.2.0",
      './src/index.ts is named in package.json but not packed',
      './dist/x.js is named in package.json but not packed',
      './dist/cli.js is named in package.json but not packed',
    ]);
  });
});

describe('Markdown links of a packed package', () => {
  it('resolve to files and headings inside it, or inside a @vime package it depends on (installed beside it)', () => {
    const at = home();
    const core = unpacked(
      at,
      '@vime/core',
      {},
      { 'README.md': '# @vime/core\n\n## The data model (`@vime/core`)\n' },
    );
    const grpo = unpacked(
      at,
      '@vime/grpo',
      { dependencies: { '@vime/core': '0.2.0' } },
      {
        'README.md': [
          '# @vime/grpo',
          'See [the runtime](docs/runtime.md#stand-in-engine), [core](../core),',
          '[its model](../core/README.md#the-data-model-vimecore), [a site](https://example.org/x) and [here](#vimegrpo).',
          '```md',
          '[inside a code block](nowhere.md)',
          '```',
        ].join('\n'),
        'docs/runtime.md': '## Stand-in engine\n',
      },
    );
    expect(linkProblems(grpo, [core, grpo])).toEqual([]);
  });

  it('fail for a file not packed, a missing heading, the repository outside, and a package it does not depend on', () => {
    const at = home();
    const swe = unpacked(at, '@vime/swe', {}, { 'README.md': '# @vime/swe\n' });
    const sandbox = unpacked(
      at,
      '@vime/sandbox',
      { dependencies: {} },
      {
        'README.md': [
          '[docs](docs/runtime.md) [tests](python/tests) [arch](../../ARCHITECTURE.md)',
          '[swe](../swe) [me](#no-such-heading)',
        ].join('\n'),
      },
    );
    expect(linkProblems(sandbox, [swe, sandbox])).toEqual([
      'README.md: (docs/runtime.md) leads nowhere in an install',
      'README.md: (python/tests) leads nowhere in an install',
      'README.md: (../../ARCHITECTURE.md) leads nowhere in an install',
      'README.md: (../swe) leads nowhere in an install',
      'README.md: (#no-such-heading): no heading #no-such-heading there',
    ]);
  });

  it('name headings as GitHub does: lower case, punctuation dropped, repeats numbered', () => {
    const anchors = headingAnchors('# A `B`: c/d (e)\n## Tests\n## Tests\n```\n# not a heading\n```\n');
    expect([...anchors]).toEqual(['a-b-cd-e', 'tests', 'tests-1']);
  });
});
