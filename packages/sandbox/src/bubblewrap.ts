/**
 * `bubblewrap`: the embedded default. Every exec is one `bwrap` process with fresh namespaces (no network,
 * private /tmp and pid namespace), the host system (or a prepared rootfs) read-only, and only this
 * sandbox's work dir writable. Killing `bwrap` tears down its pid namespace, so a timeout kills every
 * process the command started, detached ones included.
 */
import { spawn } from 'node:child_process';
import { existsSync, lstatSync, readlinkSync } from 'node:fs';
import { chmod, chown, mkdir, stat } from 'node:fs/promises';
import { isAbsolute, join, posix } from 'node:path';
import { ConfigError, type Logger, SandboxError } from '@vime/core';
import { EventEmitter } from 'eventemitter3';
import { BwrapSession, SUPERVISOR } from './bwrap-session.js';
import { createCgroups } from './cgroup.js';
import { HostSandbox, type RunExecOptions, sandboxPath } from './host-sandbox.js';
import { defaultRootDir, HostState } from './host-state.js';
import { forwardWarnings, newSandboxId, sandboxLabels, withTrackedCreate } from './lifecycle.js';
import { tailOf } from './output.js';
import { EXEC_MARKER_ENV, newExecId } from './proc.js';
import { type RunResult, runProcess } from './process.js';
import type { OpOptions, Sandbox, SandboxEmitter, SandboxProvider, SandboxSpec } from './types.js';

export interface BubblewrapProviderOptions {
  /** Parent folder of sandbox state (default `<tmpdir>/vime-sandboxes`). */
  rootDir?: string;
  /** The bwrap binary (default `bwrap` on PATH). */
  bwrapPath?: string;
  /**
   * Unprivileged uid/gid the sandboxed processes run as when this process is root (default 65533).
   * Root inside bwrap could remount the read-only system writable, so root is never used.
   */
  uid?: number;
  gid?: number;
  /** Named rootfs folders usable as `spec.image` (an absolute folder path works too). */
  images?: Record<string, string>;
  /** PATH inside the sandbox (default `/usr/local/bin:/usr/bin:/bin`). */
  path?: string;
  /**
   * `session` (default when the sandbox root has python3): one bwrap per sandbox with a small supervisor
   * that forks each command, so an exec costs about a plain spawn, and background processes live until
   * terminate. `per-exec`: a fresh bwrap for every command (fresh namespaces each time; nothing outlives
   * its exec), the fallback for roots without python3.
   */
  execMode?: 'session' | 'per-exec';
  events?: SandboxEmitter;
  logger?: Logger;
  /** Terminate live sandboxes on SIGINT/SIGTERM/SIGHUP and exit (default true). */
  handleSignals?: boolean;
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
  const bwrap = options.bwrapPath ?? 'bwrap';
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

