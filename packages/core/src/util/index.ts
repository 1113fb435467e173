// Small shared primitives, one home each: waiting, retrying, durations, files a caller names, shell
// quoting, HTTP, logging.
export { parseDuration } from './duration.js';
export { type CallerPathOptions, ensureDirectory, pathError, readTextFile } from './files.js';
export {
  describeCause,
  HttpClient,
  type HttpClientOptions,
  type HttpMethod,
  type HttpRequest,
  type HttpResponse,
  RETRYABLE_STATUSES,
} from './http.js';
export type { Logger } from './logger.js';
export { type BackoffOptions, backoffDelay, isRetryableError, type RetryOptions, retry } from './retry.js';
export { type ShellQuoteOptions, shellJoin, shellQuote } from './shell.js';
export { sleep } from './sleep.js';
