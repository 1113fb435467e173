/**
 * Steps the coding loop needs around a sandbox: staging files, a setup command with retries, and long
 * commands that survive a dropped exec stream.
 */
import { randomBytes } from 'node:crypto';
import { SandboxError, type StagedFile } from '@vime/core';
import { BoundedOutput, retry, shellQuote, sleep } from '@vime/core/utils';
import { tailOf } from './output.js';
import type { ExecOptions, ExecResult, OpOptions, Sandbox } from './types.js';

/**
 * Write staged files into the sandbox (relative paths are under its work dir). Use it with
 * `TaskSpec.files` before the agent loop and with `TaskSpec.hiddenFiles` after it, for grading.
 */
export async function stageFiles(
  sandbox: Sandbox,
  files: readonly Pick<StagedFile, 'path' | 'content' | 'mode'>[],
  options: OpOptions = {},
): Promise<void> {
  for (const file of files) {
    await sandbox.writeFile(file.path, file.content, { signal: options.signal, mode: file.mode });
  }
}

/** Output that usually means "try again": network hiccups, rate limits, a lock held by a dying process. */
export const TRANSIENT_OUTPUT =
  /temporary failure|could not resolve|connection (?:reset|refused|timed out)|network is unreachable|tls handshake timeout|timed out|too many requests|rate limit|\b(?:429|502|503|504)\b|resource temporarily unavailable|text file busy|index\.lock|unable to lock/i;

/** Default retry rule: timeouts, kills by signal and transient-looking output are retried. */
export function isTransientFailure(result: ExecResult): boolean {
  return result.timedOut || result.exitCode === null || TRANSIENT_OUTPUT.test(tailOf(result.output, 4000));
}

/** Options of `runSetup`. */
export interface SetupOptions extends Omit<ExecOptions, 'stdin'> {
  /** Extra attempts after the first (default 2). */
  retries?: number | undefined;
  /** First backoff in milliseconds, doubled per attempt with ±20% jitter (default 500). */
  backoffMs?: number | undefined;
  maxBackoffMs?: number | undefined;
  /** Which failures are worth retrying (default `isTransientFailure`). */
  isTransient?: ((result: ExecResult) => boolean) | undefined;
}

/** One failed setup attempt, inside the retry loop only. */
class FailedAttempt {
  constructor(readonly transient: boolean) {}
}

/**
 * Run a setup command (e.g. checking out the task's start state), retrying transient failures with
 * exponential backoff. The final failure throws a `SandboxError` (code `setup_failed`) whose `data`
 * carries the real exit code, whether it timed out, the attempts made and the output tail.
 */
export async function runSetup(
  sandbox: Sandbox,
  command: string,
  options: SetupOptions = {},
): Promise<ExecResult> {
  const {
    retries = 2,
    backoffMs = 500,
    maxBackoffMs = 10_000,
    isTransient = isTransientFailure,
    ...exec
  } = options;
  let last: ExecResult | undefined;
  let attempts = 0;
  try {
    return await retry(
      async () => {
        attempts++;
        last = await sandbox.exec(command, exec);
        if (last.exitCode === 0 && !last.timedOut) return last;
        throw new FailedAttempt(isTransient(last));
      },
      {
        retries,
        initialDelayMs: backoffMs,
        maxDelayMs: maxBackoffMs,
        signal: options.signal,
        shouldRetry: (error) => error instanceof FailedAttempt && error.transient,
      },
    );
  } catch (error) {
    if (!(error instanceof FailedAttempt)) throw error;
  }
  const result = last!;
  const how = result.timedOut
    ? `timed out after ${options.timeoutMs} ms`
    : `exited with code ${result.exitCode}`;
  throw new SandboxError(
    `setup command ${how} after ${attempts} attempt${attempts === 1 ? '' : 's'} in sandbox ${sandbox.id}: ` +
      `${JSON.stringify(command.length > 200 ? `${command.slice(0, 200)}…` : command)}\n${tailOf(result.output, 2000)}`,
    {
      code: 'setup_failed',
      data: {
        exitCode: result.exitCode,
        timedOut: result.timedOut,
        attempts,
        outputTail: tailOf(result.output, 2000),
      },
    },
  );
}

