/**
 * The rollout server slime's custom generate function talks to (see python/vime_bridge.py). One request
 * is one slime sample; the reply is the training rows the rollout produced, as an `encodeSamples` batch.
 *
 *   POST /rollout   body: msgpack { sample: <Sample.to_dict()>, sampling_params: {...} }
 *                   200: msgpack list of Sample dicts; 4xx/5xx: JSON { error: { code, message } }
 *   GET  /health    200 { status: "ok", inFlight, waiting, capacity }
 *   GET  /config    200 { settings, attempts, concurrency, deadlineMs }: what this server runs with
 *
 * A semaphore caps concurrent rollouts (later requests wait their turn), each request has a deadline,
 * and a client that disconnects aborts its rollout.
 *
 * A rollout that throws is an infrastructure failure (the agent's own failures are graded, not thrown):
 * it is tried again, up to `attempts` in all, and one that still fails is answered with a single
 * failure row (`infraFailureSample`) that slime must never train on or score: status `aborted` (slime's
 * `generate_and_rm` skips the reward model for it), reward `null`, `remove_sample`, and the cause in
 * `metadata.vime_infra_failure`, which the bridge's dynamic-sampling filter drops the group for.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { decode } from '@msgpack/msgpack';
import { ConfigError, createSample, encodeSamples, fromSlimeDict, type Sample, VimeError } from '@vime/core';
import type { GroupQueue } from '@vime/core/queue';
import { deadlineSignal, retry } from '@vime/core/utils';
import { handOffAnswered, runSampleUnit, UnitDropped, unitKey } from './sample-units.js';

/** One request of slime's generate function: the sample and its sampling parameters. */
export interface RolloutRequest {
  sample: Sample;
  samplingParams: Record<string, unknown>;
  signal: AbortSignal;
}

/** The rollout the server runs per request: a sample in, its training rows out. */
export type BridgeRollout = (request: RolloutRequest) => Promise<Sample[]>;

/** Options of `startRolloutServer`. */
export interface RolloutServerOptions {
  rollout: BridgeRollout;
  host?: string | undefined;
  port?: number | undefined;
  /** Rollouts running at once; further requests wait. Default 64. */
  concurrency?: number | undefined;
  /** Per-request deadline in milliseconds, waiting included. Default 30 minutes. */
  deadlineMs?: number | undefined;
  /** Largest request body accepted. Default 64 MiB. */
  maxBodyBytes?: number | undefined;
  /** Tries of one rollout when it fails with an infrastructure error, the first included. Default 3. */
  attempts?: number | undefined;
  /** Delay before the first retry; it doubles per retry. Default 1 s. */
  retryDelayMs?: number | undefined;
  /** The settings the rollout runs with, served on GET /config so a deployment can be checked. */
  settings?: Record<string, unknown> | undefined;
  /**
   * Durable work units (see `sample-units.ts`): each sample's result is recorded with a receipt before
   * it is answered, so a request sent again is answered from the queue (no second rollout or grade),
   * across restarts. Open it with `maxAttempts` = `attempts`; the server does not close it.
   */
  queue?: GroupQueue | undefined;
}

/** What `metadata.vime_infra_failure` of a failure row holds. */
export interface InfraFailure {
  code: string;
  message: string;
  attempts: number;
}

/** The row answered for a rollout that failed for infrastructure reasons on every attempt. */
export function infraFailureSample(sample: Sample, failure: InfraFailure): Sample {
  return createSample({
    ...sample,
    rollout_id: sample.rollout_id ?? sample.index,
    status: 'aborted',
    reward: null,
    remove_sample: true,
    metadata: { ...sample.metadata, vime_infra_failure: failure },
  });
}

/** Input errors are the request's own: another attempt cannot fix them. */
function worthRetrying(error: unknown): boolean {
  return !ConfigError.isInstance(error) && (error as Error | null)?.name !== 'ZodError';
}

/** A running rollout server. */
export interface RolloutServer {
  url: string;
  server: Server;
  /** Requests in flight and waiting, and the rollouts answered by outcome. */
  stats(): {
    inFlight: number;
    waiting: number;
    completed: number;
    aborted: number;
    /** Rollouts answered with a failure row after their last attempt. */
    failed: number;
    /** Attempts that failed and were tried again. */
    retried: number;
    /** Requests answered with rows recorded by an earlier request (no rollout ran). */
    replayed: number;
  };
  /** Stop the server, ending the rollouts in flight. */
  close(): Promise<void>;
}

