/**
 * `bubblewrap`: the embedded default. Commands run with fresh namespaces (no network, private /tmp and
 * pid namespace), the host system (or a prepared rootfs) read-only, and only this sandbox's work dir
 * writable, under safe default limits (`DEFAULT_LIMITS`) enforced with cgroups where this host lets us
 * create them and with rlimits otherwise (a `warning` event says what could not be enforced).
 */
import { accessSync, constants, lstatSync, readlinkSync } from 'node:fs';
import { chown, mkdir } from 'node:fs/promises';
import { release } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { ConfigError, SandboxError } from '@vime/core';
import type { Logger } from '@vime/core/utils';
import { EventEmitter } from 'eventemitter3';
import { resolveBinds, resolveChannel } from '../channel.js';
import type { ImageProgress } from '../docker/images.js';
import {
  type CgroupPlan,
  createCgroups,
  ExecCgroups,
  markCgroupOwner,
  planCgroups,
} from '../host/cgroups.js';
import { type RunResult, runHostProcess } from '../host/run-process.js';
import { defaultRootDir, HostState } from '../host/state.js';
import type { ImageStore } from '../images/store.js';
import {
  forwardWarnings,
  newSandboxId,
  OWNER_LABEL,
  runOf,
  sandboxLabels,
  withTrackedCreate,
} from '../lifecycle.js';
import {
  checkLifetime,
  type EffectiveLimits,
  hardOpenFiles,
  type Rlimits,
  resolveLimits,
  resolveWorkdir,
  rlimitsOf,
} from '../limits.js';
import { tailOf } from '../output.js';
import type { OpOptions, Sandbox, SandboxEmitter, SandboxProvider, SandboxSpec } from '../types.js';
import { findPython, prepareRoot, RootResolver, seedWorkdir } from './rootfs.js';
import { type BwrapConfig, BwrapSandbox } from './sandbox.js';

/** Options of `bubblewrapProvider`. */
export interface BubblewrapProviderOptions {
  /** Parent folder of sandbox state (default `<tmpdir>/vime-sandboxes`). */
  rootDir?: string | undefined;
  /** The bwrap binary (default `bwrap` on PATH). */
  bwrapPath?: string | undefined;
  /**
   * Unprivileged uid/gid the sandboxed processes run as when this process is root (default 65533).
   * Root inside bwrap could remount the read-only system writable, so root is never used.
   */
  uid?: number | undefined;
  gid?: number | undefined;
  /** Named rootfs folders usable as `spec.image` (an absolute folder path works too). */
  images?: Record<string, string> | undefined;
  /**
   * Where any other `spec.image` (an image reference such as `swebench/swesmith.x86_64.…`) is turned into
   * a rootfs, once per image digest (default `new ImageStore()`: the Docker engine's images, in
   * `defaultImageCacheDir()`). Give one with `imageDir` to use image tarballs.
   */
  imageStore?: ImageStore | undefined;
  /** Progress of exporting and unpacking an image the first time a sandbox needs it. */
  onImageProgress?: ((progress: ImageProgress) => void) | undefined;
  /** PATH inside the sandbox (default `/usr/local/bin:/usr/bin:/bin`). */
  path?: string | undefined;
  /**
   * `session` (default when the sandbox root has python3): one bwrap per sandbox with a small supervisor
   * that forks each command, so an exec costs about a plain spawn, and background processes live until
   * terminate. `per-exec`: a fresh bwrap for every command (fresh namespaces each time; nothing outlives
   * its exec), the fallback for roots without python3.
   */
  execMode?: 'session' | 'per-exec' | undefined;
  events?: SandboxEmitter | undefined;
  logger?: Logger | undefined;
  /** Terminate live sandboxes on SIGINT/SIGTERM/SIGHUP and exit (default true). */
  handleSignals?: boolean | undefined;
}

const isRoot = () => process.getuid?.() === 0;
const TOP_LEVEL_LINKS = ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32'];

