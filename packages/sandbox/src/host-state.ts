/**
 * On-disk state of a host-process sandbox (bubblewrap, local): `<rootDir>/<id>/` holds `meta.json`
 * (labels, cgroups, mounts), `pids/` (running process groups) and the work dir. A crashed run leaves this
 * behind, and it is exactly what `reapOrphans` needs to clean up.
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { chmod, mkdir, readdir, readFile, rm, rmdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { processStartTicks } from './lifecycle.js';
import { killByEnv, SANDBOX_MARKER_ENV } from './proc.js';

const execFileAsync = promisify(execFile);

/** Default parent folder of sandbox state; every provider and `reapOrphans` agree on it. */
export function defaultRootDir(): string {
  return join(tmpdir(), 'vime-sandboxes');
}

export interface SandboxMeta {
  id: string;
  provider: string;
  labels: Record<string, string>;
  createdAt: number;
  lifetimeMs?: number;
  /** Cgroup directories created for the sandbox (removed after their processes are killed). */
  cgroups: string[];
  /** Mount points (overlay roots) to unmount before the folder is removed. */
  mounts: string[];
}

export class HostState {
  readonly pidsDir: string;
  private constructor(
    readonly dir: string,
    readonly meta: SandboxMeta,
  ) {
    this.pidsDir = join(dir, 'pids');
  }

  static async create(rootDir: string, meta: SandboxMeta): Promise<HostState> {
    // 0711: sandbox uids must traverse to their own work dir, but may not list the others.
    await mkdir(rootDir, { recursive: true, mode: 0o711 });
    await chmod(rootDir, 0o711).catch(() => {});
    const dir = join(rootDir, meta.id);
    await mkdir(join(dir, 'pids'), { recursive: true, mode: 0o711 });
    await chmod(dir, 0o711);
    const state = new HostState(dir, meta);
    await state.saveMeta();
    return state;
  }

  saveMeta(): Promise<void> {
    return writeFile(join(this.dir, 'meta.json'), JSON.stringify(this.meta));
  }

  /** Record a running process group so a reaper can kill it after a crash. */
  trackPid(pid: number | undefined, previous: number | undefined): void {
    try {
      if (previous !== undefined) unlinkSync(join(this.pidsDir, String(previous)));
      if (pid !== undefined) writeFileSync(join(this.pidsDir, String(pid)), processStartTicks(pid) ?? '?');
    } catch {
      // the folder is gone: the sandbox is being terminated
    }
  }

  cleanup(): Promise<void> {
    return cleanupSandboxDir(this.dir, this.meta);
  }

  cleanupSync(): void {
    killTrackedSync(this.dir);
    if (this.meta.provider === 'local') killByEnv(SANDBOX_MARKER_ENV, this.meta.id);
    for (const cg of this.meta.cgroups) killCgroupSync(cg);
    for (const m of this.meta.mounts) {
      try {
        execFileSync('umount', ['-l', m], { stdio: 'ignore' });
      } catch {
        // not mounted
      }
    }
    try {
      rmSync(this.dir, { recursive: true, force: true });
    } catch {
      // best effort at exit
    }
  }
}

export async function readMeta(dir: string): Promise<SandboxMeta | undefined> {
  try {
    return JSON.parse(await readFile(join(dir, 'meta.json'), 'utf8')) as SandboxMeta;
  } catch {
    return undefined;
  }
}

function killTrackedSync(dir: string): void {
  let pids: string[];
  try {
    pids = readdirSync(join(dir, 'pids'));
  } catch {
    return;
  }
  for (const name of pids) {
    const pid = Number(name);
    let ticks: string | undefined;
    try {
      ticks = readFileSync(join(dir, 'pids', name), 'utf8');
    } catch {
      continue;
    }
    // Only kill when the pid still belongs to the process we started (pids are reused).
    if (!Number.isInteger(pid) || pid <= 1 || (ticks !== '?' && processStartTicks(pid) !== ticks)) continue;
    for (const target of [-pid, pid]) {
      try {
        process.kill(target, 'SIGKILL');
      } catch {
        // gone
      }
    }
  }
}

function cgroupPids(cg: string): number[] {
  try {
    return readFileSync(join(cg, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

const sleepSync = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

function killCgroupSync(cg: string): void {
  // Killed processes take a moment to leave the group; until then rmdir says EBUSY.
  for (let attempt = 0; attempt < 50 && existsSync(cg); attempt++) {
    for (const pid of cgroupPids(cg)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    try {
      rmdirSync(cg);
      return;
    } catch {
      sleepSync(20);
    }
  }
}

async function removeCgroup(cg: string): Promise<void> {
  if (!existsSync(cg)) return;
  for (let attempt = 0; attempt < 50; attempt++) {
    const pids = cgroupPids(cg);
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    try {
      await rmdir(cg);
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  throw new Error(`cgroup ${cg} still has processes after 1 s`);
}

/** Remove a folder even where the sandbox left read-only directories in it. */
export async function removeTree(dir: string): Promise<void> {
  try {
    await rm(dir, { recursive: true, force: true });
  } catch {
    await execFileAsync('chmod', ['-R', 'u+rwX', dir]).catch(() => {});
    await rm(dir, { recursive: true, force: true });
  }
}

/** Kill what the sandbox left running, remove its cgroups, unmount its roots and delete its folder. */
export async function cleanupSandboxDir(dir: string, meta: SandboxMeta | undefined): Promise<void> {
  killTrackedSync(dir);
  // Local sandboxes' background and setsid-detached processes left their process groups; find them by marker.
  if (meta?.provider === 'local') killByEnv(SANDBOX_MARKER_ENV, meta.id);
  const errors: unknown[] = [];
  for (const cg of meta?.cgroups ?? []) await removeCgroup(cg).catch((e) => errors.push(e));
  for (const m of meta?.mounts ?? []) {
    if (!existsSync(m)) continue;
    await execFileAsync('umount', [m]).catch(() => execFileAsync('umount', ['-l', m]).catch(() => {}));
  }
  await removeTree(dir).catch((e) => errors.push(e));
  if (errors.length > 0) throw new AggregateError(errors, `cleanup of ${dir} was incomplete`);
}

/** Sandbox folders under a root dir, with their metadata (folders without metadata are half-created). */
export async function listSandboxDirs(
  rootDir: string,
): Promise<Array<{ dir: string; meta: SandboxMeta | undefined }>> {
  let names: string[];
  try {
    names = await readdir(rootDir);
  } catch {
    return [];
  }
  const out: Array<{ dir: string; meta: SandboxMeta | undefined }> = [];
  for (const name of names) {
    if (!name.startsWith('sbx-')) continue;
    const dir = join(rootDir, name);
    out.push({ dir, meta: await readMeta(dir) });
  }
  return out;
}
