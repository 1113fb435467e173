/**
 * The entry of every bin: `runCli(name, main)` binds a program's `main(argv, io)` to the process (its
 * streams, environment and folder, and a signal that SIGINT and SIGTERM abort), and turns whatever
 * `main` throws into one line on stderr and the exit code: a user's mistake never prints a stack trace.
 */
import { constants } from 'node:os';
import { ConfigError, ValidationError, VimeError } from '../../errors.js';
import { type CliIo, EXIT } from './io.js';

/** A program: the exit code from its arguments (`undefined` is 0); it throws for anything that stops it. */
export type CliMain = (argv: string[], io: CliIo) => Promise<number | undefined>;

/** Options of `runCli`. */
export interface RunCliOptions {
  /** The arguments (default: the process's, after the script). */
  argv?: readonly string[] | undefined;
  /**
   * Where the program reads and writes. Given, the process is left alone: no signal handlers, no exit
   * code set; the code is only returned (tests, and programs run inside another).
   */
  io?: CliIo | undefined;
  /**
   * Whether SIGINT and SIGTERM abort `io.signal` rather than end the process (default true). A second
   * signal always ends it at once. False for a program that never reads `io.signal`: the first Ctrl-C
   * then ends it, as Node does by default.
   */
  handleSignals?: boolean | undefined;
}

/**
 * Run `main` and return its exit code; never throws. Bound to the process (no `options.io`), it also sets
 * `process.exitCode`, and the process ends once its work is done.
 *
 * What `main` throws becomes one line `name: message` on stderr and an exit code (see `EXIT`):
 * - `ConfigError` (and `UsageError`), `ValidationError`: the user's mistake, 2;
 * - after a stop by signal: 130 for SIGINT, 143 for SIGTERM (or a `VimeError` coded `aborted` whose
 *   `data.exitCode` says which);
 * - any other `VimeError`, or a system error (`ENOSPC`, `ECONNRESET`): 1;
 * - anything else is a bug: its stack trace, 1.
 */
export async function runCli(name: string, main: CliMain, options: RunCliOptions = {}): Promise<number> {
  if (options.io) return runMain(name, main, [...(options.argv ?? [])], options.io);
  const controller = new AbortController();
  const release = options.handleSignals === false ? () => {} : abortOnSignals(controller);
  const io: CliIo = {
    stdout: (text) => process.stdout.write(text),
    stderr: (text) => process.stderr.write(text),
    env: process.env,
    cwd: process.cwd(),
    signal: controller.signal,
  };
  try {
    const code = await runMain(name, main, [...(options.argv ?? process.argv.slice(2))], io);
    process.exitCode = code;
    return code;
  } finally {
    release();
  }
}

async function runMain(name: string, main: CliMain, argv: string[], io: CliIo): Promise<number> {
  try {
    return (await main(argv, io)) ?? EXIT.ok;
  } catch (error) {
    return reportCliError(name, error, io);
  }
}

/** The exit code of a stop by `signal`, as a shell reports it: 128 + its number. */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (constants.signals[signal] ?? 0);
}

/**
 * The first SIGINT or SIGTERM aborts `controller` with a `VimeError` coded `aborted` (its `data` names
 * the signal and the exit code); a second one ends the process at once. The handlers stay until
 * released: a library's own handler (the sandboxes' cleanup) then leaves the exit to the program.
 */
function abortOnSignals(controller: AbortController): () => void {
  const handlers = (['SIGINT', 'SIGTERM'] as const).map((signal) => {
    const handler = () => {
      const exitCode = signalExitCode(signal);
      if (controller.signal.aborted) process.exit(exitCode);
      controller.abort(new VimeError('aborted', `stopped by ${signal}`, { data: { signal, exitCode } }));
    };
    process.on(signal, handler);
    return [signal, handler] as const;
  });
  return () => {
    for (const [signal, handler] of handlers) process.removeListener(signal, handler);
  };
}

/** A stop by signal: the error (or the signal's reason) that says which exit code it asks for. */
function stopOf(
  error: unknown,
  signal: AbortSignal | undefined,
): { message: string; code: number } | undefined {
  for (const candidate of [error, signal?.aborted ? signal.reason : undefined]) {
    if (VimeError.isInstance(candidate) && candidate.code === 'aborted') {
      const code = candidate.data?.exitCode;
      if (typeof code === 'number') return { message: candidate.message, code };
    }
  }
  return signal?.aborted ? { message: 'interrupted', code: EXIT.interrupted } : undefined;
}

/** A Node system error (`ENOSPC`, `ECONNRESET`): a failure to report, not a bug to trace. */
const isSystemError = (error: unknown): error is NodeJS.ErrnoException =>
  error instanceof Error && typeof (error as NodeJS.ErrnoException).code === 'string' && 'syscall' in error;

/** Bad input: a config, a flag's value, a file that is not what it should be. */
const isUserError = (error: unknown) =>
  ConfigError.isInstance(error) ||
  ValidationError.isInstance(error) ||
  (VimeError.isInstance(error) && (error.code === 'invalid_config' || error.code === 'validation_error'));

/** Print what stopped a program as one line (a stack trace only for a bug) and return its exit code. */
export function reportCliError(name: string, error: unknown, io: Pick<CliIo, 'stderr' | 'signal'>): number {
  const stop = stopOf(error, io.signal);
  if (stop) {
    io.stderr(`${name}: ${stop.message}\n`);
    return stop.code;
  }
  if (VimeError.isInstance(error) || isSystemError(error)) {
    io.stderr(`${name}: ${error.message}\n`);
    return isUserError(error) ? EXIT.usage : EXIT.failed;
  }
  io.stderr(`${name}: internal error (please report it): ${(error as Error)?.stack ?? String(error)}\n`);
  return EXIT.failed;
}
