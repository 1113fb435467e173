/**
 * One child process with bounded output capture, a wall-clock timeout that kills its whole process group,
 * and abort support. The building block of the bubblewrap and local providers.
 */
import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import type { Readable } from 'node:stream';
import { SandboxError } from '@vime/core';
import { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES } from '../output.js';
import type { ExecResult } from '../types.js';

export interface RunOptions {
  cwd?: string;
  env: Record<string, string>;
  uid?: number;
  gid?: number;
  stdin?: string | Uint8Array | Readable;
  timeoutMs?: number;
  signal?: AbortSignal;
  maxOutputBytes?: number;
  /** Keep stdout as raw bytes, at most this many (file reads): more kills the process and fails with `file_too_large`. */
  maxRawBytes?: number;
  /** Called with the pid once spawned and again with `undefined` when it has exited. */
  track?: (pid: number | undefined) => void;
  /** After a timeout or abort: kill what escaped the process group (e.g. `setsid` children). */
  afterKill?: () => void;
  /**
   * The command is a launch chain that writes a byte to fd 3 once it has set up (joined its cgroups) and
   * closes fd 3 before the sandboxed command runs. No byte by the exit means the launch itself failed: a
   * `SandboxError`, never an exit code the sandboxed command could have produced.
   */
  launchReport?: boolean;
}

export interface RunResult extends ExecResult {
  signal: NodeJS.Signals | null;
  raw?: Buffer;
}

/** How long to wait for pipes to close once the main process has exited (a background child may hold them). */
const PIPE_GRACE_MS = 250;

export function runProcess(
  command: string,
  args: readonly string[],
  options: RunOptions,
): Promise<RunResult> {
  const { signal } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  const max = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  const stdout = new BoundedOutput(max);
  const stderr = new BoundedOutput(max);
  const merged = new BoundedOutput(max);
  const raw: Buffer[] = [];
  let rawBytes = 0;
  let overflow = false;
  const started = performance.now();

  return new Promise<RunResult>((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env,
      stdio: options.launchReport ? ['pipe', 'pipe', 'pipe', 'pipe'] : ['pipe', 'pipe', 'pipe'],
      // Own process group, so a timeout can kill the whole tree with one signal.
      detached: true,
      ...(options.uid === undefined ? {} : { uid: options.uid }),
      ...(options.gid === undefined ? {} : { gid: options.gid }),
    });
    let timedOut = false;
    let aborted = false;
    let launched = !options.launchReport;
    const report = child.stdio[3] as Readable | undefined;
    report?.once('data', () => {
      launched = true;
    });
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let settled = false;
    let graceTimer: NodeJS.Timeout | undefined;

    const killGroup = () => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
      options.afterKill?.();
    };
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            killGroup();
          }, options.timeoutMs);
    const onAbort = () => {
      aborted = true;
      killGroup();
    };
    signal?.addEventListener('abort', onAbort, { once: true });

    const finish = (error?: unknown) => {
      if (settled) return;
      settled = true;
      if (timer) clearTimeout(timer);
      if (graceTimer) clearTimeout(graceTimer);
      signal?.removeEventListener('abort', onAbort);
      options.track?.(undefined);
      child.stdout?.destroy();
      child.stderr?.destroy();
      report?.destroy();
      if (error !== undefined) return reject(error);
      if (aborted) return reject(signal?.reason);
      if (!launched && !timedOut) {
        return reject(
          new SandboxError(
            `the launch failed before the command started (exit ${exit?.code ?? exit?.signal}): ${stderr.text().trim()}`,
            { data: { exitCode: exit?.code ?? null, stderr: stderr.text() } },
          ),
        );
      }
      if (overflow) {
        return reject(
          new SandboxError(`output larger than ${options.maxRawBytes} bytes`, {
            code: 'file_too_large',
            data: { maxBytes: options.maxRawBytes },
          }),
        );
      }
      const out: RunResult = {
        exitCode: timedOut
          ? null
          : (exit?.code ?? (exit?.signal ? 128 + (constants.signals[exit.signal] ?? 0) : null)),
        signal: exit?.signal ?? null,
        stdout: stdout.text(),
        stderr: stderr.text(),
        output: merged.text(),
        timedOut,
        truncated: stdout.truncated || stderr.truncated || merged.truncated,
        durationMs: performance.now() - started,
      };
      if (options.maxRawBytes !== undefined) out.raw = Buffer.concat(raw);
      resolve(out);
    };

    child.once('error', (error: NodeJS.ErrnoException) => {
      finish(
        new SandboxError(`could not start ${command}: ${error.message}`, {
          cause: error,
          data: { command, code: error.code },
        }),
      );
    });
    if (child.pid !== undefined) options.track?.(child.pid);
    child.stdout.on('data', (chunk: Buffer) => {
      if (options.maxRawBytes === undefined) {
        stdout.push(chunk);
      } else {
        rawBytes += chunk.length;
        if (rawBytes <= options.maxRawBytes) raw.push(chunk);
        else if (!overflow) {
          overflow = true;
          killGroup();
        }
      }
      merged.push(chunk);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr.push(chunk);
      merged.push(chunk);
    });
    child.once('exit', (code, sig) => {
      exit = { code, signal: sig };
      graceTimer = setTimeout(() => finish(), PIPE_GRACE_MS);
    });
    child.once('close', (code, sig) => {
      exit ??= { code, signal: sig };
      finish();
    });

    child.stdin.on('error', () => {
      // The process may exit without reading its input (EPIPE); that is not an error of ours.
    });
    const input = options.stdin;
    if (input === undefined) child.stdin.end();
    else if (typeof input === 'string' || input instanceof Uint8Array) child.stdin.end(input);
    else input.pipe(child.stdin);
  });
}
