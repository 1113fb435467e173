/**
 * Running a program on this host: no shell, bounded output capture, a wall-clock timeout that kills the
 * program's whole process group (whatever it started that stayed in the group), abort support, and the
 * exit code and signal in the result. A program that cannot start, or whose kept stdout overflows, is a
 * `ProcessError`; one that fails is a result, unless `runProcessOk` is asked to require exit code 0.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { constants } from 'node:os';
import type { Readable } from 'node:stream';
import { errorMarker, hasErrorMarker, VimeError, type VimeErrorOptions } from '../errors.js';
import { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES } from './bounded-output.js';

/** Options of `runProcess`. */
export interface RunProcessOptions {
  cwd?: string | undefined;
  /** The child's whole environment (default: this process's). */
  env?: NodeJS.ProcessEnv | undefined;
  uid?: number | undefined;
  gid?: number | undefined;
  /** The child's input; without one it reads end of file at once. */
  stdin?: string | Uint8Array | Readable | undefined;
  /** Wall-clock limit: the whole process group is killed, `timedOut` is true and `exitCode` null. */
  timeoutMs?: number | undefined;
  /** Aborting kills the whole process group; the call rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
  /** What each stream (and the merged output) keeps: its first and last half (default 1 MiB; `Infinity`: all). */
  maxOutputBytes?: number | undefined;
  /**
   * Keep stdout as raw bytes (`raw`, not decoded into `stdout`), at most this many: more kills the process
   * group and fails with a `ProcessError` (`process_output_too_large`).
   */
  maxRawBytes?: number | undefined;
  /** Called with the pid once spawned and with `undefined` once it has exited (exit-time cleanup). */
  trackPid?: ((pid: number | undefined) => void) | undefined;
  /** After a timeout or abort killed the process group: kill what left it (e.g. `setsid` children). */
  afterKill?: (() => void) | undefined;
  /**
   * Give the child a pipe at fd 3 and report in `reported` whether it wrote to it: a launcher says there
   * that it has set up, then closes fd 3 before the real command runs, so the command cannot forge it.
   */
  reportFd?: boolean | undefined;
}

/** How a process ended and what it printed. */
export interface ProcessResult {
  /** The exit code; 128 + n when signal n killed it (as a shell reports it); null when it timed out. */
  exitCode: number | null;
  /** The signal that ended it, if one did. */
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** stdout and stderr merged in the order they came. */
  output: string;
  timedOut: boolean;
  /** Whether any stream lost its middle to `maxOutputBytes`. */
  truncated: boolean;
  durationMs: number;
  /** stdout's bytes, with `maxRawBytes`. */
  raw?: Buffer | undefined;
  /** Whether the child wrote to its fd 3, with `reportFd`. */
  reported?: boolean | undefined;
}

const processMarker = errorMarker('ProcessError');

/**
 * A program that could not start (`process_spawn_failed`), whose kept stdout overflowed
 * (`process_output_too_large`), or that `runProcessOk` required to succeed and did not (`process_failed`).
 */
export class ProcessError extends VimeError {
  readonly [processMarker] = true;
  constructor(
    code: 'process_spawn_failed' | 'process_output_too_large' | 'process_failed',
    message: string,
    options: VimeErrorOptions = {},
  ) {
    super(code, message, options);
  }

  /** Whether `value` is a `ProcessError`, from any copy of this package. */
  static override isInstance(value: unknown): value is ProcessError {
    return hasErrorMarker(value, processMarker);
  }
}

/** How long to wait for pipes to close once the main process has exited (a background child may hold them). */
const PIPE_GRACE_MS = 250;

/** Run `command` with `args` (no shell) to its end; see `RunProcessOptions`. */
export function runProcess(
  command: string,
  args: readonly string[],
  options: RunProcessOptions = {},
): Promise<ProcessResult> {
  if (options.signal?.aborted) return Promise.reject(options.signal.reason);
  return new Promise<ProcessResult>((resolve, reject) => {
    new ProcessRun(command, args, options, resolve, reject).start();
  });
}

/**
 * `runProcess`, and exit code 0 required: anything else is a `ProcessError` (`process_failed`) naming the
 * command, its folder, how it ended and the end of what it wrote to stderr (or stdout).
 */
export async function runProcessOk(
  command: string,
  args: readonly string[],
  options: RunProcessOptions = {},
): Promise<ProcessResult> {
  const r = await runProcess(command, args, options);
  if (r.exitCode === 0) return r;
  const how = r.timedOut
    ? `timed out after ${options.timeoutMs} ms`
    : r.signal
      ? `killed by ${r.signal}`
      : `exit ${r.exitCode}`;
  const said = (r.stderr.trim() || r.stdout.trim()).slice(-800);
  throw new ProcessError(
    'process_failed',
    `${[command, ...args].join(' ')} failed${options.cwd ? ` in ${options.cwd}` : ''} (${how}): ${said}`,
    {
      data: { command, args, cwd: options.cwd, exitCode: r.exitCode, signal: r.signal, timedOut: r.timedOut },
    },
  );
}