/** Options of running a command detached from the exec call. */
export interface DetachedOptions extends Omit<ExecOptions, 'stdin'> {
  /** How often to look for the exit-code marker (default 500 ms). */
  pollIntervalMs?: number | undefined;
  /** Consecutive failed polls tolerated before giving up (default 5). */
  maxPollFailures?: number | undefined;
}

/**
 * Run a long command detached from the exec stream: it writes its output to files and its exit code to a
 * marker file, and short polls collect them, so a dropped connection loses nothing. On backends whose
 * processes do not outlive an exec (bubblewrap: a local child process, no stream to drop) it is a plain
 * `exec`.
 */
export async function execDetached(
  sandbox: Sandbox,
  command: string,
  options: DetachedOptions = {},
): Promise<ExecResult> {
  const { pollIntervalMs = 500, maxPollFailures = 5, timeoutMs, signal, ...exec } = options;
  // Processes there end with their exec, and the exec is a local child process: no stream can drop.
  if (!sandbox.capabilities.persistentProcesses) {
    return sandbox.exec(command, { ...exec, timeoutMs, signal });
  }
  const started = performance.now();
  const dir = `/tmp/.vime-detached-${randomBytes(6).toString('hex')}`;
  const q = shellQuote(dir);
  const timed =
    timeoutMs === undefined
      ? command
      : `timeout -s KILL ${(timeoutMs / 1000).toFixed(3)} sh -c ${shellQuote(command)}`;
  const body = `(${timed}) >${q}/out 2>${q}/err; echo $? >${q}/rc.tmp; mv ${q}/rc.tmp ${q}/rc`;
  // In its own session when setsid exists, so an abort can kill the whole group.
  const detach = `command -v setsid >/dev/null && exec setsid sh -c ${shellQuote(body)} || exec sh -c ${shellQuote(body)}`;
  const launch = `mkdir -p ${q} && { (${detach}) </dev/null >/dev/null 2>&1 & echo $! >${q}/pid; }`;
  const execOptions = { ...exec, signal };

  const collect = async (rc: string): Promise<ExecResult> => {
    const max = exec.maxOutputBytes;
    const read = async (name: string) => {
      const r = await sandbox.exec(['cat', `${dir}/${name}`], execOptions);
      return r.stdout;
    };
    const [stdout, stderr] = [await read('out'), await read('err')];
    await sandbox.exec(['rm', '-rf', dir], execOptions).catch(() => {});
    const cap = (text: string) => {
      if (max === undefined) return { text, truncated: false };
      const b = new BoundedOutput(max);
      b.push(Buffer.from(text));
      return { text: b.text(), truncated: b.truncated };
    };
    const out = cap(stdout);
    const err = cap(stderr);
    const code = Number(rc.trim());
    const durationMs = performance.now() - started;
    const timedOut = timeoutMs !== undefined && code === 137 && durationMs >= timeoutMs;
    return {
      exitCode: timedOut ? null : code,
      stdout: out.text,
      stderr: err.text,
      output: out.text + err.text,
      timedOut,
      truncated: out.truncated || err.truncated,
      durationMs,
    };
  };

  const launched = await sandbox.exec(launch, execOptions);
  if (launched.exitCode !== 0) {
    throw new SandboxError(
      `could not start detached command in sandbox ${sandbox.id}: ${tailOf(launched.output, 500)}`,
    );
  }
  let failures = 0;
  try {
    for (;;) {
      try {
        const r = await sandbox.exec(`cat ${q}/rc 2>/dev/null || true`, execOptions);
        failures = 0;
        if (r.stdout.trim() !== '') return await collect(r.stdout);
      } catch (error) {
        if (signal?.aborted || ++failures > maxPollFailures) throw error;
      }
      await sleep(pollIntervalMs, signal);
    }
  } catch (error) {
    if (signal?.aborted) {
      // The command runs on without us: stop it (its session, then the leader) and remove its files.
      await sandbox
        .exec(`kill -9 -- -$(cat ${q}/pid) 2>/dev/null; kill -9 $(cat ${q}/pid) 2>/dev/null; rm -rf ${q}`, {
          timeoutMs: 15_000,
        })
        .catch(() => {});
    }
    throw error;
  }
}
