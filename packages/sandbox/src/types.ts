import type { EventEmitter } from 'eventemitter3';

/**
 * The provider interface every sandbox backend implements. Every operation takes an `AbortSignal`.
 */

/**
 * Resource limits of a sandbox. Every field is optional: a missing one takes its default
 * (`DEFAULT_LIMITS`), `null` lifts that one limit, and `limits: 'none'` on the spec lifts them all.
 */
export interface ResourceLimits {
  /** Memory of the whole sandbox, bytes (memory cgroup; where none is writable, RLIMIT_DATA per process). */
  memoryBytes?: number | null | undefined;
  /** Processes and threads of the whole sandbox (pids cgroup; else RLIMIT_NPROC in its user namespace). */
  pids?: number | null | undefined;
  /** CPU seconds of each process (RLIMIT_CPU). */
  cpuSeconds?: number | null | undefined;
  /** Largest file a process may write, bytes (RLIMIT_FSIZE). */
  fileSizeBytes?: number | null | undefined;
  /** Open files of each process (RLIMIT_NOFILE). */
  openFiles?: number | null | undefined;
  /** Size of the private `/tmp` (and of `/dev/shm`), bytes. */
  tmpBytes?: number | null | undefined;
  /** Address space of each process, bytes (RLIMIT_AS; RLIMIT_DATA on docker, whose engine has no `as` ulimit). */
  addressSpaceBytes?: number | null | undefined;
  /** CPU share in cores (cpu cgroup, or the engine's NanoCpus). */
  cpus?: number | null | undefined;
}

/**
 * What a sandbox is created from: image, work dir, env, limits, labels, lifetime, proxy channel and binds.
 */
export interface SandboxSpec {
  /** Image (docker) or prepared rootfs name/folder (bubblewrap); default: the host's read-only system. */
  image?: string | undefined;
  /** Working directory inside the sandbox (e.g. `/testbed`). */
  workdir: string;
  env?: Record<string, string> | undefined;
  /** Resource limits (default `DEFAULT_LIMITS`); `'none'` opts out of every limit explicitly. */
  limits?: ResourceLimits | 'none' | undefined;
  /** Labels stamped on everything created (the run label makes `reapOrphans` possible). */
  labels?: Record<string, string> | undefined;
  /**
   * Maximum lifetime in milliseconds, counted from the create: terminated when it ends (and
   * `reapOrphans({ olderThanMs })` finds leftovers). A lifetime that ends before the sandbox is ready fails the create.
   */
  lifetimeMs?: number | undefined;
  /**
   * The one endpoint the sandbox may reach (bubblewrap, docker): a host unix socket served inside the sandbox's own
   * network namespace at `http://127.0.0.1:<port>`. Nothing else is reachable: not the host's loopback,
   * not the outside.
   */
  proxy?: ProxyChannel | undefined;
  /** Host files or folders visible read-only inside the sandbox (bubblewrap, docker): e.g. a harness binary. */
  readOnlyBinds?: readonly ReadOnlyBind[] | undefined;
}

/** The capture proxy a sandbox may reach: its host unix socket. */
export interface ProxyChannel {
  /** Absolute path of the host unix socket (the capture proxy's `socketPath`). */
  socketPath: string;
  /** Loopback port inside the sandbox that forwards to the socket (default `PROXY_CHANNEL_PORT`). */
  port?: number | undefined;
}

/** A host path mounted read-only into a sandbox. */
export interface ReadOnlyBind {
  /** Absolute host path. */
  source: string;
  /** Absolute path inside the sandbox (not below the work dir, `/tmp`, `/proc` or `/dev`). */
  target: string;
}

/** What a backend can do beyond the common interface. */
export interface SandboxCapabilities {
  /** Background processes started by one `exec` survive into the next (docker, local, bubblewrap sessions; not bubblewrap per-exec). */
  persistentProcesses: boolean;
  /** Network egress is blocked. */
  isolatedNetwork: boolean;
}

/** Options of `sandbox.exec`. */
export interface ExecOptions {
  cwd?: string | undefined;
  env?: Record<string, string> | undefined;
  /** Wall-clock timeout; on expiry the whole process tree is killed and `timedOut` is true. */
  timeoutMs?: number | undefined;
  stdin?: string | Uint8Array | undefined;
  /** Cap on captured output per stream, in bytes (default 1 MiB); head and tail are kept, the middle elided. */
  maxOutputBytes?: number | undefined;
  signal?: AbortSignal | undefined;
}