/** One child's run: its streams, its timers, and how it settles (once). */
class ProcessRun {
  private readonly stdout: BoundedOutput;
  private readonly stderr: BoundedOutput;
  private readonly merged: BoundedOutput;
  private readonly raw: Buffer[] = [];
  private rawBytes = 0;
  private overflow = false;
  private timedOut = false;
  private aborted = false;
  private reported = false;
  private exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private settled = false;
  private timer: NodeJS.Timeout | undefined;
  private graceTimer: NodeJS.Timeout | undefined;
  private readonly started = performance.now();
  private child!: ChildProcessWithoutNullStreams;
  private report: Readable | undefined;
  private readonly onAbort = () => {
    this.aborted = true;
    this.killGroup();
  };

  constructor(
    private readonly command: string,
    private readonly args: readonly string[],
    private readonly options: RunProcessOptions,
    private readonly resolve: (result: ProcessResult) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    const max = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    this.stdout = new BoundedOutput(max);
    this.stderr = new BoundedOutput(max);
    this.merged = new BoundedOutput(max);
  }

  start(): void {
    const { options } = this;
    this.child = spawn(this.command, this.args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: options.reportFd ? ['pipe', 'pipe', 'pipe', 'pipe'] : ['pipe', 'pipe', 'pipe'],
      // Its own process group, so that one signal kills the whole tree.
      detached: true,
      uid: options.uid,
      gid: options.gid,
    }) as ChildProcessWithoutNullStreams;
    const { child } = this;
    this.report = child.stdio[3] as Readable | undefined;
    this.report?.once('data', () => {
      this.reported = true;
    });
    if (options.timeoutMs !== undefined) {
      this.timer = setTimeout(() => {
        this.timedOut = true;
        this.killGroup();
      }, options.timeoutMs);
    }
    options.signal?.addEventListener('abort', this.onAbort, { once: true });
    child.once('error', (error: NodeJS.ErrnoException) => this.spawnFailed(error));
    if (child.pid !== undefined) options.trackPid?.(child.pid);
    child.stdout.on('data', (chunk: Buffer) => this.onStdout(chunk));
    child.stderr.on('data', (chunk: Buffer) => {
      this.stderr.push(chunk);
      this.merged.push(chunk);
    });
    child.once('exit', (code, signal) => {
      this.exit = { code, signal };
      this.graceTimer = setTimeout(() => this.finish(), PIPE_GRACE_MS);
    });
    child.once('close', (code, signal) => {
      this.exit ??= { code, signal };
      this.finish();
    });
    this.feedStdin();
  }

  private feedStdin(): void {
    const { stdin } = this.child;
    stdin.on('error', () => {
      // The program may exit without reading its input (EPIPE); that is not an error of ours.
    });
    const input = this.options.stdin;
    if (input === undefined) stdin.end();
    else if (typeof input === 'string' || input instanceof Uint8Array) stdin.end(input);
    else input.pipe(stdin);
  }

  private onStdout(chunk: Buffer): void {
    const { maxRawBytes } = this.options;
    if (maxRawBytes === undefined) {
      this.stdout.push(chunk);
    } else {
      this.rawBytes += chunk.length;
      if (this.rawBytes <= maxRawBytes) this.raw.push(chunk);
      else if (!this.overflow) {
        this.overflow = true;
        this.killGroup();
      }
    }
    this.merged.push(chunk);
  }

  private killGroup(): void {
    if (this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
    this.options.afterKill?.();
  }

  private spawnFailed(error: NodeJS.ErrnoException): void {
    const hint = error.code === 'ENOENT' ? '; is it installed and on PATH?' : '';
    this.finish(
      new ProcessError('process_spawn_failed', `could not start ${this.command}: ${error.message}${hint}`, {
        cause: error,
        data: { command: this.command, code: error.code },
      }),
    );
  }

  private finish(error?: unknown): void {
    if (this.settled) return;
    this.settled = true;
    const { options, child } = this;
    clearTimeout(this.timer);
    clearTimeout(this.graceTimer);
    options.signal?.removeEventListener('abort', this.onAbort);
    options.trackPid?.(undefined);
    child.stdout.destroy();
    child.stderr.destroy();
    this.report?.destroy();
    if (error !== undefined) this.reject(error);
    else if (this.aborted) this.reject(options.signal?.reason);
    else if (this.overflow) {
      this.reject(
        new ProcessError('process_output_too_large', `output larger than ${options.maxRawBytes} bytes`, {
          data: { command: this.command, maxBytes: options.maxRawBytes },
        }),
      );
    } else this.resolve(this.result());
  }

  private result(): ProcessResult {
    const { exit, options } = this;
    const out: ProcessResult = {
      exitCode: this.timedOut
        ? null
        : (exit?.code ?? (exit?.signal ? 128 + (constants.signals[exit.signal] ?? 0) : null)),
      signal: exit?.signal ?? null,
      stdout: this.stdout.text(),
      stderr: this.stderr.text(),
      output: this.merged.text(),
      timedOut: this.timedOut,
      truncated: this.stdout.truncated || this.stderr.truncated || this.merged.truncated,
      durationMs: performance.now() - this.started,
    };
    if (options.maxRawBytes !== undefined) out.raw = Buffer.concat(this.raw);
    if (options.reportFd) out.reported = this.reported;
    return out;
  }
}
