/**
 * One bubblewrap sandbox: the bwrap command line (read-only system, private `/tmp` and `/dev/shm` of
 * bounded size, only the work dir writable), the launch chain that puts it into its cgroups and drops to
 * the sandbox uid, the session or per-exec runs, and the file operations.
 */
import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { ConfigError, SandboxError } from '@vime/core';
import { deadlineSignal, sleep } from '@vime/core/utils';
import { forwarderSource, PROXY_SOCKET_IN_SANDBOX } from '../channel.js';
import type { ExecCgroups } from '../host/cgroups.js';
import { type RunResult, runHostProcess } from '../host/run-process.js';
import { HostSandbox, type RunExecOptions, sandboxPath } from '../host/sandbox.js';
import type { EffectiveLimits, Rlimits } from '../limits.js';
import { DEFAULT_MAX_READ_BYTES, readCap, tailOf, tooLarge } from '../output.js';
import { SANDBOX_MARKER_ENV } from '../process-markers.js';
import type { OpOptions, ProxyChannel, ReadOnlyBind, ReadOptions } from '../types.js';
import { BwrapSession, type SessionLaunch } from './session.js';
import { supervisorSource } from './supervisor.js';

export interface BwrapConfig {
  bwrap: string;
  user: { uid: number; gid: number } | undefined;
  path: string;
  systemArgs: string[];
}

export interface BwrapSandboxConfig extends BwrapConfig {
  workdir: string;
  hostWork: string;
  root: string | undefined;
  /** Bind the host's `/usr` read-only over the root's (an image labelled `dev.vime.host-usr=true`). */
  hostUsr: boolean;
  /** The image's own environment, under the spec's. */
  imageEnv: Record<string, string>;
  /** Set in session mode: the supervisor's interpreter. */
  python: string | undefined;
  limits: EffectiveLimits;
  /** Per-process rlimits of every command. */
  rlimits: Rlimits;
  /** Per-exec cgroups (session mode, where a cgroup is writable). */
  execCgroups: ExecCgroups | undefined;
  /** The proxy channel (session mode only): the socket bound in, the forwarder's port. */
  channel: Required<ProxyChannel> | undefined;
  binds: readonly ReadOnlyBind[];
}

export async function assertDir(path: string, what: string): Promise<void> {
  const st = await stat(path).catch(() => undefined);
  if (!st?.isDirectory()) {
    throw new ConfigError(
      `${what}: ${JSON.stringify(path)} is not a folder; prepare a rootfs folder there first`,
    );
  }
}

const WRITE_SCRIPT =
  'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && if [ -n "$2" ]; then chmod "$2" "$1"; fi';
const UNTAR_SCRIPT = 'mkdir -p -- "$1" && tar -xf - -C "$1" --no-same-owner';
// `head -c` stops at the cap even on an endless file (/dev/zero, a FIFO); cat where a root has no head.
const READ_SCRIPT = 'if command -v head >/dev/null; then exec head -c "$2" -- "$1"; fi; exec cat -- "$1"';

/** How long a restart waits for the killed session's exit before it starts the new one anyway. */
const SESSION_EXIT_WAIT_MS = 10_000;

export class BwrapSandbox extends HostSandbox {
  readonly workdir: string;
  private readonly config: BwrapSandboxConfig;
  private session: BwrapSession | undefined;

  constructor(init: ConstructorParameters<typeof HostSandbox>[0], config: BwrapSandboxConfig) {
    super(init);
    this.config = config;
    this.workdir = config.workdir;
  }