/** Host top-level folders: merged-/usr symlinks are recreated, real folders bound read-only. */
function hostSystemArgs(): string[] {
  const args = ['--ro-bind', '/usr', '/usr'];
  for (const name of TOP_LEVEL_LINKS) {
    try {
      const st = lstatSync(`/${name}`);
      if (st.isSymbolicLink()) args.push('--symlink', readlinkSync(`/${name}`), `/${name}`);
      else if (st.isDirectory()) args.push('--ro-bind', `/${name}`, `/${name}`);
    } catch {
      // absent on this host
    }
  }
  args.push('--ro-bind', '/etc', '/etc');
  return args;
}

/**
 * A provider that runs every command under bubblewrap. Fails closed: `create` throws an actionable
 * `SandboxError` when bwrap is missing or blocked, rather than running anything unisolated.
 */
export function bubblewrapProvider(options: BubblewrapProviderOptions = {}): SandboxProvider {
  const events = options.events ?? (new EventEmitter() as SandboxEmitter);
  forwardWarnings(events, options.logger);
  const rootDir = options.rootDir ?? defaultRootDir();
  // Resolved here: the launcher runs it with a fixed system PATH, which misses a bwrap found elsewhere.
  const bwrap = onPath(options.bwrapPath ?? 'bwrap');
  const user = isRoot() ? { uid: options.uid ?? 65533, gid: options.gid ?? options.uid ?? 65533 } : undefined;
  if (user && (user.uid === 0 || user.gid === 0)) {
    throw new ConfigError(
      `bubblewrapProvider uid/gid must not be 0 (got ${user.uid}:${user.gid}): root inside bwrap can remount ` +
        'the read-only system writable; pick an unused unprivileged id such as 65533',
    );
  }
  const systemArgs = hostSystemArgs();
  let probe: Promise<void> | undefined;
  const config: BwrapConfig = {
    bwrap,
    user,
    path: options.path ?? '/usr/local/bin:/usr/bin:/bin',
    systemArgs,
  };
  const roots = new RootResolver(options);
  const warned = new Set<string>();
  const warn = (key: string, message: string, data: Record<string, unknown>) => {
    if (warned.has(key)) return;
    warned.add(key);
    events.emit('warning', { message: `bubblewrap: ${message}`, code: 'limit_not_enforced', data });
  };

  return withTrackedCreate(
    {
      name: 'bubblewrap',
      events,
      async create(spec: SandboxSpec, op: OpOptions = {}): Promise<Sandbox> {
        op.signal?.throwIfAborted();
        const workdir = resolveWorkdir(spec?.workdir);
        checkLifetime(spec.lifetimeMs);
        const requested = resolveLimits(spec.limits);
        const channel = resolveChannel(spec, user);
        const binds = resolveBinds(spec, workdir, user);
        const image = spec.image === undefined ? undefined : await roots.resolve(spec.image, op.signal);
        probe ??= probeBwrap(bwrap, systemArgs, user);
        // A failed probe is not cached: the fix (installing bwrap) may happen while the process runs.
        await probe.catch((error) => {
          probe = undefined;
          throw error;
        });
        const started = performance.now();
        const id = newSandboxId(runOf(spec.labels));
        const labels = sandboxLabels(id, spec.labels);
        // Metadata first (atomically), then every resource, each named in it before it exists.
        const state = await HostState.create(rootDir, {
          id,
          provider: 'bubblewrap',
          labels,
          createdAt: Date.now(),
          lifetimeMs: spec.lifetimeMs,
          cgroups: [],
          mounts: [],
        });
        try {
          const hostWork = join(state.dir, 'work');
          await mkdir(hostWork, { mode: 0o755 });
          if (user) await chown(hostWork, user.uid, user.gid);
          let root: string | undefined;
          if (image) {
            root = await prepareRoot(state, image.dir, workdir, user, op.signal, binds);
            await seedWorkdir(image.dir, workdir, hostWork, user, op.signal);
          }
          // An image that binds the host's /usr runs the host's python3.
          const python =
            options.execMode === 'per-exec' ? undefined : findPython(image?.hostUsr ? undefined : root);
          if (options.execMode === 'session' && !python) {
            throw new ConfigError(
              `bubblewrap execMode "session" needs python3 in the sandbox root (${root ?? 'the host /usr'}); ` +
                'install it there or use execMode "per-exec"',
            );
          }
          if (channel && !python) {
            throw new ConfigError(
              `spec.proxy needs the session mode (python3 in the sandbox root ${root ?? 'the host /usr'}, execMode "session"): its forwarder runs inside the session`,
            );
          }
          const plan = planLimits(`vime-${id}`, requested, python !== undefined, warn);
          state.meta.cgroups = plan.cgroups.dirs;
          await state.saveMeta();
          op.signal?.throwIfAborted();
          createCgroups(plan.cgroups, requested, user);
          markCgroupOwner(plan.cgroups, labels[OWNER_LABEL]!);
          const tracking = python ? plan.cgroups.tracking : undefined;
          const sandbox = new BwrapSandbox(
            {
              id,
              provider: 'bubblewrap',
              spec,
              state,
              labels,
              events,
              capabilities: { persistentProcesses: python !== undefined, isolatedNetwork: true },
              handleSignals: options.handleSignals ?? true,
            },
            {
              ...config,
              workdir,
              hostWork,
              root,
              hostUsr: image?.hostUsr ?? false,
              imageEnv: image?.env ?? {},
              python,
              limits: plan.limits,
              rlimits: plan.rlimits,
              channel,
              binds,
              execCgroups: tracking
                ? new ExecCgroups(
                    tracking.dir,
                    user,
                    plan.cgroups.enforced.has('pids') ? plan.limits.pids : undefined,
                  )
                : undefined,
            },
          );
          if (python) await sandbox.startSession(op.signal);
          events.emit('create', {
            id,
            provider: 'bubblewrap',
            labels,
            durationMs: performance.now() - started,
          });
          return sandbox;
        } catch (error) {
          await state.cleanup().catch(() => {});
          throw error;
        }
      },
    },
    options.handleSignals ?? true,
  );
}

