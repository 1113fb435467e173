/**
 * `local`: plain child processes in a per-sandbox temp work dir. NO ISOLATION: the commands run as this
 * process's user with its network and file system. Only for trusted code, or platforms without bubblewrap.
 */
import { cp, mkdir, open, stat, writeFile } from 'node:fs/promises';
import { dirname, join, posix } from 'node:path';
import { SandboxError } from '@vime/core';
import type { Logger } from '@vime/core/utils';
import { EventEmitter } from 'eventemitter3';
import { refuseChannel } from '../channel.js';
import { forwardWarnings, newSandboxId, runOf, sandboxLabels, withTrackedCreate } from '../lifecycle.js';
import { checkLifetime, type EffectiveLimits, resolveLimits, resolveWorkdir, rlimitsOf } from '../limits.js';
import { DEFAULT_MAX_READ_BYTES, readCap, tooLarge } from '../output.js';
import { EXEC_MARKER_ENV, killByExecMarker, newExecId, SANDBOX_MARKER_ENV } from '../process-markers.js';
import type {
  OpOptions,
  ReadOptions,
  Sandbox,
  SandboxEmitter,
  SandboxProvider,
  SandboxSpec,
} from '../types.js';
import { type RunResult, runHostProcess } from './run-process.js';
import { HostSandbox, type RunExecOptions, sandboxPath } from './sandbox.js';
import { defaultRootDir, HostState } from './state.js';

/** Options of `localProvider`. */
export interface LocalProviderOptions {
  /** Parent folder of sandbox state (default `<tmpdir>/vime-sandboxes`). */
  rootDir?: string | undefined;
  /** PATH given to commands (default: this process's PATH). */
  path?: string | undefined;
  /** Shared event emitter (default: a new one, exposed as `provider.events`). */
  events?: SandboxEmitter | undefined;
  logger?: Logger | undefined;
  /** Terminate live sandboxes on SIGINT/SIGTERM/SIGHUP and exit (default true). */
  handleSignals?: boolean | undefined;
}

/**
 * Plain child processes in a temp folder. Unsafe for untrusted code: opt in explicitly.
 *
 * The spec's `workdir` (e.g. `/testbed`) cannot exist on the host, so it maps to a per-sandbox folder:
 * `sandbox.workdir` is that host folder, and `cwd`/file paths under the spec's workdir are rewritten to it.
 */
