/**
 * One hosted sandbox, whatever the vendor: the `Sandbox` interface over a `HostedSession` (the few calls
 * each vendor's SDK makes). Timeouts are enforced inside the sandbox (`timeout -s KILL`) and every process
 * of an exec carries a marker, so a timeout or an abort kills detached children too; the vendor's own
 * server-side lifetime (set at create) is the backstop when this process dies.
 */
import { execFile } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { posix } from 'node:path';
import { promisify } from 'node:util';
import { ConfigError, SandboxError } from '@vime/core';
import { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES, decodeUtf8 } from '@vime/core/utils';
import type {
  ExecOptions,
  ExecResult,
  OpOptions,
  ReadOptions,
  Sandbox,
  SandboxCapabilities,
  SandboxEmitter,
  TerminateReason,
} from '@vime/sandbox';
import {
  EXEC_MARKER_ENV,
  KILL_MARKED,
  newExecId,
  readCap,
  register,
  SandboxOps,
  sandboxPath,
  tailOf,
  tooLarge,
} from '@vime/sandbox/kit';
import type { HostedVendor } from './errors.js';

const execFileAsync = promisify(execFile);

/** Options of one command run through a vendor's SDK. */
export interface SessionRunOptions {
  cwd: string;
  env: Record<string, string>;
  stdin?: Uint8Array | undefined;
  signal: AbortSignal;
  onStdout: (chunk: Uint8Array) => void;
  onStderr: (chunk: Uint8Array) => void;
}

/** What a vendor adapter implements: run a command, move one file, ask whether it lives, kill it. */
export interface HostedSession {
  /** The vendor's id of the sandbox. */
  readonly vendorId: string;
  /** Run `argv` (no shell unless the argv is one); resolves with its exit code. */
  run(argv: readonly string[], options: SessionRunOptions): Promise<number>;
  /** Write a file (parents created). */
  writeFile(path: string, content: Uint8Array, signal: AbortSignal): Promise<void>;
  /** Read a file, at most `maxBytes` of it: `undefined` when it is larger. */
  readFile(path: string, maxBytes: number, signal: AbortSignal): Promise<Uint8Array | undefined>;
  isAlive(signal: AbortSignal): Promise<boolean>;
  /** Delete the sandbox at the vendor; idempotent. */
  kill(): Promise<void>;
}

export interface HostedSandboxInit {
  id: string;
  vendor: HostedVendor;
  session: HostedSession;
  workdir: string;
  labels: Record<string, string>;
  events: SandboxEmitter;
  handleSignals: boolean;
  lifetimeMs?: number | undefined;
}

/** How long past its timeout a command may take to report before the exec gives up on the vendor's stream. */
function reportGraceMs(timeoutMs: number): number {
  return Math.max(10_000, timeoutMs);
}

export class HostedSandbox implements Sandbox {
  readonly id: string;
  readonly provider: string;
  readonly workdir: string;
  readonly labels: Readonly<Record<string, string>>;
  /** Hosted sandboxes have the vendor's network (E2B, Daytona and Modal allow egress unless configured). */
  readonly capabilities: SandboxCapabilities = { persistentProcesses: true, isolatedNetwork: false };
  readonly session: HostedSession;
  private readonly events: SandboxEmitter;
  private readonly ops: SandboxOps;

  constructor(init: HostedSandboxInit) {
    this.id = init.id;
    this.provider = init.vendor;
    this.session = init.session;
    this.workdir = init.workdir;
    this.labels = init.labels;
    this.events = init.events;
    const unregister = register(this, { handleSignals: init.handleSignals, lifetimeMs: init.lifetimeMs });
    this.ops = new SandboxOps({ id: this.id, provider: this.provider, events: this.events, unregister });
  }

  /** Kill every process of one exec, detached ones included, by its marker. */
  private async killMarked(execId: string): Promise<void> {
    const signal = AbortSignal.timeout(15_000);
    await this.session
      .run(['sh', '-c', KILL_MARKED, 'sh', EXEC_MARKER_ENV, execId], {
        cwd: '/',
        env: {},
        signal,
        onStdout: () => {},
        onStderr: () => {},
      })
      .catch(() => {});
  }