interface LimitPlan {
  limits: EffectiveLimits;
  cgroups: CgroupPlan;
  rlimits: Rlimits;
}

/** A command name as the absolute path `PATH` gives it (unchanged when it has a slash or is not found). */
function onPath(name: string): string {
  if (name.includes('/')) return name;
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (!isAbsolute(dir)) continue;
    const path = join(dir, name);
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // not here
    }
  }
  return name;
}

/** Whether this kernel counts RLIMIT_NPROC per user namespace (Linux >= 5.15), i.e. per sandbox. */
function nprocPerNamespace(): boolean {
  const [major = 0, minor = 0] = release().split('.').map(Number);
  return major > 5 || (major === 5 && minor >= 15);
}

/**
 * How each limit is enforced on this host: cgroups where writable, otherwise rlimits (memory per process,
 * processes per sandbox user namespace), and a warning (once per provider) for what falls short.
 */
function planLimits(
  name: string,
  requested: EffectiveLimits,
  session: boolean,
  warn: (key: string, message: string, data: Record<string, unknown>) => void,
): LimitPlan {
  const limits = { ...requested };
  const cgroups = planCgroups(name, limits);
  const fix = 'run as root (cgroup v1 or v2) or give this process a delegated, writable cgroup v2 subtree';
  const memory = limits.memoryBytes !== undefined && !cgroups.enforced.has('memory');
  const pids = limits.pids !== undefined && !cgroups.enforced.has('pids');
  if (memory) {
    warn(
      'memoryBytes',
      `memoryBytes=${limits.memoryBytes} is enforced per process (RLIMIT_DATA), not for the sandbox as a whole: no memory cgroup is writable here; ${fix}`,
      { limit: 'memoryBytes', value: limits.memoryBytes, enforcedAs: 'RLIMIT_DATA per process' },
    );
  }
  if (pids && !session) {
    warn(
      'pids-per-exec',
      `pids=${limits.pids} is not enforced in execMode "per-exec" without a writable pids cgroup; ${fix}, or use the session mode`,
      { limit: 'pids', value: limits.pids },
    );
  } else if (pids && !nprocPerNamespace()) {
    warn(
      'pids-kernel',
      `pids=${limits.pids} is enforced as RLIMIT_NPROC, which this kernel (< 5.15) counts for every process of the sandbox uid, not per sandbox: no pids cgroup is writable here; ${fix}`,
      { limit: 'pids', value: limits.pids },
    );
  }
  if (limits.cpus !== undefined && !cgroups.enforced.has('cpu')) {
    warn('cpus', `cpus=${limits.cpus} is not enforced: no cpu cgroup is writable here; ${fix}`, {
      limit: 'cpus',
      value: limits.cpus,
    });
  }
  const hard = hardOpenFiles();
  if (limits.openFiles !== undefined && hard !== undefined && limits.openFiles > hard) {
    warn(
      'openFiles',
      `openFiles=${limits.openFiles} exceeds this process's hard limit ${hard} (raising it needs CAP_SYS_RESOURCE); using ${hard}`,
      { limit: 'openFiles', value: limits.openFiles, enforced: hard },
    );
    limits.openFiles = hard;
  }
  if (session && !cgroups.tracking) {
    warn(
      'exec-tracking',
      "no writable cgroup to kill the processes of one command: a command that times out or is aborted ends its sandbox's session (background processes and /tmp are lost; the next command starts a new session); " +
        fix,
      { limit: 'timeout' },
    );
  }
  return { limits, cgroups, rlimits: rlimitsOf(limits, { memory, pids: pids && session }) };
}