  private bwrapArgs(argv: readonly string[], options: RunExecOptions, session?: string): string[] {
    const { config } = this;
    const tmp = config.limits.tmpBytes;
    const sized = (path: string) => [...(tmp === undefined ? [] : ['--size', String(tmp)]), '--tmpfs', path];
    const args = config.root
      ? ['--bind', config.root, '/', ...(config.hostUsr ? ['--ro-bind', '/usr', '/usr'] : [])]
      : [...config.systemArgs];
    args.push(
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      // /dev is a tmpfs the sandbox user owns: bound /dev/shm, and make the rest read-only (the device
      // nodes are mounts of their own and stay usable).
      ...sized('/dev/shm'),
      '--remount-ro',
      '/dev',
      ...sized('/tmp'),
      ...(config.channel ? ['--ro-bind', config.channel.socketPath, PROXY_SOCKET_IN_SANDBOX] : []),
      ...config.binds.flatMap((b) => ['--ro-bind', b.source, b.target]),
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

  /**
   * The launch chain: [cgroup attach as root] → [drop to the sandbox uid] → [prlimit] → bwrap. A session
   * applies rlimits per command inside instead, so the supervisor itself is not bounded by them, and the
   * process count is counted in the sandbox's own user namespace. A per-exec launch also reports on fd 3
   * that its cgroups were joined (a session's fd 3 is its channel, and its supervisor reports readiness).
   */
  private launch(
    bwrapArgs: string[],
    perExec: boolean,
  ): SessionLaunch & { launchReport?: boolean | undefined } {
    const { config } = this;
    let chain = [config.bwrap, ...bwrapArgs];
    const rl = perExec
      ? Object.entries(config.rlimits)
          .filter(([k]) => k !== 'nproc')
          .map(([k, v]) => `--${k}=${v}`)
      : [];
    if (rl.length > 0) chain = ['prlimit', ...rl, '--', ...chain];
    // The marker lets a reaper find a launcher by its sandbox id; bwrap clears it for the sandbox itself.
    const env = {
      PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
      [SANDBOX_MARKER_ENV]: this.id,
      VIME_CGROUPS: this.state.meta.cgroups.join(' '),
    };
    if (this.state.meta.cgroups.length === 0) {
      return { command: chain[0]!, args: chain.slice(1), env, ...(config.user ?? {}) };
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
    // The report is closed before the chain runs, so no sandboxed command can forge it (see `launchReport`).
    const report = perExec ? 'printf 1 >&3; exec 3>&-; ' : '';
    const attach = `for g in $VIME_CGROUPS; do echo $$ > "$g/cgroup.procs" || exit 125; done; ${report}exec "$@"`;
    return { command: '/bin/sh', args: ['-c', attach, 'sh', ...chain], env, launchReport: perExec };
  }

  /** Start (or restart) the sandbox's session and wait for its supervisor to report ready. */
  async startSession(signal?: AbortSignal): Promise<BwrapSession> {
    const { config } = this;
    let argv = [
      'python3',
      '-c',
      supervisorSource(),
      JSON.stringify(config.rlimits),
      config.execCgroups ? '4' : '',
    ];
    if (config.channel) {
      const { port } = config.channel;
      argv = [
        'python3',
        '-c',
        forwarderSource(),
        PROXY_SOCKET_IN_SANDBOX,
        String(port),
        config.python!,
        ...argv.slice(1),
      ];
    }
    const session = new BwrapSession(
      this.launch(this.bwrapArgs(argv, {}, config.python), false),
      config.execCgroups,
    );
    this.session = session;
    this.state.trackPid(session.pid, undefined);
    const { signal: abort, clear } = deadlineSignal(30_000, signal);
    try {
      await Promise.race([
        session.ready,
        new Promise((_, reject) =>
          abort.addEventListener('abort', () => reject(abort.reason), { once: true }),
        ),
      ]);
    } catch (error) {
      session.close();
      if (this.ops.reason === 'lifetime') {
        throw new SandboxError(
          `sandbox ${this.id} reached the end of its lifetime (lifetimeMs ${this.spec.lifetimeMs}) before its session was ready; give it a longer lifetimeMs`,
          { code: 'sandbox_terminated', cause: error },
        );
      }
      throw SandboxError.isInstance(error) || signal?.aborted
        ? error
        : new SandboxError(`the bubblewrap session of sandbox ${this.id} did not start: ${String(error)}`, {
            cause: error,
          });
    } finally {
      clear();
    }
    return session;
  }

  /**
   * A new session once the killed one has exited (bounded): until then its processes are still being torn
   * down, and they hold the memory and process slots the new session starts in.
   */
  private async restartSession(signal?: AbortSignal): Promise<BwrapSession> {
    const old = this.session;
    if (old) {
      old.close();
      const waited = new AbortController();
      await Promise.race([old.gone, sleep(SESSION_EXIT_WAIT_MS, waited.signal).catch(() => {})]);
      waited.abort();
    }
    return this.startSession(signal);
  }

  protected async run(
    command: string | readonly string[],
    options: RunExecOptions,
    raw: boolean,
  ): Promise<RunResult> {
    return this.runWith(command, options, raw ? DEFAULT_MAX_READ_BYTES : undefined);
  }

  private async runWith(
    command: string | readonly string[],
    options: RunExecOptions,
    maxRawBytes: number | undefined,
  ): Promise<RunResult> {
    const argv = typeof command === 'string' ? ['sh', '-c', command] : [...command];
    if (argv.length === 0) throw new SandboxError('exec needs a command', { code: 'invalid_argument' });
    if (this.config.python) {
      // A session that died (its supervisor was killed, or a timeout ended it) is replaced on the next command.
      const session = this.session?.alive ? this.session : await this.restartSession(options.signal);
      return session.run({
        argv,
        env: this.commandEnv(options),
        cwd: sandboxPath(this.config.workdir, options.cwd ?? this.config.workdir),
        stdin: options.stdin,
        timeoutMs: options.timeoutMs,
        signal: options.signal,
        maxOutputBytes: options.maxOutputBytes,
        maxRawBytes,
      });
    }
    return this.runPerExec(argv, options, maxRawBytes);
  }

  private commandEnv(options: RunExecOptions): Record<string, string> {
    return {
      PATH: this.config.path,
      HOME: this.config.workdir,
      LANG: 'C.UTF-8',
      ...this.config.imageEnv,
      ...this.spec.env,
      ...options.env,
    };
  }

  private runPerExec(
    argv: string[],
    options: RunExecOptions,
    maxRawBytes: number | undefined,
  ): Promise<RunResult> {
    const launch = this.launch(this.bwrapArgs(argv, options), true);
    let pid: number | undefined;
    return runHostProcess(launch.command, launch.args, {
      env: launch.env,
      launchReport: launch.launchReport,
      uid: launch.uid,
      gid: launch.gid,
      stdin: options.stdin,
      timeoutMs: options.timeoutMs,
      signal: options.signal,
      maxOutputBytes: options.maxOutputBytes,
      maxRawBytes,
      trackPid: (p) => {
        this.state.trackPid(p, pid);
        pid = p;
      },
    });
  }

  private async checked(
    what: string,
    argv: string[],
    options: OpOptions & Pick<RunExecOptions, 'stdin'>,
    maxRawBytes?: number,
  ): Promise<RunResult> {
    return this.ops.track(options, async (signal) => {
      const result = await this.runWith(argv, { signal, stdin: options.stdin }, maxRawBytes);
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
    options: OpOptions & { mode?: number | undefined } = {},
  ): Promise<void> {
    const target = sandboxPath(this.workdir, path);
    const mode = options.mode === undefined ? '' : options.mode.toString(8);
    await this.checked(`writeFile ${target}`, ['sh', '-c', WRITE_SCRIPT, 'sh', target, mode], {
      ...options,
      stdin: content,
    });
  }

  async readFile(path: string, options: ReadOptions = {}): Promise<Uint8Array> {
    const target = sandboxPath(this.workdir, path);
    const cap = readCap(options.maxBytes);
    let result: RunResult;
    try {
      result = await this.checked(
        `readFile ${target}`,
        ['sh', '-c', READ_SCRIPT, 'sh', target, String(cap + 1)],
        options,
        cap,
      );
    } catch (error) {
      if (SandboxError.isInstance(error) && error.code === 'file_too_large')
        throw tooLarge(target, this.id, cap);
      throw error;
    }
    if (result.raw!.length > cap) throw tooLarge(target, this.id, cap);
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
      tarErr = tailOf(tarErr + d.toString(), 4000);
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
