/**
 * STAND-IN plumbing for tests: what a hosted vendor's sandbox does, done with real local processes in a
 * temp folder per sandbox. Each command runs under bubblewrap with that folder as its root (the host's
 * `/usr` and `/etc` read-only, the host's `/proc` so the adapters' process sweeps see it), so absolute paths
 * (`/testbed`, `/tmp`) mean the same in a command line as in the SDK's file calls, which the stand-in maps
 * under the folder. No namespaces but the mount one: it stands in for a vendor's servers that cannot be
 * reached from here, and is no isolation.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';

/** Every process a stand-in sandbox starts carries this variable, so a kill finds detached children too. */
const BOX_ENV = 'VIME_STANDIN_BOX';

/** One stand-in sandbox: a temp folder and the processes started in it. */
export class LocalBox {
  readonly id: string;
  readonly root: string;
  readonly env: Record<string, string>;
  readonly createdAt = Date.now();
  readonly processes = new Map<number, ChildProcess>();
  killed = false;
  private lifetimeTimer: NodeJS.Timeout | undefined;

  constructor(id: string, env: Record<string, string> = {}) {
    this.id = id;
    this.root = mkdtempSync(join(tmpdir(), 'vime-standin-box-'));
    // The root's skeleton: mount points for the host's system folders, and the usual merged-/usr links.
    for (const d of ['tmp', 'usr', 'etc', 'dev', 'proc']) mkdirSync(join(this.root, d));
    for (const d of ['bin', 'lib', 'lib64', 'sbin']) symlinkSync(`usr/${d}`, join(this.root, d));
    this.env = env;
  }

  /** The host path of a sandbox path. */
  path(p: string): string {
    return join(this.root, posix.resolve('/', p));
  }

  /** End the box after `ms` (the vendor's server-side lifetime); a later call replaces the deadline. */
  setLifetime(ms: number, onEnd: () => void): void {
    clearTimeout(this.lifetimeTimer);
    this.lifetimeTimer = setTimeout(onEnd, ms);
    this.lifetimeTimer.unref();
  }

  /** Start a real process; `cwd` is a sandbox path. */
  spawn(
    cmd: string,
    args: readonly string[],
    options: { cwd?: string | undefined; env?: Record<string, string> | undefined },
  ): ChildProcess {
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
      LANG: 'C.UTF-8',
      ...this.env,
      ...options.env,
      [BOX_ENV]: this.id,
    };
    const root = [
      ['--bind', this.root, '/'],
      ['--ro-bind', '/usr', '/usr'],
      ['--ro-bind', '/etc', '/etc'],
      ['--dev', '/dev'],
      ['--bind', '/proc', '/proc'],
      ['--chdir', posix.resolve('/', options.cwd ?? '/')],
    ].flat();
    const child = spawn('bwrap', [...root, '--', cmd, ...args], {
      env,
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    if (child.pid !== undefined) this.processes.set(child.pid, child);
    child.once('close', () => {
      if (child.pid !== undefined) this.processes.delete(child.pid);
    });
    return child;
  }

  /** Kill every process of the box (detached ones by their environment) and remove its folder. */
  kill(): void {
    this.killed = true;
    clearTimeout(this.lifetimeTimer);
    for (let pass = 0; pass < 3; pass++) killByEnv(BOX_ENV, this.id);
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** A new vendor-looking id. */
export function standinId(prefix: string): string {
  return `${prefix}${randomBytes(8).toString('hex')}`;
}

function killByEnv(name: string, value: string): void {
  const needle = Buffer.from(`${name}=${value}\0`);
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const env = readFileSync(`/proc/${pid}/environ`);
      if (env.includes(needle)) process.kill(Number(pid), 'SIGKILL');
    } catch {
      // gone, or not ours
    }
  }
}

/** A token bucket: `take()` is false when the vendor's rate limit would refuse the call. */
export class RateLimit {
  private tokens: number;
  private last = performance.now();
  constructor(
    private readonly perSecond: number,
    private readonly burst: number = perSecond,
  ) {
    this.tokens = burst;
  }

  take(): boolean {
    const now = performance.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.perSecond);
    this.last = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