export function localProvider(options: LocalProviderOptions = {}): SandboxProvider {
  const events = options.events ?? (new EventEmitter() as SandboxEmitter);
  forwardWarnings(events, options.logger);
  const rootDir = options.rootDir ?? defaultRootDir();
  return withTrackedCreate(
    {
      name: 'local',
      events,
      async create(spec: SandboxSpec, op: OpOptions = {}): Promise<Sandbox> {
        op.signal?.throwIfAborted();
        refuseChannel(spec, 'local');
        if (spec.image !== undefined) {
          throw new SandboxError(
            `local sandboxes run on the host and cannot use image ${JSON.stringify(spec.image)}; ` +
              'drop spec.image or use dockerProvider()/bubblewrapProvider({ images })',
            { code: 'invalid_argument' },
          );
        }
        resolveWorkdir(spec?.workdir);
        checkLifetime(spec.lifetimeMs);
        // Local sandboxes are for trusted code: only the limits a spec names apply (as rlimits).
        const limits = resolveLimits(spec.limits, { defaults: false });
        const unenforced = (['memoryBytes', 'pids', 'cpus', 'tmpBytes'] as const).filter(
          (k) => limits[k] !== undefined,
        );
        if (unenforced.length > 0) {
          events.emit('warning', {
            message: `local: ${unenforced.join(', ')} cannot be enforced on a local sandbox (no isolation); use bubblewrapProvider() or dockerProvider()`,
            code: 'limit_not_enforced',
            data: { limits: unenforced },
          });
        }
        const started = performance.now();
        const id = newSandboxId(runOf(spec.labels));
        const labels = sandboxLabels(id, spec.labels);
        const state = await HostState.create(rootDir, {
          id,
          provider: 'local',
          labels,
          createdAt: Date.now(),
          lifetimeMs: spec.lifetimeMs,
          cgroups: [],
          mounts: [],
        });
        const hostWork = join(state.dir, 'work');
        await mkdir(hostWork, { recursive: true });
        const sandbox = new LocalSandbox({
          id,
          provider: 'local',
          spec,
          state,
          labels,
          events,
          capabilities: { persistentProcesses: true, isolatedNetwork: false },
          handleSignals: options.handleSignals ?? true,
        });
        sandbox.init(hostWork, options.path ?? process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin', limits);
        events.emit('create', { id, provider: 'local', labels, durationMs: performance.now() - started });
        return sandbox;
      },
    },
    options.handleSignals ?? true,
  );
}

class LocalSandbox extends HostSandbox {
  workdir = '';
  private path = '';
  private rlimits: string[] = [];

  init(hostWork: string, path: string, limits: EffectiveLimits): void {
    this.workdir = hostWork;
    this.path = path;
    this.rlimits = Object.entries(rlimitsOf(limits)).map(([k, v]) => `--${k}=${v}`);
  }

  /** Map a sandbox path to the host: the spec's workdir prefix becomes the host work dir. */
  private hostPath(path: string): string {
    const specWork = posix.resolve('/', this.spec.workdir);
    const resolved = sandboxPath(specWork, path);
    if (resolved === specWork) return this.workdir;
    if (resolved.startsWith(`${specWork}/`)) return join(this.workdir, resolved.slice(specWork.length + 1));
    return resolved;
  }

  protected async run(
    command: string | readonly string[],
    options: RunExecOptions,
    raw: boolean,
  ): Promise<RunResult> {
    const cwd = this.hostPath(options.cwd ?? this.workdir);
    const cwdStat = await stat(cwd).catch(() => undefined);
    if (!cwdStat?.isDirectory()) {
      throw new SandboxError(
        `exec cwd ${JSON.stringify(options.cwd)} is not a directory in sandbox ${this.id}`,
        {
          code: 'invalid_argument',
        },
      );
    }
    let argv = typeof command === 'string' ? ['/bin/sh', '-c', command] : [...command];
    if (argv.length === 0) throw new SandboxError('exec needs a command', { code: 'invalid_argument' });
    // rlimits work unprivileged; memory/pids/cpus need cgroups and are not applied here.
    if (this.rlimits.length > 0) argv = ['prlimit', ...this.rlimits, '--', ...argv];
    const execId = newExecId();
    let pid: number | undefined;
    try {
      return await runHostProcess(argv[0]!, argv.slice(1), {
        cwd,
        env: {
          PATH: this.path,
          HOME: this.workdir,
          LANG: 'C.UTF-8',
          ...this.spec.env,
          ...options.env,
          [EXEC_MARKER_ENV]: execId,
          [SANDBOX_MARKER_ENV]: this.id,
        },
        stdin: options.stdin,
        timeoutMs: options.timeoutMs,
        signal: options.signal,
        maxOutputBytes: options.maxOutputBytes,
        maxRawBytes: raw ? DEFAULT_MAX_READ_BYTES : undefined,
        trackPid: (p) => {
          this.state.trackPid(p, pid);
          pid = p;
        },
        afterKill: () => killByExecMarker(execId),
      });
    } catch (error) {
      // Like a shell: a missing program is exit code 127, not an exception.
      if (SandboxError.isInstance(error) && error.data?.code === 'ENOENT') {
        const message = `${argv[0]}: command not found\n`;
        return {
          exitCode: 127,
          signal: null,
          stdout: '',
          stderr: message,
          output: message,
          timedOut: false,
          truncated: false,
          durationMs: 0,
        };
      }
      throw error;
    }
  }

  /** File-system errors become SandboxErrors naming the operation and the sandbox path. */
  private async fsOp<T>(
    what: string,
    path: string,
    options: OpOptions,
    fn: (signal: AbortSignal) => Promise<T>,
  ) {
    return this.ops.track(options, async (signal) => {
      try {
        return await fn(signal);
      } catch (error) {
        if (signal.aborted || (SandboxError.isInstance(error) && error.code === 'file_too_large'))
          throw error;
        throw new SandboxError(`${what} ${path} failed in sandbox ${this.id}: ${(error as Error).message}`, {
          cause: error,
          data: { path, code: (error as NodeJS.ErrnoException).code },
        });
      }
    });
  }

  async writeFile(
    path: string,
    content: string | Uint8Array,
    options: OpOptions & { mode?: number | undefined } = {},
  ): Promise<void> {
    await this.fsOp('writeFile', path, options, async (signal) => {
      const target = this.hostPath(path);
      await mkdir(dirname(target), { recursive: true });
      await writeFile(target, content, {
        signal,
        ...(options.mode === undefined ? {} : { mode: options.mode }),
      });
    });
  }

  async readFile(path: string, options: ReadOptions = {}): Promise<Uint8Array> {
    const cap = readCap(options.maxBytes);
    return this.fsOp('readFile', path, options, async () => {
      const target = this.hostPath(path);
      const file = await open(target, 'r');
      try {
        const { size } = await file.stat();
        if (size > cap) throw tooLarge(path, this.id, cap, size);
        // Read one byte past the cap: a file that grew, a device or a FIFO is refused, not truncated.
        const chunks: Buffer[] = [];
        let n = 0;
        for (;;) {
          const chunk = Buffer.alloc(Math.min(1 << 20, cap + 1 - n));
          const { bytesRead } = await file.read(chunk, 0, chunk.length, null);
          if (bytesRead === 0) break;
          chunks.push(chunk.subarray(0, bytesRead));
          n += bytesRead;
          if (n > cap) throw tooLarge(path, this.id, cap);
        }
        return new Uint8Array(Buffer.concat(chunks));
      } finally {
        await file.close();
      }
    });
  }

  async copyIn(hostDir: string, path: string, options: OpOptions = {}): Promise<void> {
    await this.fsOp('copyIn', path, options, async () => {
      const target = this.hostPath(path);
      await mkdir(target, { recursive: true });
      await cp(hostDir, target, { recursive: true, force: true, verbatimSymlinks: true });
    });
  }
}