class Semaphore {
  private waiters: Array<() => void> = [];
  constructor(private free: number) {}
  get waiting(): number {
    return this.waiters.length;
  }
  async acquire(signal: AbortSignal): Promise<() => void> {
    if (this.free > 0) this.free--;
    else {
      await new Promise<void>((resolve, reject) => {
        const wake = () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        const onAbort = () => {
          this.waiters = this.waiters.filter((w) => w !== wake);
          reject(signal.reason);
        };
        this.waiters.push(wake);
        signal.addEventListener('abort', onAbort, { once: true });
      });
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiters.shift();
      if (next) next();
      else this.free++;
    };
  }
}

async function readBody(req: IncomingMessage, limit: number): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new VimeError('invalid_argument', `request body exceeds ${limit} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function sendError(res: ServerResponse, status: number, code: string, message: string): void {
  if (res.headersSent || res.destroyed) return;
  const body = JSON.stringify({ error: { code, message } });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** One POST /rollout at a time: decode, wait for a slot, run (durably or with retries), answer. */
class RolloutHandler {
  readonly counts = { inFlight: 0, completed: 0, aborted: 0, failed: 0, retried: 0, replayed: 0 };
  readonly gate: Semaphore;
  #handing = Promise.resolve();

  constructor(
    private readonly options: RolloutServerOptions,
    readonly capacity: number,
    readonly deadlineMs: number,
    readonly attempts: number,
  ) {
    this.gate = new Semaphore(capacity);
  }

  /** Resolves once every answered unit was handed off (the server is closing). */
  drained(): Promise<void> {
    return this.#handing;
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const disconnected = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) disconnected.abort(new VimeError('aborted', 'client disconnected'));
    });
    let request: { sample: Sample; samplingParams: Record<string, unknown> };
    try {
      request = await this.#decode(req);
    } catch (error) {
      const code = VimeError.isInstance(error) ? error.code : 'decode_error';
      return sendError(res, 400, code, (error as Error).message);
    }
    const deadline = deadlineSignal(this.deadlineMs, disconnected.signal);
    const { signal } = deadline;
    let release: (() => void) | undefined;
    try {
      release = await this.gate.acquire(signal);
      this.counts.inFlight++;
      const rows = await this.#rows(request.sample, request.samplingParams, signal);
      signal.throwIfAborted();
      const bytes = encodeSamples(rows);
      res.writeHead(200, { 'content-type': 'application/msgpack', 'content-length': bytes.length });
      res.end(bytes);
      this.counts.completed++;
    } catch (error) {
      this.#fail(res, error, signal, disconnected.signal);
    } finally {
      deadline.clear();
      if (release) {
        this.counts.inFlight--;
        release();
      }
    }
  }

  async #decode(req: IncomingMessage): Promise<{ sample: Sample; samplingParams: Record<string, unknown> }> {
    const body = decode(await readBody(req, this.options.maxBodyBytes ?? 64 << 20)) as {
      sample?: unknown;
      sampling_params?: unknown;
    };
    if (typeof body !== 'object' || body === null || !('sample' in body)) {
      throw new VimeError('invalid_argument', 'body must be a msgpack map { sample, sampling_params }');
    }
    return {
      sample: fromSlimeDict(body.sample, 'sample'),
      samplingParams: (body.sampling_params ?? {}) as Record<string, unknown>,
    };
  }

  /** The rows to answer: the durable unit's (recorded or run now), or a rollout retried in memory. */
  #rows(sample: Sample, samplingParams: Record<string, unknown>, signal: AbortSignal): Promise<Sample[]> {
    const { queue } = this.options;
    const key = queue && unitKey(sample);
    return queue && key
      ? this.#fromUnit(queue, key, sample, samplingParams, signal)
      : this.#withRetries(sample, samplingParams, signal);
  }

  async #fromUnit(
    queue: GroupQueue,
    key: string,
    sample: Sample,
    samplingParams: Record<string, unknown>,
    signal: AbortSignal,
  ): Promise<Sample[]> {
    const run = (attemptSignal: AbortSignal) =>
      this.options.rollout({ sample, samplingParams, signal: attemptSignal });
    const rows = await runSampleUnit(queue, key, run, {
      signal,
      deadlineMs: this.deadlineMs,
      retryDelayMs: this.options.retryDelayMs ?? 1000,
      shouldRetry: worthRetrying,
      onRetry: () => this.counts.retried++,
    }).then(
      (unit) => {
        if (unit.replayed) this.counts.replayed++;
        return unit.rows;
      },
      (error: unknown) => {
        if (signal.aborted || !UnitDropped.isInstance(error)) throw error;
        this.counts.failed++;
        const code = VimeError.isInstance(error.cause) ? error.cause.code : 'rollout_error';
        return [infraFailureSample(sample, { code, message: error.message, attempts: error.attempts })];
      },
    );
    // Answered units go to the queue's hand-off (one at a time), so GC keeps it small.
    this.#handing = this.#handing.then(() => handOffAnswered(queue)).catch(() => {});
    return rows;
  }

  async #withRetries(
    sample: Sample,
    samplingParams: Record<string, unknown>,
    signal: AbortSignal,
  ): Promise<Sample[]> {
    let tries = 0;
    const attempt = (n: number) => {
      tries = n + 1;
      return this.options.rollout({ sample, samplingParams, signal });
    };
    return retry(attempt, {
      retries: this.attempts - 1,
      signal,
      initialDelayMs: this.options.retryDelayMs ?? 1000,
      shouldRetry: worthRetrying,
      onRetry: () => this.counts.retried++,
    }).catch((error: unknown) => {
      if (signal.aborted) throw error;
      this.counts.failed++;
      const code = VimeError.isInstance(error) ? error.code : 'rollout_error';
      return [infraFailureSample(sample, { code, message: (error as Error).message, attempts: tries })];
    });
  }

  /** A request that ended without rows: its deadline (504), its client gone (499), or a server fault (500). */
  #fail(res: ServerResponse, error: unknown, signal: AbortSignal, disconnected: AbortSignal): void {
    if (signal.aborted) {
      this.counts.aborted++;
      if (disconnected.aborted) sendError(res, 499, 'aborted', 'client disconnected');
      else sendError(res, 504, 'timeout', `rollout exceeded its ${this.deadlineMs} ms deadline`);
      return;
    }
    this.counts.failed++;
    sendError(res, 500, VimeError.isInstance(error) ? error.code : 'rollout_error', (error as Error).message);
  }
}

/** Start the rollout server slime's generate function posts samples to. */
export async function startRolloutServer(options: RolloutServerOptions): Promise<RolloutServer> {
  const capacity = options.concurrency ?? 64;
  const deadlineMs = options.deadlineMs ?? 30 * 60_000;
  const attempts = options.attempts ?? 3;
  if (!Number.isInteger(attempts) || attempts < 1) {
    throw new ConfigError(`attempts must be a whole number >= 1 (got ${JSON.stringify(options.attempts)})`);
  }
  const { queue } = options;
  if (queue && queue.options.maxAttempts !== attempts) {
    throw new ConfigError(
      `startRolloutServer queue: opened with maxAttempts ${queue.options.maxAttempts}, but attempts is ${attempts}; open it with maxAttempts: ${attempts}`,
    );
  }
  const handler = new RolloutHandler(options, capacity, deadlineMs, attempts);
  const config = JSON.stringify({
    settings: options.settings ?? {},
    attempts,
    concurrency: capacity,
    deadlineMs,
  });
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/config') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(config);
    } else if (req.method === 'GET' && path === '/health') {
      const { inFlight } = handler.counts;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ status: 'ok', inFlight, waiting: handler.gate.waiting, capacity }));
    } else if (req.method === 'POST' && path === '/rollout') {
      void handler.handle(req, res);
    } else {
      const message = `no route for ${req.method} ${path}; use POST /rollout, GET /health or GET /config`;
      sendError(res, 404, 'not_found', message);
    }
  });
  server.keepAliveTimeout = 75_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', resolve);
  });
  const { port, address } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  return {
    url: `http://${host}:${port}`,
    server,
    stats: () => ({ ...handler.counts, waiting: handler.gate.waiting }),
    close: async () => {
      await new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      });
      await handler.drained();
    },
  };
}