  return withTrackedCreate(
    {
      name: 'bubblewrap',
      events,
      async create(spec: SandboxSpec, op: OpOptions = {}): Promise<Sandbox> {
        op.signal?.throwIfAborted();
        probe ??= probeBwrap(bwrap, user);
        // A failed probe is not cached: the fix (installing bwrap) may happen while the process runs.
        await probe.catch((error) => {
          probe = undefined;
          throw error;
        });
        const started = performance.now();
        const workdir = posix.resolve('/', spec.workdir);
        const rootfs = spec.image === undefined ? undefined : resolveImage(spec.image, options.images);
        if (rootfs) await assertDir(rootfs, 'spec.image');
        const id = newSandboxId();
        const labels = sandboxLabels(id, spec.labels);
        const state = await HostState.create(rootDir, {
          id,
          provider: 'bubblewrap',
          labels,
          createdAt: Date.now(),
          ...(spec.lifetimeMs === undefined ? {} : { lifetimeMs: spec.lifetimeMs }),
          cgroups: [],
          mounts: [],
        });
        try {
          const hostWork = join(state.dir, 'work');
          await mkdir(hostWork, { mode: 0o755 });
          if (user) await chown(hostWork, user.uid, user.gid);
          let root: string | undefined;
          if (rootfs) root = await prepareRoot(state, rootfs, workdir, user);
          state.meta.cgroups = await createCgroups(`vime-${id}`, spec.limits);
          await state.saveMeta();
          const python = options.execMode === 'per-exec' ? undefined : findPython(root);
          if (options.execMode === 'session' && !python) {
            throw new ConfigError(
              `bubblewrap execMode "session" needs python3 in the sandbox root (${root ?? 'the host /usr'}); ` +
                'install it there or use execMode "per-exec"',
            );
          }
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
            { ...config, workdir, hostWork, root, python },
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

/** The python3 a session supervisor runs with, as a path inside the sandbox, if the root has one. */
function findPython(root: string | undefined): string | undefined {
  for (const candidate of ['/usr/bin/python3', '/usr/local/bin/python3']) {
    if (existsSync(join(root ?? '/', candidate))) return candidate;
  }
  return undefined;
}

interface BwrapConfig {
  bwrap: string;
  user: { uid: number; gid: number } | undefined;
  path: string;
  systemArgs: string[];
}

function resolveImage(image: string, images: Record<string, string> | undefined): string {
  const named = images?.[image];
  if (named !== undefined) return named;
  if (isAbsolute(image)) return image;
  throw new ConfigError(
    `bubblewrap image ${JSON.stringify(image)} is neither a rootfs folder path nor a name in ` +
      `options.images (${Object.keys(images ?? {}).join(', ') || 'none configured'}); pass an absolute rootfs ` +
      'path or register it: bubblewrapProvider({ images: { name: "/path/to/rootfs" } })',
  );
}

async function assertDir(path: string, what: string): Promise<void> {
  const st = await stat(path).catch(() => undefined);
  if (!st?.isDirectory()) {
    throw new ConfigError(
      `${what}: ${JSON.stringify(path)} is not a folder; prepare a rootfs folder there first`,
    );
  }
}

/** The per-sandbox root over a read-only rootfs: an overlay (root) or a copy (unprivileged). */
async function prepareRoot(
  state: HostState,
  rootfs: string,
  workdir: string,
  user: { uid: number; gid: number } | undefined,
): Promise<string> {
  const root = join(state.dir, 'root');
  if (isRoot()) {
    const upper = join(state.dir, 'upper');
    const work = join(state.dir, 'overlay-work');
    await Promise.all([mkdir(root), mkdir(upper), mkdir(work)]);
    state.meta.mounts.push(root);
    await state.saveMeta();
    const result = await runProcess(
      'mount',
      ['-t', 'overlay', 'overlay', '-o', `lowerdir=${rootfs},upperdir=${upper},workdir=${work}`, root],
      { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } },
    );
    if (result.exitCode !== 0) {
      throw new SandboxError(`overlay mount of rootfs ${rootfs} failed: ${result.output.trim()}`);
    }
  } else {
    const result = await runProcess('cp', ['-a', '--reflink=auto', `${rootfs}/.`, root], {
      env: { PATH: '/usr/bin:/bin' },
    });
    if (result.exitCode !== 0)
      throw new SandboxError(`copy of rootfs ${rootfs} failed: ${result.output.trim()}`);
  }
  // bwrap mounts over these as the sandbox user, who cannot create them in a root-owned rootfs.
  for (const dir of ['proc', 'dev', 'tmp']) await mkdir(join(root, dir), { recursive: true });
  const mountPoint = join(root, workdir);
  await mkdir(mountPoint, { recursive: true });
  await chmod(mountPoint, 0o755);
  if (user) await chown(mountPoint, user.uid, user.gid);
  return root;
}

async function probeBwrap(bwrap: string, user: { uid: number; gid: number } | undefined): Promise<void> {
  const fix =
    'Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap). On Ubuntu >= 23.10 unprivileged user ' +
    'namespaces are restricted by AppArmor: install an AppArmor profile for bwrap or set ' +
    'kernel.apparmor_restrict_unprivileged_userns=0. Inside a container, run it with user namespaces allowed ' +
    '(e.g. --security-opt seccomp=unconfined, or --privileged). To run trusted code without isolation, use ' +
    'localProvider() explicitly.';
  let result: RunResult;
  try {
    result = await runProcess(
      bwrap,
      ['--ro-bind', '/', '/', '--unshare-all', '--die-with-parent', '--new-session', 'true'],
      { env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, timeoutMs: 10_000, ...(user ?? {}) },
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

interface BwrapSandboxConfig extends BwrapConfig {
  workdir: string;
  hostWork: string;
  root: string | undefined;
  /** Set in session mode: the supervisor's interpreter. */
  python: string | undefined;
}

const WRITE_SCRIPT =
  'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && if [ -n "$2" ]; then chmod "$2" "$1"; fi';
const UNTAR_SCRIPT = 'mkdir -p -- "$1" && tar -xf - -C "$1" --no-same-owner';

class BwrapSandbox extends HostSandbox {
  readonly workdir: string;
  private readonly config: BwrapSandboxConfig;

  constructor(init: ConstructorParameters<typeof HostSandbox>[0], config: BwrapSandboxConfig) {
    super(init);
    this.config = config;
    this.workdir = config.workdir;
  }

  private bwrapArgs(argv: readonly string[], options: RunExecOptions, session?: string): string[] {
    const { config } = this;
    const args = config.root ? ['--bind', config.root, '/'] : [...config.systemArgs];
    args.push(
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--tmpfs',
      '/tmp',
      '--bind',
      config.hostWork,
      config.workdir,
      // The root itself is bwrap's scratch tmpfs: make it read-only too, so the work dir and /tmp are the
      // only writable places (over a rootfs, the root is the sandbox's own writable layer).
      ...(config.root ? [] : ['--remount-ro', '/']),
      '--chdir',
      sandboxPath(config.workdir, options.cwd ?? config.workdir),
      '--unshare-all',
      '--die-with-parent',
      '--new-session',
      '--hostname',
      'sandbox',
      '--clearenv',
    );
    // A session's supervisor gets a bare environment; each command's own comes with its request.
    const env = session ? { PATH: config.path, LANG: 'C.UTF-8' } : this.commandEnv(options);
    for (const [k, v] of Object.entries(env)) args.push('--setenv', k, v);
    args.push('--', ...(session ? [session, ...argv.slice(1)] : argv));
    return args;
  }

  /** Per-command rlimits (CPU seconds, file size, address space). */
  private rlimits(): Record<string, number> {
    const limits = this.spec.limits;
    const out: Record<string, number> = {};
    if (limits?.cpuSeconds !== undefined) out.cpu = Math.ceil(limits.cpuSeconds);
    if (limits?.fileSizeBytes !== undefined) out.fsize = limits.fileSizeBytes;
    if (limits?.addressSpaceBytes !== undefined) out.as = limits.addressSpaceBytes;
    return out;
  }

  /**
   * The launch chain: [cgroup attach as root] → [drop to the sandbox uid] → [prlimit] → bwrap. A session
   * applies rlimits per command inside instead, so the supervisor itself is not bounded by them.
   */
  private launch(
    bwrapArgs: string[],
    withRlimits: boolean,
  ): { command: string; args: string[]; uid?: number; gid?: number } {
    const { config } = this;
    let chain = [config.bwrap, ...bwrapArgs];
    const rl = withRlimits ? Object.entries(this.rlimits()).map(([k, v]) => `--${k}=${v}`) : [];
    if (rl.length > 0) chain = ['prlimit', ...rl, '--', ...chain];
    const cgroups = this.state.meta.cgroups;
    if (cgroups.length === 0) {
      return { command: chain[0]!, args: chain.slice(1), ...(config.user ?? {}) };
    }
    // Join the cgroups before anything forks, then drop privileges: a pid written after spawn would race
    // with bwrap's own forks.
    if (config.user) {
      chain = [
        'setpriv',
        `--reuid=${config.user.uid}`,
        `--regid=${config.user.gid}`,
        '--clear-groups',
        '--',
        ...chain,
      ];
    }
    const attach = 'for g in $VIME_CGROUPS; do echo $$ > "$g/cgroup.procs" || exit 125; done; exec "$@"';
    return { command: '/bin/sh', args: ['-c', attach, 'sh', ...chain] };
  }

  private session: BwrapSession | undefined;

  /** Start (or restart) the sandbox's session and wait for its supervisor to report ready. */
  async startSession(signal?: AbortSignal): Promise<BwrapSession> {
    const { config } = this;
    const launch = this.launch(
      this.bwrapArgs(['python3', '-c', SUPERVISOR, JSON.stringify(this.rlimits())], {}, config.python),
      false,
    );
    const session = new BwrapSession({
      ...launch,
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', VIME_CGROUPS: this.state.meta.cgroups.join(' ') },
    });
    this.session = session;
    this.state.trackPid(session.pid, undefined);
    const timeout = AbortSignal.timeout(30_000);
    const abort = signal ? AbortSignal.any([signal, timeout]) : timeout;
    try {
      await Promise.race([
        session.ready,
        new Promise((_, reject) =>
          abort.addEventListener('abort', () => reject(abort.reason), { once: true }),
        ),
      ]);
    } catch (error) {
      session.close();
      throw SandboxError.isInstance(error)
        ? error
        : new SandboxError(`the bubblewrap session of sandbox ${this.id} did not start: ${String(error)}`, {
            cause: error,
          });
    }
    return session;
  }

  protected async run(
    command: string | readonly string[],
    options: RunExecOptions,
    raw: boolean,
  ): Promise<RunResult> {
    const argv = typeof command === 'string' ? ['sh', '-c', command] : [...command];
    if (argv.length === 0) throw new SandboxError('exec needs a command', { code: 'invalid_argument' });
    if (this.config.python) {
      // A session that died (e.g. its supervisor was OOM-killed) is replaced on the next command.
      const session = this.session?.alive ? this.session : await this.startSession(options.signal);
      const marker = newExecId();
      return session.run({
        argv,
        env: { ...this.commandEnv(options), [EXEC_MARKER_ENV]: marker },
        cwd: sandboxPath(this.config.workdir, options.cwd ?? this.config.workdir),
        marker,
        raw,
        ...(options.stdin === undefined ? {} : { stdin: options.stdin }),
        ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
        ...(options.signal === undefined ? {} : { signal: options.signal }),
        ...(options.maxOutputBytes === undefined ? {} : { maxOutputBytes: options.maxOutputBytes }),
      });
    }
    return this.runPerExec(argv, options, raw);
  }

  private commandEnv(options: RunExecOptions): Record<string, string> {
    return {
      PATH: this.config.path,
      HOME: this.config.workdir,
      LANG: 'C.UTF-8',
      ...this.spec.env,
      ...options.env,
    };
  }

  private runPerExec(argv: string[], options: RunExecOptions, raw: boolean): Promise<RunResult> {
    const launch = this.launch(this.bwrapArgs(argv, options), true);
    let pid: number | undefined;
    return runProcess(launch.command, launch.args, {
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', VIME_CGROUPS: this.state.meta.cgroups.join(' ') },
      ...(launch.uid === undefined ? {} : { uid: launch.uid, gid: launch.gid! }),
      ...(options.stdin === undefined ? {} : { stdin: options.stdin }),
      ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      ...(options.maxOutputBytes === undefined ? {} : { maxOutputBytes: options.maxOutputBytes }),
      rawStdout: raw,
      track: (p) => {
        this.state.trackPid(p, pid);
        pid = p;
      },
    });
  }

  private async checked(
    what: string,
    argv: string[],
    options: OpOptions & Pick<RunExecOptions, 'stdin'>,
    raw = false,
  ): Promise<RunResult> {
    return this.track(options, async (signal) => {
      const result = await this.run(
        argv,
        { signal, ...(options.stdin === undefined ? {} : { stdin: options.stdin }) },
        raw,
      );
      if (result.exitCode !== 0) {
        throw new SandboxError(`${what} failed in sandbox ${this.id}: ${tailOf(result.stderr.trim(), 500)}`, {
          data: { exitCode: result.exitCode, stderr: result.stderr },
        });
      }
      return result;
    });
  }

  async writeFile(
    path: string,
    content: string | Uint8Array,
    options: OpOptions & { mode?: number } = {},
  ): Promise<void> {
    const target = sandboxPath(this.workdir, path);
    const mode = options.mode === undefined ? '' : options.mode.toString(8);
    await this.checked(`writeFile ${target}`, ['sh', '-c', WRITE_SCRIPT, 'sh', target, mode], {
      ...options,
      stdin: content,
    });
  }

  async readFile(path: string, options: OpOptions = {}): Promise<Uint8Array> {
    const target = sandboxPath(this.workdir, path);
    const result = await this.checked(`readFile ${target}`, ['cat', '--', target], options, true);
    return new Uint8Array(result.raw!);
  }

  async copyIn(hostDir: string, path: string, options: OpOptions = {}): Promise<void> {
    await assertDir(hostDir, 'copyIn hostDir');
    const target = sandboxPath(this.workdir, path);
    // The host side packs (it may read what the sandbox user cannot); the sandbox user unpacks, so
    // nothing is written with host privileges and symlinks in the sandbox cannot redirect the write.
    const tar = spawn('tar', ['-C', hostDir, '-cf', '-', '.'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let tarErr = '';
    tar.stderr.on('data', (d: Buffer) => {
      tarErr += d.toString();
    });
    const tarExit = new Promise<number | null>((resolve) => tar.once('close', resolve));
    try {
      await this.checked(`copyIn ${hostDir} -> ${target}`, ['sh', '-c', UNTAR_SCRIPT, 'sh', target], {
        ...options,
        stdin: tar.stdout,
      });
    } catch (error) {
      tar.kill('SIGKILL');
      throw error;
    }
    // null: SIGPIPE after the unpacker stopped at the end-of-archive marker, which it reported as success.
    const code = await tarExit;
    if (code !== 0 && code !== null)
      throw new SandboxError(`copyIn: packing ${hostDir} failed: ${tarErr.trim()}`);
  }
}
