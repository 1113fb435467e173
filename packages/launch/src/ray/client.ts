/**
 * Ray Jobs REST client over undici. Node's global `fetch` always sends `sec-fetch-mode: cors`, which
 * recent Ray dashboards answer with 405 as browser traffic, so requests go through `undici.request`.
 *
 * Submissions carry a `submission_id` (generated when absent) so a retry after a lost connection can
 * never start a second job: the dashboard answers "already exists" and the client returns the first.
 */
import { randomBytes } from 'node:crypto';
import { EngineError, type EngineErrorOptions, errorMarker, hasErrorMarker, parseWith } from '@vime/core';
import { HttpClient, type HttpMethod, retry, sleep } from '@vime/core/utils';
import { EventEmitter } from 'eventemitter3';
import type { Dispatcher } from 'undici';
import type { z } from 'zod';
import {
  DeleteSchema,
  isTerminal,
  type JobDetails,
  JobDetailsSchema,
  JobListSchema,
  type JobStatus,
  type JobSubmitRequest,
  JobSubmitRequestSchema,
  LogsSchema,
  type RayVersion,
  StopSchema,
  SubmitResponseSchema,
  VersionSchema,
} from './types.js';

const rayJobsMarker = errorMarker('RayJobsError');

/** An HTTP or connection failure talking to the Ray dashboard. */
export class RayJobsError extends EngineError {
  readonly [rayJobsMarker] = true;
  /** Response body (text/plain, often a Python traceback), when there was one. */
  readonly body: string | undefined;
  constructor(message: string, options: EngineErrorOptions & { body?: string | undefined } = {}) {
    super(message, options);
    this.body = options.body;
  }

  /** Whether `value` is a `RayJobsError`, from any copy of this package. */
  static override isInstance(value: unknown): value is RayJobsError {
    return hasErrorMarker(value, rayJobsMarker);
  }
}

const rayJobFailedMarker = errorMarker('RayJobFailedError');

/** The job ran and ended FAILED or STOPPED. `logTail` holds its last log lines. */
export class RayJobFailedError extends RayJobsError {
  readonly [rayJobFailedMarker] = true;
  readonly job: JobDetails;
  readonly logTail: string;
  constructor(job: JobDetails, logTail: string) {
    const id = job.submission_id ?? job.job_id ?? '?';
    super(
      `Ray job ${id} ended ${job.status}${job.message ? `: ${job.message.split('\n')[0]}` : ''}\n--- last log lines ---\n${logTail}`,
      { isRetryable: false, data: { status: job.status, submissionId: id } },
    );
    this.job = job;
    this.logTail = logTail;
  }

  /** Whether `value` is a `RayJobFailedError`, from any copy of this package. */
  static override isInstance(value: unknown): value is RayJobFailedError {
    return hasErrorMarker(value, rayJobFailedMarker);
  }
}

/** The events of the Ray Jobs client. */
export interface RayJobsEvents {
  /** A submission was rejected before it ran (agent not up, connection refused) and will be retried. */
  retry: [info: { attempt: number; delayMs: number; reason: string }];
  /** A job's status changed while waiting. */
  status: [job: JobDetails];
}

/** Options of `RayJobsClient`. */
export interface RayJobsClientOptions {
  /** Dashboard URL, e.g. `http://127.0.0.1:8265`. */
  address: string;
  /** Token for clusters with `RAY_AUTH_MODE=token`; sent as `Authorization: Bearer`. */
  token?: string | undefined;
  headers?: Record<string, string> | undefined;
  /** Submission retries for rejections that prove the job did not run. Default 6 attempts, 10 s apart. */
  submitAttempts?: number | undefined;
  submitRetryDelayMs?: number | undefined;
  /** Per-request timeout. Default 30 s. */
  requestTimeoutMs?: number | undefined;
  dispatcher?: Dispatcher | undefined;
}

/** What a submission did: the submission id and whether it was already there. */
export interface SubmitResult {
  submissionId: string;
  /** True when this id had already been submitted: nothing new was started. */
  existing: boolean;
}

interface WaitOptions {
  signal?: AbortSignal | undefined;
  /** Poll interval. Default 2 s. */
  intervalMs?: number | undefined;
  /** Lines of log returned with a failure. Default 50. */
  tailLines?: number | undefined;
}

const NO_AGENT = /No available agent/i;
const DUPLICATE = /already exists.*different submission_id|submission_id \S+ already exists/is;

