/**
 * On-disk state of a host-process sandbox (bubblewrap, local): `<rootDir>/<id>/` holds `meta.json`
 * (labels, cgroups, mounts), `pids/` (running process groups) and the work dir. The metadata is written
 * (atomically) before any resource exists and names each resource before it is made, so a crash at any
 * step leaves exactly what `reapOrphans` can find; cleanup also finds mounts and cgroups by name, so even
 * a sandbox with torn metadata is removed whole.
 */
import { execFile, execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { chmod, mkdir, open, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import { onProcessExit, processStartTicks } from '../lifecycle.js';
import { killByEnv, SANDBOX_MARKER_ENV } from '../process-markers.js';
import { findCgroups, removeCgroupTree, removeCgroupTreeSync } from './cgroups.js';

const execFileAsync = promisify(execFile);

/** Default parent folder of sandbox state; every provider and `reapOrphans` agree on it. */
export function defaultRootDir(): string {
  return join(tmpdir(), 'vime-sandboxes');
}

const MetaSchema = z.object({
  id: z.string(),
  provider: z.string(),
  labels: z.record(z.string(), z.string()),
  createdAt: z.number(),
  lifetimeMs: z.number().optional(),
  cgroups: z.array(z.string()),
  mounts: z.array(z.string()),
});

export type SandboxMeta = z.infer<typeof MetaSchema>;

/** Metadata files are small; a larger one is not ours. */
const MAX_META_BYTES = 1 << 20;

export class HostState {
  readonly pidsDir: string;
  private readonly dropExitHook: () => void;
  private constructor(
    readonly dir: string,
    readonly meta: SandboxMeta,
  ) {
    this.pidsDir = join(dir, 'pids');
    this.dropExitHook = onProcessExit(() => this.cleanupSync());
  }

  /** The sandbox folder with its metadata: nothing else of the sandbox exists before this returns. */
  static async create(rootDir: string, meta: SandboxMeta): Promise<HostState> {
    // 0711: sandbox uids must traverse to their own work dir, but may not list the others.
    await mkdir(rootDir, { recursive: true, mode: 0o711 });
    await chmod(rootDir, 0o711).catch(() => {});
    const dir = join(rootDir, meta.id);
    await mkdir(dir, { mode: 0o711 });
    const state = new HostState(dir, meta);
    await chmod(dir, 0o711);
    await state.saveMeta();
    await mkdir(state.pidsDir, { mode: 0o711 });
    return state;
  }

  /** Write-then-rename, so a reader (or a crash) never sees half a file. */
  async saveMeta(): Promise<void> {
    const tmp = join(this.dir, 'meta.json.tmp');
    await writeFile(tmp, JSON.stringify(this.meta));
    await rename(tmp, join(this.dir, 'meta.json'));
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

  async cleanup(): Promise<void> {
    await cleanupSandboxDir(this.dir, this.meta);
    this.dropExitHook();
  }

  cleanupSync(): void {
    killTrackedSync(this.dir);
    killByEnv(SANDBOX_MARKER_ENV, this.meta.id);
    let complete = true;
    for (const cg of this.meta.cgroups) complete = removeCgroupTreeSync(cg) && complete;
    for (const m of mountsUnder(this.dir)) {
      try {
        execFileSync('umount', ['-l', m], { stdio: 'ignore' });
      } catch {
        complete = false;
      }
    }
    if (!complete) return;
    try {
      rmSync(this.dir, { recursive: true, force: true });
    } catch {
      // best effort at exit
    }
  }
}

export async function readMeta(dir: string): Promise<SandboxMeta | undefined> {
  try {
    const file = await open(join(dir, 'meta.json'), 'r');
    try {
      const { size } = await file.stat();
      if (size > MAX_META_BYTES) return undefined;
      const parsed = MetaSchema.safeParse(JSON.parse((await file.readFile()).toString('utf8')));
      return parsed.success ? parsed.data : undefined;
    } finally {
      await file.close();
    }
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

/** Mount points at or below `dir` (from this process's mountinfo), deepest first. */
export function mountsUnder(dir: string): string[] {
  let text = '';
  try {
    text = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  const points = text
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((p): p is string => p !== undefined)
    // mountinfo escapes space, tab, newline and backslash as octal.
    .map((p) => p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8))))
    .filter((p) => p === dir || p.startsWith(`${dir}/`));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
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

/**
 * Kill what the sandbox left running, remove its cgroups, unmount its roots and delete its folder, in that
 * order. The folder (with the metadata) goes last and only when everything else went, so a failed cleanup
 * can be retried. `scan`: also look for the sandbox's cgroups by name (its metadata may be torn).
 */
export async function cleanupSandboxDir(
  dir: string,
  meta: SandboxMeta | undefined,
  options: { scan?: boolean | undefined } = {},
): Promise<void> {
  const id = basename(dir);
  killTrackedSync(dir);
  // Local sandboxes' background and setsid-detached processes left their process groups; a bubblewrap
  // session's launcher carries the marker too.
  killByEnv(SANDBOX_MARKER_ENV, id);
  const cgroups = new Set(meta?.cgroups ?? []);
  if (options.scan) for (const cg of findCgroups((name) => name === `vime-${id}`)) cgroups.add(cg.dir);
  const errors: unknown[] = [];
  for (const cg of cgroups) await removeCgroupTree(cg).catch((e) => errors.push(e));
  for (const m of mountsUnder(dir)) {
    await execFileAsync('umount', [m]).catch(() =>
      execFileAsync('umount', ['-l', m]).catch((e) => errors.push(e)),
    );
  }
  if (errors.length > 0) throw new AggregateError(errors, `cleanup of ${dir} was incomplete`);
  await removeTree(dir);
}

/** Sandbox folders under a root dir, with their metadata (undefined where it is missing or torn). */
export async function listSandboxDirs(
  rootDir: string,
): Promise<Array<{ dir: string; meta: SandboxMeta | undefined; mtimeMs: number }>> {
  let names: string[];
  try {
    names = await readdir(rootDir);
  } catch {
    return [];
  }
  const out: Array<{ dir: string; meta: SandboxMeta | undefined; mtimeMs: number }> = [];
  for (const name of names) {
    if (!name.startsWith('sbx-')) continue;
    const dir = join(rootDir, name);
    const st = await stat(dir).catch(() => undefined);
    if (!st?.isDirectory()) continue;
    out.push({ dir, meta: await readMeta(dir), mtimeMs: st.mtimeMs });
  }
  return out;
}
