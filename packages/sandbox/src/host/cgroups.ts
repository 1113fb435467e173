/**
 * Cgroups: memory, pids and CPU-share limits of a sandbox, the per-exec cgroups that let a timeout kill
 * every process a command started (whatever it does to its environment, session or parent), and the
 * removal of cgroup trees. v1 controllers are nested under this process's own cgroup of each hierarchy
 * (so the host still accounts for them); a v2 hierarchy is used where this process's cgroup is writable.
 */
import {
  chownSync,
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { rmdir } from 'node:fs/promises';
import { join } from 'node:path';
import { sleep } from '@vime/core/utils';
import type { EffectiveLimits } from '../limits.js';

export type Controller = 'memory' | 'pids' | 'cpu';

interface Hierarchy {
  version: 1 | 2;
  /** Mount point of the hierarchy. */
  mount: string;
  /** This process's cgroup in it (a path relative to the mount). */
  own: string;
  /** Controllers a child of `own` can use. */
  controllers: Set<string>;
}

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

/**
 * The cgroup hierarchies of this host (from mountinfo) with this process's place in each. `delegate`:
 * enable the controllers for children of this process's v2 cgroup where they are not yet (when planning).
 */
function hierarchies(delegate = false): Hierarchy[] {
  const own = new Map<string, string>();
  let ownV2: string | undefined;
  for (const line of readText('/proc/self/cgroup').split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    if (m[1] === '') ownV2 = m[2];
    else for (const c of m[1]!.split(',')) own.set(c, m[2]!);
  }
  const out: Hierarchy[] = [];
  for (const line of readText('/proc/self/mountinfo').split('\n')) {
    const [pre, post] = line.split(' - ');
    if (!pre || !post) continue;
    const mount = pre.split(' ')[4]!;
    const [fstype, , superOptions = ''] = post.split(' ');
    if (fstype === 'cgroup') {
      const controllers = superOptions
        .split(',')
        .filter((c) => c === 'memory' || c === 'pids' || c === 'cpu');
      const path = controllers.length > 0 ? own.get(controllers[0]!) : undefined;
      if (path !== undefined) out.push({ version: 1, mount, own: path, controllers: new Set(controllers) });
    } else if (fstype === 'cgroup2' && ownV2 !== undefined) {
      const dir = join(mount, ownV2);
      const available = new Set(readText(join(dir, 'cgroup.controllers')).trim().split(/\s+/));
      const wanted = ['memory', 'pids', 'cpu'].filter((c) => available.has(c));
      const enabled = () => new Set(readText(join(dir, 'cgroup.subtree_control')).trim().split(/\s+/));
      if (delegate && wanted.some((c) => !enabled().has(c))) {
        try {
          writeFileSync(join(dir, 'cgroup.subtree_control'), wanted.map((c) => `+${c}`).join(' '));
        } catch {
          // a cgroup with processes of its own cannot delegate controllers; what is enabled stays usable
        }
      }
      const controllers = new Set([...enabled()].filter((c) => wanted.includes(c)));
      out.push({ version: 2, mount, own: ownV2, controllers });
    }
  }
  return out;
}

/** Whether a child cgroup can be created under this process's cgroup of a hierarchy (probed once). */
function writable(h: Hierarchy): boolean {
  const probe = join(h.mount, h.own, `vime-probe-${process.pid}`);
  try {
    mkdirSync(probe);
    rmdirSync(probe);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EEXIST';
  }
}

let usable: Hierarchy[] | undefined;

/** The hierarchies this process can create cgroups in (computed once per process). */
function usableHierarchies(): Hierarchy[] {
  usable ??= hierarchies(true).filter(writable);
  return usable;
}

export interface CgroupPlan {
  /** Cgroup directories to create, one per hierarchy used. */
  dirs: string[];
  /** Limits that a cgroup enforces (the others need an rlimit fallback). */
  enforced: Set<Controller>;
  /** Where the per-exec cgroups go (pids hierarchy preferred: it can stop forks while killing). */
  tracking: { dir: string; version: 1 | 2 } | undefined;
}

function needed(limits: EffectiveLimits): Controller[] {
  const out: Controller[] = [];
  if (limits.memoryBytes !== undefined) out.push('memory');
  if (limits.pids !== undefined) out.push('pids');
  if (limits.cpus !== undefined) out.push('cpu');
  return out;
}

/**
 * Which cgroups a sandbox named `name` gets for `limits`, on this host. A tracking cgroup is planned even
 * without limits, so execs can be killed as a whole. Nothing is created yet: the paths go into the
 * sandbox's metadata first, so a crash at any later step leaves nothing a reaper cannot find.
 */
export function planCgroups(name: string, limits: EffectiveLimits): CgroupPlan {
  const hs = usableHierarchies();
  const v1 = (c: Controller) => hs.find((h) => h.version === 1 && h.controllers.has(c));
  const v2 = hs.find((h) => h.version === 2);
  const dirOf = (h: Hierarchy) => join(h.mount, h.own, name);
  const dirs: string[] = [];
  const add = (dir: string) => {
    if (!dirs.includes(dir)) dirs.push(dir);
    return dir;
  };
  const enforced = new Set<Controller>();
  for (const c of needed(limits)) {
    const h = v1(c) ?? (v2?.controllers.has(c) ? v2 : undefined);
    if (!h) continue;
    add(dirOf(h));
    enforced.add(c);
  }
  // The pids hierarchy is the best place to track execs: a kill can stop forks first (pids.max = 0).
  const t = v1('pids') ?? v2 ?? v1('memory') ?? v1('cpu');
  const tracking = t ? { dir: add(dirOf(t)), version: t.version } : undefined;
  return { dirs, enforced, tracking };
}

function knobs(dir: string, limits: EffectiveLimits, v2: boolean): Array<[string, string, boolean]> {
  const out: Array<[string, string, boolean]> = [];
  const has = (f: string) => existsSync(join(dir, f));
  const quota = limits.cpus === undefined ? 0 : Math.max(1000, Math.round(limits.cpus * 100_000));
  if (limits.memoryBytes !== undefined) {
    const bytes = String(limits.memoryBytes);
    if (v2 && has('memory.max')) out.push(['memory.max', bytes, false], ['memory.swap.max', '0', true]);
    // memsw exists only with swap accounting; without it swap is not usable by the group anyway.
    if (!v2 && has('memory.limit_in_bytes'))
      out.push(['memory.limit_in_bytes', bytes, false], ['memory.memsw.limit_in_bytes', bytes, true]);
  }
  if (limits.pids !== undefined && has('pids.max')) out.push(['pids.max', String(limits.pids), false]);
  if (limits.cpus !== undefined) {
    if (v2 && has('cpu.max')) out.push(['cpu.max', `${quota} 100000`, false]);
    if (!v2 && has('cpu.cfs_quota_us'))
      out.push(['cpu.cfs_period_us', '100000', false], ['cpu.cfs_quota_us', String(quota), false]);
  }
  return out;
}

/**
 * Create the planned cgroups and write their limits. `owner` (the sandbox uid when this process is root)
 * may move its own processes into per-exec cgroups of the tracking one, and nothing else.
 */
export function createCgroups(
  plan: CgroupPlan,
  limits: EffectiveLimits,
  owner: { uid: number; gid: number } | undefined,
): void {
  for (const dir of plan.dirs) {
    mkdirSync(dir);
    const v2 = existsSync(join(dir, 'cgroup.controllers'));
    for (const [file, value, optional] of knobs(dir, limits, v2)) {
      try {
        writeFileSync(join(dir, file), value);
      } catch (error) {
        if (!optional) throw error;
      }
    }
  }
  // v2 checks the common ancestor of source and destination when a process moves: the sandbox cgroup.
  if (owner && plan.tracking?.version === 2)
    chownSync(join(plan.tracking.dir, 'cgroup.procs'), owner.uid, owner.gid);
}

/**
 * cgroupfs holds no files of ours, so an empty child cgroup's name records who owns a sandbox's cgroups:
 * a reaper that cannot see the sandbox's folder (it lives under another root folder) can still tell
 * whether its owner is alive.
 */
const OWNER_MARK = 'vime-owner=';

/**
 * Record a sandbox's owner label (`ownerLabel()`) in its tracking cgroup: the pids hierarchy where there
 * is one, where a child cgroup costs the kernel least.
 */
export function markCgroupOwner(plan: CgroupPlan, owner: string): void {
  if (plan.tracking) mkdirSync(join(plan.tracking.dir, OWNER_MARK + owner));
}

/** The owner label a sandbox cgroup's mark names, if it has one. */
export function cgroupOwner(dir: string): string | undefined {
  try {
    return readdirSync(dir)
      .find((name) => name.startsWith(OWNER_MARK))
      ?.slice(OWNER_MARK.length);
  } catch {
    return undefined;
  }
}

function procs(dir: string): number[] {
  return readText(join(dir, 'cgroup.procs')).split('\n').filter(Boolean).map(Number);
}

/** Whether any process is in a cgroup tree. */
export function cgroupHasProcesses(dir: string): boolean {
  return subtree(dir).some((d) => procs(d).length > 0);
}

/** Child cgroups first, then the cgroup itself. */
function subtree(dir: string): string[] {
  const out: string[] = [];
  let entries: string[] = [];
  try {
    entries = readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  } catch {
    return out;
  }
  for (const name of entries) out.push(...subtree(join(dir, name)));
  out.push(dir);
  return out;
}

/** One pass of a tree kill: stop new forks, SIGKILL everything in it; returns how many processes were seen. */
function killPass(dirs: string[]): number {
  let seen = 0;
  for (const dir of dirs) {
    for (const [file, value] of [
      ['cgroup.kill', '1'],
      ['pids.max', '0'],
    ] as const) {
      try {
        if (existsSync(join(dir, file))) writeFileSync(join(dir, file), value);
      } catch {
        // gone, or not writable
      }
    }
    for (const pid of procs(dir)) {
      seen++;
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
  }
  return seen;
}

function rmdirAll(dirs: string[]): boolean {
  let ok = true;
  for (const dir of dirs) {
    try {
      rmdirSync(dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') ok = false;
    }
  }
  return ok;
}

const KILL_DEADLINE_MS = 5000;
const sleepSync = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** Kill every process in a cgroup tree and remove it (at exit, where nothing async runs). */
export function removeCgroupTreeSync(dir: string): boolean {
  const end = Date.now() + KILL_DEADLINE_MS;
  for (;;) {
    const dirs = subtree(dir);
    if (dirs.length === 0) return true;
    if (killPass(dirs) === 0 && rmdirAll(dirs)) return true;
    if (Date.now() > end) return false;
    sleepSync(10);
  }
}

/** Kill every process in a cgroup tree and remove it; throws when processes remain after 5 s. */
export async function removeCgroupTree(
  dir: string,
  options: { keep?: boolean | undefined } = {},
): Promise<void> {
  const end = Date.now() + KILL_DEADLINE_MS;
  for (;;) {
    const dirs = subtree(dir);
    if (dirs.length === 0) return;
    const seen = killPass(dirs);
    if (seen === 0 && (options.keep || rmdirAll(dirs))) return;
    if (Date.now() > end)
      throw new Error(`cgroup ${dir} still has processes after ${KILL_DEADLINE_MS / 1000} s`);
    await sleep(seen === 0 ? 20 : 5);
  }
}

/**
 * Processes a sandbox keeps out of reach of any one command (bwrap, its init, the supervisor, a spare child
 * and the forks that start the next commands), so a command filling its pids limit cannot stop the
 * session from starting another.
 */
export const SESSION_PIDS = 8;

/**
 * Per-exec cgroups under a sandbox's tracking cgroup. The host creates `x<n>` before the command is sent;
 * the supervisor's forked child moves itself in (through a directory fd only the supervisor holds) before
 * it execs the command, so everything the command starts is inside, and a timeout kills the whole cgroup
 * from outside the sandbox.
 */
export class ExecCgroups {
  private readonly lingering = new Set<string>();
  /** Each exec's own pids limit: the sandbox's, less what its session needs to start the next command. */
  private readonly pidsMax: number | undefined;

  constructor(
    readonly dir: string,
    private readonly owner: { uid: number; gid: number } | undefined,
    sandboxPids?: number,
  ) {
    this.pidsMax = sandboxPids === undefined ? undefined : Math.max(1, sandboxPids - SESSION_PIDS);
  }

  /** A directory fd of the tracking cgroup, for the supervisor (close it once the session is spawned). */
  openDir(): number {
    return openSync(this.dir, constants.O_RDONLY | constants.O_DIRECTORY);
  }

  create(name: string): void {
    this.sweep();
    const dir = join(this.dir, name);
    mkdirSync(dir);
    // Where the sandbox's pids cgroup is this one's parent (v1, or a v2 tree with pids delegated).
    if (this.pidsMax !== undefined && existsSync(join(dir, 'pids.max')))
      writeFileSync(join(dir, 'pids.max'), String(this.pidsMax));
    if (this.owner) chownSync(join(dir, 'cgroup.procs'), this.owner.uid, this.owner.gid);
  }

  /** Kill every process of an exec (bounded), whatever it did to its environment, session or parent. */
  kill(name: string): Promise<void> {
    return removeCgroupTree(join(this.dir, name), { keep: true });
  }

  /**
   * Remove an exec's cgroup, off the caller's path (removing a cgroup a process just left can take a
   * millisecond); one whose background processes live on is kept until they end.
   */
  release(name: string): void {
    rmdir(join(this.dir, name)).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'ENOENT') this.lingering.add(name);
    });
  }

  private sweep(): void {
    for (const name of this.lingering) {
      try {
        rmdirSync(join(this.dir, name));
        this.lingering.delete(name);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') this.lingering.delete(name);
      }
    }
  }
}

/** Close a directory fd handed to a child process. */
export function closeFd(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // already closed
  }
}

/**
 * Cgroups anywhere on this host whose name matches, in every hierarchy (what a crashed run left, found by
 * name even where no sandbox folder remains). Matched cgroups are not descended into.
 */
export function findCgroups(
  match: (name: string) => boolean,
  maxDepth = 8,
): Array<{ dir: string; createdAt: number }> {
  const out: Array<{ dir: string; createdAt: number }> = [];
  const mounts = new Set(hierarchies().map((h) => h.mount));
  const walk = (dir: string, depth: number) => {
    let entries: string[];
    try {
      entries = readdirSync(dir, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => e.name);
    } catch {
      return;
    }
    for (const name of entries) {
      const path = join(dir, name);
      if (match(name)) {
        let createdAt = Date.now();
        try {
          createdAt = statSync(path).mtimeMs;
        } catch {
          // gone
        }
        out.push({ dir: path, createdAt });
      } else if (depth < maxDepth) walk(path, depth + 1);
    }
  };
  for (const mount of mounts) walk(mount, 0);
  return out;
}