const isDuplicate = (error: RayJobsError) => error.body !== undefined && DUPLICATE.test(error.body);

/** The connection error code behind a failed request (`ECONNREFUSED`), for retry events. */
function connectionReason(error: RayJobsError): string {
  const cause = (
    error.cause as
      | {
          cause?:
            | { code?: string | undefined; cause?: { code?: string | undefined } | undefined }
            | undefined;
        }
      | undefined
  )?.cause;
  return cause?.code ?? cause?.cause?.code ?? 'connection error';
}

function lastLines(text: string, n: number): string {
  const lines = text.replace(/\n$/, '').split('\n');
  return lines.slice(-n).join('\n');
}

/** A client of Ray's Jobs REST API: submit, follow, wait for and stop jobs. */
export class RayJobsClient extends EventEmitter<RayJobsEvents> {
  readonly address: string;
  readonly #http: HttpClient;
  readonly #attempts: number;
  readonly #retryDelay: number;

  constructor(options: RayJobsClientOptions) {
    super();
    this.address = options.address.replace(/\/+$/, '');
    this.#http = new HttpClient(this.address, {
      dispatcher: options.dispatcher,
      apiKey: options.token,
      headers: { 'user-agent': 'vime-launch', ...options.headers },
      timeoutMs: options.requestTimeoutMs ?? 30_000,
      service: 'Ray dashboard',
    });
    this.#attempts = options.submitAttempts ?? 6;
    this.#retryDelay = options.submitRetryDelayMs ?? 10_000;
  }

  /** Close the client's connection pool. */
  close(): Promise<void> {
    return this.#http.close();
  }

  async #call<S extends z.ZodType>(
    method: HttpMethod,
    path: string,
    schema: S,
    options: { body?: unknown; signal?: AbortSignal | undefined } = {},
  ): Promise<z.output<S>> {
    let response: Awaited<ReturnType<HttpClient['send']>>;
    try {
      response = await this.#http.send({ method, path, body: options.body, signal: options.signal });
    } catch (error) {
      if (options.signal?.aborted || !EngineError.isInstance(error)) throw error;
      // Connection failures and timeouts: the request may not have reached the dashboard.
      throw new RayJobsError(error.message, { url: error.url, isRetryable: error.isRetryable, cause: error });
    }
    const { status, text, url } = response;
    if (status < 200 || status >= 300) throw this.#httpError(method, url, status, text);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (cause) {
      throw new RayJobsError(`${method} ${url}: expected JSON, got ${JSON.stringify(text.slice(0, 200))}`, {
        status,
        url,
        body: text,
        cause,
      });
    }
    return parseWith(schema, json, `Ray ${method} ${path} response`);
  }

  #httpError(method: string, url: string, status: number, body: string): RayJobsError {
    const detail = body.trim().split('\n').filter(Boolean).at(-1)?.slice(0, 500) ?? '';
    let hint = '';
    if (status === 401) hint = ' The cluster runs with RAY_AUTH_MODE=token: pass the token (RAY_AUTH_TOKEN).';
    else if (status === 403)
      hint = ' The token was refused: check RAY_AUTH_TOKEN against `ray get-auth-token`.';
    else if (status === 405)
      hint =
        ' The dashboard treats this request as browser traffic; send it without Sec-Fetch-*/Origin/Referer headers.';
    else if (status === 404) hint = ' Check the submission id (`vime ray status` lists jobs only by id).';
    return new RayJobsError(`${method} ${url} -> HTTP ${status}: ${detail}${hint}`, {
      status,
      url,
      body,
      isRetryable: status === 500 && NO_AGENT.test(body),
    });
  }

  /** `GET /api/version`: a cheap liveness probe. */
  version(options: { signal?: AbortSignal | undefined } = {}): Promise<RayVersion> {
    return this.#call('GET', '/api/version', VersionSchema, options);
  }

  /**
   * Submit a job. Retries only rejections that prove nothing ran (HTTP 500 "No available agent",
   * connection refused/reset); a duplicate `submission_id` for the same entrypoint returns the existing
   * job instead of starting another.
   */
  async submit(
    job: JobSubmitRequest,
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<SubmitResult> {
    const body = parseWith(JobSubmitRequestSchema, job, 'Ray job submission');
    const submissionId = body.submission_id ?? `vime_${randomBytes(8).toString('hex')}`;
    const payload = { ...body, submission_id: submissionId };
    try {
      const result = await retry(
        () =>
          this.#call('POST', '/api/jobs/', SubmitResponseSchema, { body: payload, signal: options.signal }),
        {
          retries: this.#attempts - 1,
          initialDelayMs: this.#retryDelay,
          maxDelayMs: this.#retryDelay,
          jitter: 0,
          signal: options.signal,
          // Only rejections that prove nothing ran; a duplicate id is answered below, not retried.
          shouldRetry: (error) => error instanceof RayJobsError && error.isRetryable && !isDuplicate(error),
          onRetry: ({ attempt, delayMs, error }) => {
            const e = error as RayJobsError;
            const reason = e.status ? `HTTP ${e.status}: no available agent` : connectionReason(e);
            this.emit('retry', { attempt, delayMs, reason });
          },
        },
      );
      return { submissionId: result.submission_id, existing: false };
    } catch (error) {
      if (!(error instanceof RayJobsError) || !isDuplicate(error)) throw error;
      const existing = await this.get(submissionId, options);
      if (existing.entrypoint !== payload.entrypoint) {
        throw new RayJobsError(
          `submission_id ${submissionId} is already used by a different job (entrypoint ${JSON.stringify(existing.entrypoint.slice(0, 120))}); choose another id`,
          { status: error.status ?? 400, url: error.url ?? '', body: error.body },
        );
      }
      return { submissionId, existing: true };
    }
  }

  /** The job's details. */
  get(id: string, options: { signal?: AbortSignal | undefined } = {}): Promise<JobDetails> {
    return this.#call('GET', `/api/jobs/${encodeURIComponent(id)}`, JobDetailsSchema, options);
  }

  /** All jobs: submissions first, then driver jobs (the response is a JSON array). */
  list(options: { signal?: AbortSignal | undefined } = {}): Promise<JobDetails[]> {
    return this.#call('GET', '/api/jobs/', JobListSchema, options);
  }

  /** The job's whole log so far. */
  async logs(id: string, options: { signal?: AbortSignal | undefined } = {}): Promise<string> {
    return (await this.#call('GET', `/api/jobs/${encodeURIComponent(id)}/logs`, LogsSchema, options)).logs;
  }

  /** `true` when the job was running and is now stopping; `false` when it had already ended. */
  async stop(id: string, options: { signal?: AbortSignal | undefined } = {}): Promise<boolean> {
    return (await this.#call('POST', `/api/jobs/${encodeURIComponent(id)}/stop`, StopSchema, options))
      .stopped;
  }

  /** Delete a terminal job's record (Ray refuses running jobs). */
  async delete(id: string, options: { signal?: AbortSignal | undefined } = {}): Promise<boolean> {
    return (await this.#call('DELETE', `/api/jobs/${encodeURIComponent(id)}`, DeleteSchema, options)).deleted;
  }

  /**
   * Follow a job's log by polling: yields each new chunk until the job is terminal and its final log
   * has been read.
   */
  async *tail(
    id: string,
    options: { signal?: AbortSignal | undefined; intervalMs?: number | undefined } = {},
  ): AsyncGenerator<string> {
    const interval = options.intervalMs ?? 1_000;
    let seen = 0;
    for (;;) {
      const job = await this.get(id, options);
      const text = await this.logs(id, options);
      if (text.length < seen) seen = 0; // log restarted
      if (text.length > seen) {
        yield text.slice(seen);
        seen = text.length;
      }
      if (isTerminal(job.status)) return;
      await sleep(interval, options.signal);
    }
  }

  /**
   * Wait until the job is terminal. Resolves with SUCCEEDED details; throws `RayJobFailedError`
   * carrying the log tail when it ended FAILED or STOPPED.
   */
  async wait(id: string, options: WaitOptions = {}): Promise<JobDetails> {
    const interval = options.intervalMs ?? 2_000;
    let last: JobStatus | undefined;
    for (;;) {
      const job = await this.get(id, options);
      if (job.status !== last) {
        last = job.status;
        this.emit('status', job);
      }
      if (isTerminal(job.status)) {
        if (job.status === 'SUCCEEDED') return job;
        const logs = await this.logs(id, options).catch(() => '');
        throw new RayJobFailedError(job, lastLines(logs, options.tailLines ?? 50));
      }
      await sleep(interval, options.signal);
    }
  }
}