/**
 * Run `bwrap … true` with the system folders a sandbox gets, as the sandbox user. Not `--ro-bind / /`:
 * that re-mounts every mount of the host, and one another sandbox is mounting or unmounting at that
 * moment makes bwrap fail (EINVAL).
 */
async function probeBwrap(
  bwrap: string,
  systemArgs: readonly string[],
  user: { uid: number; gid: number } | undefined,
): Promise<void> {
  const fix =
    'Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap). On Ubuntu >= 23.10 unprivileged user ' +
    'namespaces are restricted by AppArmor: install an AppArmor profile for bwrap or set ' +
    'kernel.apparmor_restrict_unprivileged_userns=0. Inside a container, run it with user namespaces allowed ' +
    '(e.g. --security-opt seccomp=unconfined, or --privileged). To run trusted code without isolation, use ' +
    'localProvider() explicitly.';
  let result: RunResult;
  try {
    result = await runHostProcess(
      bwrap,
      [...systemArgs, '--unshare-all', '--die-with-parent', '--new-session', 'true'],
      // The sandbox's own system PATH: the host's may name folders the probe does not bind.
      { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' }, timeoutMs: 10_000, ...(user ?? {}) },
    );
  } catch (error) {
    throw new SandboxError(`bubblewrap is not usable: cannot run ${JSON.stringify(bwrap)}. ${fix}`, {
      cause: error,
      code: 'sandbox_unavailable',
    });
  }
  if (result.exitCode !== 0) {
    throw new SandboxError(
      `bubblewrap is not usable: \`${bwrap} --unshare-all true\` exited ${result.exitCode ?? result.signal}` +
        `${user ? ` as uid ${user.uid}` : ''}: ${tailOf(result.output.trim(), 500)}. ${fix}`,
      { code: 'sandbox_unavailable', data: { exitCode: result.exitCode, output: result.output } },
    );
  }
}