  async exec(command: string | readonly string[], options: ExecOptions = {}): Promise<ExecResult> {
    const result = await this.ops.track(options, async (signal) => {
      const started = performance.now();
      const execId = newExecId();
      let argv = typeof command === 'string' ? ['sh', '-c', command] : [...command];
      if (argv.length === 0) throw new SandboxError('exec needs a command', { code: 'invalid_argument' });
      const { timeoutMs } = options;
      if (timeoutMs !== undefined) {
        argv = ['timeout', '-s', 'KILL', (Math.max(1, timeoutMs) / 1000).toFixed(3), ...argv];
      }
      const max = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
      const stdout = new BoundedOutput(max);
      const stderr = new BoundedOutput(max);
      const merged = new BoundedOutput(max);
      // The vendor's stream may outlive the in-sandbox timeout (a lost connection): stop waiting for it.
      const overdue = new AbortController();
      const timer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => overdue.abort(), timeoutMs + reportGraceMs(timeoutMs));
      // A detached child that kept the command's output open keeps the stream open past the timeout.
      let swept = false;
      const sweep =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              swept = true;
              void this.killMarked(execId);
            }, timeoutMs + 1000);
      let exitCode: number;
      try {
        exitCode = await this.session.run(argv, {
          cwd: sandboxPath(this.workdir, options.cwd ?? this.workdir),
          env: { ...options.env, [EXEC_MARKER_ENV]: execId },
          stdin: typeof options.stdin === 'string' ? Buffer.from(options.stdin) : options.stdin,
          signal: AbortSignal.any([signal, overdue.signal]),
          onStdout: (chunk) => {
            stdout.push(Buffer.from(chunk));
            merged.push(Buffer.from(chunk));
          },
          onStderr: (chunk) => {
            stderr.push(Buffer.from(chunk));
            merged.push(Buffer.from(chunk));
          },
        });
      } catch (error) {
        if (!this.ops.terminating) await this.killMarked(execId);
        if (overdue.signal.aborted && !signal.aborted) exitCode = 137;
        else throw error;
      } finally {
        clearTimeout(timer);
        clearTimeout(sweep);
      }
      const durationMs = performance.now() - started;
      // Killed by `timeout` (137), or still running a second past it and killed by the sweep.
      const timedOut = timeoutMs !== undefined && durationMs >= timeoutMs && (exitCode === 137 || swept);
      if (timedOut) await this.killMarked(execId);
      return {
        exitCode: timedOut ? null : exitCode,
        stdout: stdout.text(),
        stderr: stderr.text(),
        output: merged.text(),
        timedOut,
        truncated: stdout.truncated || stderr.truncated || merged.truncated,
        durationMs,
      };
    });
    this.events.emit('exec', {
      id: this.id,
      provider: this.provider,
      durationMs: result.durationMs,
      exitCode: result.exitCode,
      timedOut: result.timedOut,
    });
    return result;
  }

  async writeFile(
    path: string,
    content: string | Uint8Array,
    options: OpOptions & { mode?: number | undefined } = {},
  ): Promise<void> {
    const target = sandboxPath(this.workdir, path);
    const bytes = typeof content === 'string' ? Buffer.from(content) : content;
    await this.ops.track(options, async (signal) => {
      await this.session.writeFile(target, bytes, signal);
      if (options.mode !== undefined) await this.mustRun(['chmod', options.mode.toString(8), target], signal);
    });
  }

  async readFile(path: string, options: ReadOptions = {}): Promise<Uint8Array> {
    const target = sandboxPath(this.workdir, path);
    const cap = readCap(options.maxBytes);
    return this.ops.track(options, async (signal) => {
      const bytes = await this.session.readFile(target, cap, signal);
      if (bytes === undefined) throw tooLarge(target, this.id, cap);
      return bytes;
    });
  }

  async readTextFile(path: string, options: ReadOptions = {}): Promise<string> {
    return decodeUtf8(await this.readFile(path, options));
  }

  async copyIn(hostDir: string, path: string, options: OpOptions = {}): Promise<void> {
    const st = await stat(hostDir).catch(() => undefined);
    if (!st?.isDirectory())
      throw new ConfigError(`copyIn hostDir: ${JSON.stringify(hostDir)} is not a folder`);
    const target = sandboxPath(this.workdir, path);
    await this.ops.track(options, async (signal) => {
      const { stdout: archive } = await execFileAsync('tar', ['-C', hostDir, '-cf', '-', '.'], {
        encoding: 'buffer',
        maxBuffer: 2 ** 31,
        signal,
      });
      // The archive goes next to its target and is unpacked from there (cwd), then removed.
      const name = `.vime-copyin-${newExecId()}.tar`;
      await this.session.writeFile(posix.join(target, name), archive, signal);
      await this.mustRun(
        ['sh', '-c', 'tar --no-same-owner -xf "$1"; rc=$?; rm -f "$1"; exit $rc', 'sh', name],
        signal,
        target,
      );
    });
  }

  /** Run a helper command; a failure is a `SandboxError` with its output. */
  private async mustRun(argv: readonly string[], signal: AbortSignal, cwd = this.workdir): Promise<void> {
    let err = '';
    const code = await this.session.run(argv, {
      cwd,
      env: {},
      signal,
      onStdout: () => {},
      onStderr: (c) => {
        err += decodeUtf8(c);
      },
    });
    if (code !== 0) {
      throw new SandboxError(
        `${argv[0]} failed in sandbox ${this.id} (exit ${code}): ${tailOf(err.trim(), 500)}`,
      );
    }
  }

  async isAlive(options: OpOptions = {}): Promise<boolean> {
    if (this.ops.terminating) return false;
    try {
      return await this.session.isAlive(options.signal ?? AbortSignal.timeout(30_000));
    } catch {
      return false;
    }
  }

  terminate(): Promise<void> {
    return this.terminateWith('requested');
  }

  terminateWith(reason: TerminateReason): Promise<void> {
    return this.ops.terminate(
      reason,
      () => this.session.kill(),
      `terminating ${this.provider} sandbox ${this.id} (${this.session.vendorId}) failed; its server-side lifetime ends it`,
    );
  }
}
