/** Host-side process helper for the offline task-set generator (git, python, pytest on this machine). */
import { spawn } from 'node:child_process';
import { SandboxError } from '@vime/core';

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

export interface RunOptions {
  cwd: string;
  env?: Record<string, string>;
  input?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Run a program (no shell); on timeout or abort the whole process group is killed. */
export function run(command: string, args: readonly string[], options: RunOptions): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    options.signal?.throwIfAborted();
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: { ...process.env, ...options.env },
      stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      detached: true,
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let timedOut = false;
    const kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            kill();
          }, options.timeoutMs);
    const onAbort = () => kill();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    child.stdout?.on('data', (b: Buffer) => out.push(b));
    child.stderr?.on('data', (b: Buffer) => err.push(b));
    child.on('error', (error) => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      reject(
        new SandboxError(`could not start ${command}: ${error.message}; is it installed and on PATH?`, {
          cause: error,
        }),
      );
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      if (options.signal?.aborted) {
        reject(options.signal.reason);
        return;
      }
      resolve({
        code,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        timedOut,
      });
    });
    if (child.stdin) {
      child.stdin.on('error', () => {}); // a child that exits without reading its input is not an error
      child.stdin.end(options.input);
    }
  });
}

/** Run and require exit code 0; the error names the command, directory and stderr. */
export async function runOk(command: string, args: readonly string[], options: RunOptions): Promise<string> {
  const r = await run(command, args, options);
  if (r.code !== 0) {
    throw new SandboxError(
      `${command} ${args.join(' ')} failed in ${options.cwd} (exit ${r.code}${r.timedOut ? ', timed out' : ''}): ${(r.stderr || r.stdout).trim().slice(0, 800)}`,
    );
  }
  return r.stdout;
}
