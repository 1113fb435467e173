/**
 * The proxy's client connections, held within what the process's open-file limit allows. The cap is
 * lowered to fit that limit (each client's turn may hold an engine connection too, and the process
 * keeps descriptors of its own), and a connection past it makes room instead of being turned away: the
 * oldest connection carrying no request is closed, one whose request head is still arriving first,
 * then one idle between requests. So slow and idle clients, however many, cannot keep a new client
 * out; only when every connection is mid-request (each session holds a few at most, see
 * `limits.maxSessionRequests`) is the new one refused with a 503.
 */
import { readFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { runProcess } from '../utils/process.js';

/** Descriptors kept for the process itself: stdio, the event loop's, worker threads', files, pipes. */
const RESERVED_FDS = 64;
/** Closed connections let linger to hand their answer out (each holds its descriptor meanwhile). */
const LINGERING = 32;
/** How long a closed connection lingers at most. */
const LINGER_MS = 1_000;

/**
 * The soft open-file limit of this process, or undefined when it cannot be read (or is unlimited).
 * Node raises the soft limit to the hard one as it starts, so this is the most descriptors the process
 * can ever hold. Linux has it in `/proc/self/limits`; elsewhere a shell's `ulimit -n` (it inherits it).
 */
export async function openFileLimit(): Promise<number | undefined> {
  const text = await readFile('/proc/self/limits', 'utf8').catch(() => undefined);
  const proc = text && /^Max open files\s+(\S+)/m.exec(text)?.[1];
  if (proc) return proc === 'unlimited' ? undefined : Number(proc);
  const shell = await runProcess('sh', ['-c', 'ulimit -n'], { timeoutMs: 5_000 }).catch(() => undefined);
  const n = Number(shell?.stdout.trim());
  return Number.isInteger(n) && n > 0 ? n : undefined;
}

/**
 * The most client connections an open-file limit of `nofile` allows: half of what the process's own
 * descriptors leave (every client may hold an engine connection while its turn runs), less those
 * closed connections that may linger. 448 at the common limit of 1,024.
 */
export function connectionCeiling(nofile: number | undefined): number {
  if (nofile === undefined) return Number.POSITIVE_INFINITY;
  return Math.max(1, Math.floor((nofile - RESERVED_FDS) / 2) - LINGERING);
}

/** The open client sockets of one server, or of several sharing one count (the sharded proxy's). */
export interface ConnectionTally {
  open(): void;
  close(): void;
  readonly value: number;
}

/** A tally in shared memory (`Int32Array` of one cell), so every shard's sockets add up in one place. */
export function sharedTally(cell: Int32Array): ConnectionTally {
  return {
    open: () => void Atomics.add(cell, 0, 1),
    close: () => void Atomics.sub(cell, 0, 1),
    get value() {
      return Atomics.load(cell, 0);
    },
  };
}

export class ClientConnections {
  readonly #open = new Set<Socket>();
  /** Connections with no request yet, oldest first: the first to make room. */
  readonly #heads = new Set<Socket>();
  /** Connections idle between requests, longest idle first. */
  readonly #idle = new Set<Socket>();
  readonly #lingering = new Set<Socket>();

  /**
   * `answer(reason)` is the raw HTTP answer a connection gets when it is closed to make room
   * (`evicted`) or refused because every connection is mid-request (`full`).
   */
  constructor(
    readonly max: number,
    readonly tally: ConnectionTally,
    readonly answer: (reason: 'evicted' | 'full') => string,
  ) {}

  get size(): number {
    return this.#open.size;
  }

  /** A new connection: counted, making room if need be, or refused (false). */
  accept(socket: Socket): boolean {
    if (this.#open.size >= this.max && !this.#makeRoom()) {
      this.#close(socket, this.answer('full'));
      return false;
    }
    this.#open.add(socket);
    this.#heads.add(socket);
    this.tally.open();
    socket.once('close', () => {
      if (!this.#open.delete(socket)) return;
      this.#heads.delete(socket);
      this.#idle.delete(socket);
      this.tally.close();
    });
    return true;
  }

  /** Whether `socket` is counted (not refused, nor closed to make room). */
  has(socket: Socket): boolean {
    return this.#open.has(socket);
  }

  /** A request's head arrived on `socket`: it carries a request until `ended`. */
  started(socket: Socket): void {
    this.#heads.delete(socket);
    this.#idle.delete(socket);
  }

  /** The response on `socket` ended: it is idle until its next request. */
  ended(socket: Socket): void {
    if (this.#open.has(socket) && !socket.destroyed) this.#idle.add(socket);
  }

  closeAll(): void {
    for (const socket of [...this.#open, ...this.#lingering]) socket.destroy();
  }

  /** Close the oldest connection carrying no request; false when every one carries a request. */
  #makeRoom(): boolean {
    const [head] = this.#heads;
    const victim = head ?? this.#idle.values().next().value;
    if (!victim) return false;
    // uncounted now: its descriptor is one of the few lingering ones, or freed at once
    this.#open.delete(victim);
    this.#heads.delete(victim);
    this.#idle.delete(victim);
    this.tally.close();
    // an idle connection has no request to answer; a head still arriving is told why it was closed
    if (head) this.#close(victim, this.answer('evicted'));
    else victim.destroy();
    return true;
  }

  /**
   * Send a final answer and close. What the client still sends is read and dropped until it closes (or
   * `LINGER_MS` passes): closing with unread input would reset the connection and could lose the answer.
   * Past `LINGERING` such connections, one is closed at once instead.
   */
  #close(socket: Socket, answer: string): void {
    socket.on('error', () => {});
    if (this.#lingering.size >= LINGERING) {
      socket.destroy();
      return;
    }
    this.#lingering.add(socket);
    socket.once('close', () => this.#lingering.delete(socket));
    socket.end(answer);
    socket.resume();
    setTimeout(() => socket.destroy(), LINGER_MS).unref();
  }
}
