/**
 * The helpers every package shares (HTTP client, retry, sleep, deadlines, files, shell quoting, durations,
 * the logger interface, seeded randomness, running a program with bounded output, and the command line kit
 * every bin uses).
 *
 * @module @vime/core/utils
 */

export { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES, decodeUtf8 } from './bounded-output.js';
export { type CliProgram, type Command, runProgram } from './cli/commands.js';
export { closest, didYouMean } from './cli/did-you-mean.js';
export { type FlagSpec, type ParseFlagsOptions, parseFlags, wantsHelp } from './cli/flags.js';
export { type CliIo, EXIT, type MemoryIo, memoryIo } from './cli/io.js';
export { type CliMain, type RunCliOptions, runCli, signalExitCode } from './cli/run.js';
export { finiteNumber, oneOf, positiveInt, UsageError } from './cli/values.js';
export { parseDuration } from './duration.js';
export {
  type CallerPathOptions,
  ensureDirectory,
  pathError,
  readTextFile,
  writeFileAtomic,
} from './files.js';
export {
  describeCause,
  HttpClient,
  type HttpClientOptions,
  type HttpMethod,
  type HttpRequest,
  type HttpResponse,
  JsonText,
  retryAfterMs,
} from './http.js';
export { httpUrl } from './http-url.js';
export type { Logger } from './logger.js';
export {
  ProcessError,
  type ProcessResult,
  type RunProcessOptions,
  runProcess,
  runProcessOk,
} from './process.js';
export { findPython, TORCH_MODULES } from './python.js';
export { seededRandom } from './random.js';
export { type BackoffOptions, isRetryableError, type RetryOptions, retry } from './retry.js';
export { type ShellQuoteOptions, shellJoin, shellQuote } from './shell.js';
export { deadlineSignal } from './signals.js';
export { sleep } from './sleep.js';
