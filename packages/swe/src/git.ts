/** git inside a sandbox, the same way in every step: a fixed environment, and failures named with their output. */
import { SandboxError } from '@vime/core';
import type { ExecResult, Sandbox } from '@vime/sandbox';

/**
 * The work dir may belong to another uid than the one running git; no user or system config is read, so
 * nothing the agent wrote to `~/.gitconfig` (aliases, hooks paths, fsmonitor commands) applies.
 */
export const GIT_ENV: Record<string, string> = {
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_CONFIG_COUNT: '3',
  GIT_CONFIG_KEY_0: 'safe.directory',
  GIT_CONFIG_VALUE_0: '*',
  GIT_CONFIG_KEY_1: 'core.quotepath',
  GIT_CONFIG_VALUE_1: 'false',
  GIT_CONFIG_KEY_2: 'core.hooksPath',
  GIT_CONFIG_VALUE_2: '/dev/null',
  GIT_TERMINAL_PROMPT: '0',
  GIT_AUTHOR_NAME: 'vime',
  GIT_AUTHOR_EMAIL: 'task@vime.invalid',
  GIT_COMMITTER_NAME: 'vime',
  GIT_COMMITTER_EMAIL: 'task@vime.invalid',
};

export interface GitRunOptions {
  signal?: AbortSignal | undefined;
  timeoutMs?: number | undefined;
  /** Largest output kept (default 1 MiB); a patch read back needs more. */
  maxOutputBytes?: number | undefined;
  stdin?: string | undefined;
}

export function sh(sandbox: Sandbox, command: string, options: GitRunOptions = {}): Promise<ExecResult> {
  const { timeoutMs = 120_000, signal, maxOutputBytes, stdin } = options;
  return sandbox.exec(command, {
    env: GIT_ENV,
    timeoutMs,
    ...(signal ? { signal } : {}),
    ...(maxOutputBytes ? { maxOutputBytes } : {}),
    ...(stdin !== undefined ? { stdin } : {}),
  });
}

/** Run a command that must succeed; its stdout, or a `SandboxError` (code `swe_step_failed`) naming `what`. */
export async function shOk(
  sandbox: Sandbox,
  command: string,
  what: string,
  options: GitRunOptions = {},
): Promise<string> {
  const r = await sh(sandbox, command, options);
  if (r.exitCode !== 0 || r.timedOut || r.truncated) {
    const why = r.truncated ? 'output too large' : r.timedOut ? 'timed out' : `exit ${r.exitCode}`;
    throw new SandboxError(
      `${what} failed in sandbox ${sandbox.id} (${why}): ${r.output.trim().slice(-1500)}`,
      {
        code: 'swe_step_failed',
        data: { command, exitCode: r.exitCode, timedOut: r.timedOut, truncated: r.truncated },
      },
    );
  }
  return r.stdout;
}