/**
 * What a command run in a sandbox did: exit code, output, whether it timed out or was cut, and its duration.
 */
export interface ExecResult {
  /** Exit code (128 + signal number when killed by a signal, as a shell reports it); null when it timed out. */
  exitCode: number | null;
  stdout: string;
  stderr: string;
  /** stdout and stderr merged, in order where the backend allows. */
  output: string;
  timedOut: boolean;
  truncated: boolean;
  durationMs: number;
}

/** Options every sandbox operation takes. */
export interface OpOptions {
  signal?: AbortSignal | undefined;
}

/** Options of reading a file from a sandbox. */
export interface ReadOptions extends OpOptions {
  /**
   * Largest file read back to the host, bytes (default `DEFAULT_MAX_READ_BYTES`, 64 MiB); a larger one
   * fails with a `SandboxError` (`code: 'file_too_large'`) instead of filling this process's memory.
   */
  maxBytes?: number | undefined;
}

/** One sandbox: run commands, read and write files, copy folders in, terminate. */
export interface Sandbox {
  readonly id: string;
  readonly provider: string;
  readonly workdir: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly capabilities: SandboxCapabilities;
  /** `argv` runs without a shell; a string runs under `sh -c`. */
  exec(command: string | readonly string[], options?: ExecOptions): Promise<ExecResult>;
  /** Write a file; parents are created, a relative path is under the work dir. */
  writeFile(
    path: string,
    content: string | Uint8Array,
    options?: OpOptions & { mode?: number | undefined },
  ): Promise<void>;
  /** Read a file's bytes. */
  readFile(path: string, options?: ReadOptions): Promise<Uint8Array>;
  /** Read a file as UTF-8 text. */
  readTextFile(path: string, options?: ReadOptions): Promise<string>;
  /**
   * Copy a host directory's contents into the sandbox at `path` (created if missing), owned by the sandbox
   * user: the fast way to put a repository at the work dir.
   */
  copyIn(hostDir: string, path: string, options?: OpOptions): Promise<void>;
  /** Whether the sandbox still runs. */
  isAlive(options?: OpOptions): Promise<boolean>;
  /** Idempotent; never throws. */
  terminate(): Promise<void>;
}

/** A sandbox backend: creates sandboxes from a spec. */
export interface SandboxProvider {
  readonly name: string;
  /** Lifecycle events of every sandbox this provider creates. */
  readonly events: SandboxEmitter;
  /** Create a sandbox from `spec`. */
  create(spec: SandboxSpec, options?: OpOptions): Promise<Sandbox>;
}

/** Reason a sandbox was terminated. */
export type TerminateReason = 'requested' | 'lifetime' | 'exit' | 'signal' | 'pool' | 'create-failed';

/** Events (eventemitter3) emitted by providers, pools and the reaper. */
export interface SandboxEvents {
  /** A sandbox was created. */
  create: (event: {
    id: string;
    provider: string;
    labels: Record<string, string>;
    durationMs: number;
  }) => void;
  /** A sandbox was claimed from a pool, warm or created on demand. */
  claim: (event: { id: string; pool: string; warm: boolean; latencyMs: number }) => void;
  /** A command ran in a sandbox. */
  exec: (event: {
    id: string;
    provider: string;
    durationMs: number;
    exitCode: number | null;
    timedOut: boolean;
  }) => void;
  /** A sandbox was terminated. */
  terminate: (event: { id: string; provider: string; reason: TerminateReason; durationMs: number }) => void;
  /** A sandbox left behind was removed. */
  'leak-reaped': (event: {
    id: string;
    provider: string;
    labels: Record<string, string>;
    reason: string;
  }) => void;
  /**
   * Something failed in the background (a pool refill, a cleanup step; nothing was lost), or a limit cannot
   * be enforced (fully) on this host (`code: 'limit_not_enforced'`, once per provider and limit).
   */
  warning: (event: {
    message: string;
    cause?: unknown;
    code?: string | undefined;
    data?: Record<string, unknown> | undefined;
  }) => void;
}

/** The emitter of sandbox lifecycle events. */
export type SandboxEmitter = EventEmitter<SandboxEvents>;
