// Internal to this package's tests (not the `./testing` entry): running a fixture as another
// (unprivileged) user, and looking for what a run left on the host.
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  accessSync,
  chmodSync,
  chownSync,
  constants,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  statSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DockerEngine, defaultDockerSocket } from '../docker/engine-api.js';
import { dockerAvailable } from '../testing.js';

export { dockerAvailable, testImage } from '../testing.js';

export const isRoot = process.getuid?.() === 0;
export const repoRoot = fileURLToPath(new URL('../../../../', import.meta.url));
export const nodeArgs = ['--import', 'tsx', '--conditions=@vime/source'];

/** The uid the non-root variants run as when the suite runs as root (no passwd entry needed). */
export const OTHER_UID = 64_123;

/**
 * A fresh folder owned by the user the tests run fixtures as (this user, or `OTHER_UID` when root), for
 * sandbox state and the fixture's own temp files.
 */
export function userDir(prefix: string, asOther: boolean): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  // Sandbox uids traverse it to their work dirs.
  chmodSync(dir, 0o711);
  if (asOther) chownSync(dir, OTHER_UID, OTHER_UID);
  return dir;
}

/**
 * An unprivileged user must be able to read the repository to run a fixture from it; say how to fix it
 * rather than fail obscurely.
 */
export function assertReadableByOthers(): void {
  for (let dir = repoRoot; dir !== dirname(dir); dir = dirname(dir)) {
    const mode = statSync(dir).mode;
    if ((mode & 0o001) === 0) {
      throw new Error(
        `the non-root tests run fixtures as uid ${OTHER_UID}, which cannot enter ${dir}; make the checkout ` +
          'readable by other users (chmod o+x on its parent folders, o+rX on the repository)',
      );
    }
  }
  accessSync(join(repoRoot, 'package.json'), constants.R_OK);
}

/**
 * Start a fixture (`src/__fixtures__/<name>.ts`) with node + tsx, as `OTHER_UID` when `asOther`; `home` is
 * its HOME and TMPDIR.
 */
export function startFixture(
  name: string,
  args: string[],
  options: { asOther?: boolean | undefined; home?: string | undefined } = {},
): ChildProcess {
  const script = fileURLToPath(new URL(`./${name}.ts`, import.meta.url));
  const env = { ...process.env, ...(options.home ? { HOME: options.home, TMPDIR: options.home } : {}) };
  return spawn(process.execPath, [...nodeArgs, script, ...args], {
    cwd: repoRoot,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(options.asOther ? { uid: OTHER_UID, gid: OTHER_UID } : {}),
  });
}

/** Run a fixture to its end; its last stdout line is JSON. */
export function runFixture<T>(
  name: string,
  args: string[],
  options: { asOther?: boolean | undefined; home?: string | undefined } = {},
): Promise<T> {
  const child = startFixture(name, args, options);
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  return new Promise<T>((resolve, reject) => {
    child.once('exit', (code, signal) => {
      const last = out.trim().split('\n').at(-1) ?? '';
      try {
        resolve(JSON.parse(last) as T);
      } catch {
        reject(new Error(`fixture ${name} exited ${code ?? signal} without a result: ${err.slice(-3000)}`));
      }
    });
  });
}

export const exited = (child: ChildProcess) =>
  new Promise<NodeJS.Signals | number | null>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.signalCode ?? child.exitCode);
    else child.once('exit', (code, signal) => resolve(signal ?? code));
  });

export async function eventually(check: () => boolean | Promise<boolean>, ms = 30_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return check();
}

/** Host processes whose command line is `sleep <tag>` for one of the tags. */
export function hostSleepers(tags: number[]): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (argv[0]?.endsWith('sleep') && tags.includes(Number(argv[1]))) found.push(Number(entry));
    } catch {
      // exited
    }
  }
  return found;
}

// What a run left is looked for here independently of the code under test (not with the reaper's own
// helpers), so a test cannot pass because both share a blind spot.

/** The run tag sandbox ids carry (`sbx-<tag>-…`). */
export function runTagOf(run: string): string {
  return createHash('sha256').update(run).digest('hex').slice(0, 8);
}

/** Cgroup folders anywhere under /sys/fs/cgroup whose name satisfies `match`. */
function cgroupsNamed(match: (name: string) => boolean): string[] {
  const out: string[] = [];
  const walk = (dir: string, depth: number) => {
    let entries: string[] = [];
    try {
      entries = readdirSync(dir, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => e.name);
    } catch {
      return;
    }
    for (const name of entries) {
      if (match(name)) out.push(join(dir, name));
      else if (depth < 8) walk(join(dir, name), depth + 1);
    }
  };
  walk('/sys/fs/cgroup', 0);
  return out;
}

/** Mount points at or below `dir`. */
function mountsBelow(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p): p is string => p !== undefined && (p === dir || p.startsWith(`${dir}/`)));
}

/** Host processes whose environment names one of the sandboxes (an id, or an id prefix). */
function markedProcesses(ids: string[]): number[] {
  const needles = ids.map((id) => Buffer.from(`VIME_SANDBOX_ID=${id}`));
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const env = readFileSync(`/proc/${entry}/environ`);
      if (needles.some((n) => env.includes(n))) found.push(Number(entry));
    } catch {
      // exited or not ours
    }
  }
  return found;
}

export interface Leftovers {
  dirs: string[];
  cgroups: string[];
  mounts: string[];
  processes: number[];
  containers: string[];
}

/**
 * Everything of `run` still on this host: sandbox folders, cgroups, mounts, processes and containers.
 * `ids`: sandboxes seen earlier (whatever their id format), `tags`: `sleep <tag>` processes.
 */
export async function leftovers(
  rootDir: string,
  run: string,
  options: { ids?: string[] | undefined; tags?: number[] | undefined } = {},
): Promise<Leftovers> {
  const prefix = `sbx-${runTagOf(run)}-`;
  let dirs: string[] = [];
  try {
    dirs = readdirSync(rootDir).filter((n) => n.startsWith('sbx-'));
  } catch {
    // no root folder: nothing left
  }
  const ids = [...new Set([...(options.ids ?? []), ...dirs])];
  const cgroups = cgroupsNamed(
    (name) => name.startsWith(`vime-${prefix}`) || ids.some((id) => name === `vime-${id}`),
  );
  const mounts = existsSync(rootDir) ? mountsBelow(rootDir) : [];
  const processes = [...markedProcesses([prefix, ...ids]), ...hostSleepers(options.tags ?? [])];
  let containers: string[] = [];
  if (dockerAvailable()) {
    const engine = new DockerEngine(defaultDockerSocket());
    try {
      const list = await engine.json<Array<{ Id: string }>>('GET', '/containers/json', {
        query: { all: true, filters: JSON.stringify({ label: [`vime.run=${run}`] }) },
      });
      containers = list.map((c) => c.Id);
    } finally {
      await engine.close();
    }
  }
  return { dirs, cgroups, mounts, processes, containers };
}

export const nothing: Leftovers = { dirs: [], cgroups: [], mounts: [], processes: [], containers: [] };
