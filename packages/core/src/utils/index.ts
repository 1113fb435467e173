// @vime/core/utils: the helpers every package shares (HTTP client, retry, sleep, deadlines, files, shell
// quoting, durations, the logger interface, seeded randomness, running a program with bounded output).

export { BoundedOutput, DEFAULT_MAX_OUTPUT_BYTES, decodeUtf8 } from './bounded-output.js';
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
} from './http.js';
export type { Logger } from './logger.js';
export {
  ProcessError,
  type ProcessResult,
  type RunProcessOptions,
  runProcess,
  runProcessOk,
} from './process.js';
export { seededRandom } from './random.js';
export { type BackoffOptions, isRetryableError, type RetryOptions, retry } from './retry.js';
export { type ShellQuoteOptions, shellJoin, shellQuote } from './shell.js';
export { deadlineSignal } from './signals.js';
export { sleep } from './sleep.js';
