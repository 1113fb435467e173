/**
 * The host processes of the bubblewrap and local providers: `@vime/core/utils`' `runProcess` (no shell,
 * bounded output, a timeout that kills the process group, abort), with this package's errors and the
 * launch report of a per-exec bubblewrap chain.
 */
import { SandboxError } from '@vime/core';
import { ProcessError, type ProcessResult, type RunProcessOptions, runProcess } from '@vime/core/utils';

export interface HostRunOptions extends Omit<RunProcessOptions, 'env' | 'reportFd'> {
  /** The child's whole environment: a sandbox never inherits this process's. */
  env: Record<string, string>;
  /**
   * The command is a launch chain that writes a byte to fd 3 once it has set up (joined its cgroups) and
   * closes fd 3 before the sandboxed command runs. No byte by the exit means the launch itself failed: a
   * `SandboxError`, never an exit code the sandboxed command could have produced.
   */
  launchReport?: boolean | undefined;
}

export type RunResult = Omit<ProcessResult, 'reported'>;

export async function runHostProcess(
  command: string,
  args: readonly string[],
  options: HostRunOptions,
): Promise<RunResult> {
  const { launchReport, ...rest } = options;
  let result: ProcessResult;
  try {
    result = await runProcess(command, args, { ...rest, reportFd: launchReport });
  } catch (error) {
    throw asSandboxError(error);
  }
  const { reported, ...run } = result;
  if (launchReport && !reported && !run.timedOut) {
    throw new SandboxError(
      `the launch failed before the command started (exit ${run.signal ?? run.exitCode}): ${run.stderr.trim()}`,
      { data: { exitCode: run.signal ? null : run.exitCode, stderr: run.stderr } },
    );
  }
  return run;
}

/** A program that could not start, or a read-back over its cap, in this package's terms. */
function asSandboxError(error: unknown): unknown {
  if (!ProcessError.isInstance(error)) return error;
  if (error.code === 'process_output_too_large') {
    return new SandboxError(error.message, {
      code: 'file_too_large',
      data: { maxBytes: error.data?.maxBytes },
    });
  }
  return new SandboxError(error.message, { cause: error.cause, ...(error.data ? { data: error.data } : {}) });
}
