/**
 * A small pool of worker threads that run BPE on long text pieces, off the event loop: one 30 MB tool
 * output costs seconds of tokenizer time, and on the main thread every other session would wait for it.
 * Tasks run first come, first served; a task whose signal aborts is dropped, and a running one stops at
 * once (its worker is terminated and replaced on the next task).
 */
import { Worker } from 'node:worker_threads';

export interface EncodeSource {
  /** `tokenizer.json` as text (sent to each worker; a string copies faster than an object graph). */
  tokenizerJson: string;
  config: Record<string, unknown>;
  /** Added tokens a plain-text piece is encoded without (see `special-text.ts`). */
  specials: string[];
}

interface Task {
  pieces: string[];
  plain: boolean[];
  signal: AbortSignal | undefined;
  resolve: (ids: Int32Array[]) => void;
  reject: (error: unknown) => void;
}

interface Slot {
  worker: Worker | undefined;
  task: Task | undefined;
}

// The worker is plain JavaScript: `encode-worker.mjs` beside this file in a source checkout, built to
// `encode-worker.js` beside the bundle.
const WORKER_URL = new URL(
  import.meta.url.endsWith('.ts') ? './encode-worker.mjs' : './encode-worker.js',
  import.meta.url,
);

export class EncodePool {
  readonly #source: () => EncodeSource;
  readonly #slots: Slot[];
  readonly #queue: Task[] = [];
  #nextId = 0;
  #closed = false;

  /** `source` is called once, when the first worker starts. */
  constructor(source: () => EncodeSource, workers = 1) {
    let cached: EncodeSource | undefined;
    this.#source = () => {
      cached ??= source();
      return cached;
    };
    this.#slots = Array.from({ length: Math.max(1, workers) }, () => ({
      worker: undefined,
      task: undefined,
    }));
  }

  /**
   * Encode each piece (split at added tokens by the caller already); a `plain` piece is encoded by a
   * tokenizer without the special tokens. The arrays returned are views into one buffer.
   */
  encode(pieces: string[], plain: boolean[], signal?: AbortSignal): Promise<Int32Array[]> {
    if (this.#closed) return Promise.reject(new Error('the tokenizer worker pool is closed'));
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const task: Task = { pieces, plain, signal, resolve, reject };
      signal?.addEventListener('abort', () => this.#abort(task), { once: true });
      this.#queue.push(task);
      this.#pump();
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const t of this.#queue.splice(0)) t.reject(new Error('the tokenizer worker pool is closed'));
    await Promise.all(this.#slots.map((s) => s.worker?.terminate()));
  }

  #abort(task: Task): void {
    const queued = this.#queue.indexOf(task);
    if (queued >= 0) this.#queue.splice(queued, 1);
    const slot = this.#slots.find((s) => s.task === task);
    if (slot) {
      // BPE cannot be interrupted: stop the worker; the next task starts a fresh one.
      void slot.worker?.terminate();
      slot.worker = undefined;
      slot.task = undefined;
      this.#pump();
    }
    task.reject(task.signal!.reason);
  }

  #pump(): void {
    for (const slot of this.#slots) {
      if (slot.task || this.#queue.length === 0) continue;
      const task = this.#queue.shift()!;
      slot.task = task;
      slot.worker ??= this.#spawn(slot);
      const worker = slot.worker;
      worker.ref();
      worker.postMessage({ id: this.#nextId++, pieces: task.pieces, plain: task.plain });
    }
  }

  #spawn(slot: Slot): Worker {
    const worker = new Worker(WORKER_URL, { workerData: this.#source() });
    worker.unref();
    worker.on('message', ({ flat, ends }: { flat: Int32Array; ends: Uint32Array }) => {
      if (slot.worker !== worker) return; // a terminated worker's last word
      const task = slot.task;
      slot.task = undefined;
      worker.unref();
      // views into the one buffer the worker sent
      task?.resolve(Array.from(ends, (end, i) => flat.subarray(i === 0 ? 0 : ends[i - 1], end)));
      this.#pump();
    });
    worker.on('error', (error) => {
      if (slot.worker !== worker) return;
      const task = slot.task;
      slot.task = undefined;
      slot.worker = undefined;
      task?.reject(error);
      this.#pump();
    });
    return worker;
  }
}
