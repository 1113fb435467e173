/**
 * What a command line program reads and writes, passed to its `main(argv, io)` instead of taken from
 * `process`, so that a test runs the program in-process and reads what it printed.
 */
export interface CliIo {
  /** Write to standard output. */
  stdout: (text: string) => void;
  /** Write to standard error. */
  stderr: (text: string) => void;
  /** The environment the program reads (`process.env` in the bin). */
  env: Record<string, string | undefined>;
  /** The folder relative paths are resolved against (`process.cwd()` in the bin). */
  cwd: string;
  /** Aborted by the first SIGINT or SIGTERM; a program stops its work when it fires. */
  signal?: AbortSignal | undefined;
}

/**
 * The exit codes every Vime program uses, as shells and CI read them. A program that runs checks
 * (preflight, an audit, a validation) exits `checks` when they found problems, never `failed`: `failed`
 * says the program could not do its work (a job failed, a server never answered).
 */
export const EXIT = {
  ok: 0,
  /** The operation failed (a job, a server, the disk). */
  failed: 1,
  /** The user's mistake: an unknown flag or command, a bad value, a missing or malformed input file. */
  usage: 2,
  /** Checks ran and found problems (the report says which). */
  checks: 3,
  /** Stopped by SIGINT (128 + 2, as a shell reports it). */
  interrupted: 130,
  /** Stopped by SIGTERM (128 + 15). */
  terminated: 143,
} as const;

/** A `CliIo` that keeps what the program prints, for tests: `output.stdout`, `output.stderr`. */
export interface MemoryIo extends CliIo {
  readonly output: { stdout: string; stderr: string };
}

/** A `CliIo` writing to memory; `cwd` defaults to the process's, `env` to an empty environment. */
export function memoryIo(options: Partial<CliIo> = {}): MemoryIo {
  const output = { stdout: '', stderr: '' };
  return {
    output,
    stdout: (text) => {
      output.stdout += text;
    },
    stderr: (text) => {
      output.stderr += text;
    },
    env: options.env ?? {},
    cwd: options.cwd ?? process.cwd(),
    signal: options.signal,
  };
}
