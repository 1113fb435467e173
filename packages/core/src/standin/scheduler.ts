/**
 * The stand-in engine's service model: at most `slots` requests decode at once and share a fixed
 * engine-wide token throughput (processor sharing, optionally capped per request); the rest wait in a
 * FIFO queue. Total work / throughput is what a batch costs, so adding engines divides step time.
 */
export interface ServiceModel {
  /** Requests decoding at once; the rest queue (SGLang `#queue-req`). Default 256. */
  slots?: number | undefined;
  /** Engine-wide decode throughput in tokens/s, shared by running requests. Default Infinity (instant). */
  tokensPerSecond?: number | undefined;
  /** Cap on one request's decode speed in tokens/s. Default Infinity. */
  maxTokensPerSecondPerRequest?: number | undefined;
  /** KV-cache capacity in tokens, the denominator of `token usage`. Default 1,000,000. */
  kvTokens?: number | undefined;
}

export interface Job {
  tokens: number;
  promptTokens: number;
  /** Tokens decoded so far (fractional while running). */
  done: number;
  onDone: () => void;
}

export class Scheduler {
  readonly slots: number;
  readonly tokensPerSecond: number;
  readonly perRequest: number;
  readonly kvTokens: number;
  readonly running = new Set<Job>();
  readonly queue: Job[] = [];
  /** Tokens of jobs no longer running: whole for finished ones, so a finished count reads exact. */
  #decoded = 0;
  /** Frozen: running jobs make no progress and nothing is admitted (a pause that keeps the cache). */
  #frozen = false;
  #last = performance.now();
  #timer: NodeJS.Timeout | undefined;

  constructor(model: ServiceModel = {}) {
    this.slots = model.slots ?? 256;
    this.tokensPerSecond = model.tokensPerSecond ?? Number.POSITIVE_INFINITY;
    this.perRequest = model.maxTokensPerSecondPerRequest ?? Number.POSITIVE_INFINITY;
    this.kvTokens = model.kvTokens ?? 1_000_000;
  }

  get instant(): boolean {
    return this.tokensPerSecond === Number.POSITIVE_INFINITY && this.perRequest === Number.POSITIVE_INFINITY;
  }

  /** Tokens decoded so far (fractional while jobs run); `/metrics` reports it floored. */
  get generated(): number {
    let n = this.#decoded;
    for (const j of this.running) n += j.done;
    return n;
  }

  /** Tokens held in the KV cache by running requests. */
  get usedTokens(): number {
    let n = 0;
    for (const j of this.running) n += j.promptTokens + Math.floor(j.done);
    return n;
  }

  submit(job: Job): void {
    this.#advance();
    this.queue.push(job);
    this.#admit();
    this.#schedule();
  }

  /** Remove a job wherever it is (client gone or aborted); frees its slot at once. */
  cancel(job: Job): void {
    this.#advance();
    if (this.running.delete(job)) this.#decoded += job.done;
    else {
      const i = this.queue.indexOf(job);
      if (i >= 0) this.queue.splice(i, 1);
    }
    this.#admit();
    this.#schedule();
  }

  get frozen(): boolean {
    return this.#frozen;
  }

  /** Stop decoding and admitting (in-place pause); `thaw` goes on where it stopped. */
  freeze(): void {
    this.#advance();
    this.#frozen = true;
    this.#schedule();
  }

  thaw(): void {
    this.#last = performance.now();
    this.#frozen = false;
    this.#admit();
    this.#schedule();
  }

  #rate(): number {
    return Math.min(this.perRequest, this.tokensPerSecond / Math.max(1, this.running.size));
  }

  #advance(): void {
    const now = performance.now();
    const dt = (now - this.#last) / 1000;
    this.#last = now;
    if (this.#frozen || this.running.size === 0 || dt <= 0) return;
    const step = this.#rate() * dt;
    const finished: Job[] = [];
    for (const job of this.running) {
      job.done = Math.min(job.tokens, job.done + step);
      if (job.tokens - job.done < 1e-6) finished.push(job);
    }
    for (const job of finished) {
      this.running.delete(job);
      job.done = job.tokens;
      this.#decoded += job.tokens;
      job.onDone();
    }
  }

  #admit(): void {
    while (!this.#frozen && this.running.size < this.slots && this.queue.length > 0) {
      const job = this.queue.shift()!;
      if (this.instant || job.tokens === 0) {
        this.#decoded += job.tokens;
        job.done = job.tokens;
        job.onDone();
        continue;
      }
      this.running.add(job);
    }
  }

  #schedule(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#frozen || this.running.size === 0) return;
    let least = Number.POSITIVE_INFINITY;
    for (const j of this.running) least = Math.min(least, j.tokens - j.done);
    const ms = (least / this.#rate()) * 1000;
    this.#timer = setTimeout(
      () => {
        this.#timer = undefined;
        this.#advance();
        this.#admit();
        this.#schedule();
      },
      Math.max(0, ms),
    );
  }

  /** Bring progress up to now (for metrics). */
  tick(): void {
    this.#advance();
    this.#admit();
    this.#schedule();
  }

  stop(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
