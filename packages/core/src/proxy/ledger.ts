/**
 * Retry-safe capture. A turn is recorded only once its answer was handed to the client; until then its
 * answer is kept, so an SDK retry of the turn (`x-stainless-retry-count` > 0) or the same body re-sent
 * after a dropped connection gets that answer again instead of a second sample (which would fork the
 * trajectory). Also the per-session turn cap, and the ids of finished sessions (409, not 401).
 */
import { createHash } from 'node:crypto';
import { ConfigError } from '../errors.js';
import type { WireReply } from './reply.js';
import { yieldToLoop } from './server.js';

interface Entry {
  key: string;
  reply: WireReply;
  /** Records the turn; false when there was nothing to record (no engine call, or the session ended). */
  record: () => boolean;
  recorded: boolean;
}

/** Answers kept per session: the last turns' (a retry is of a recent turn). */
const KEPT_ANSWERS = 8;
/** Hashed in slices this long, other work running in between (a 30 MB body hashes for ~100 ms). */
const HASH_SLICE_CHARS = 1 << 20;
/** Finished session keys remembered for their 409 (oldest forgotten first). */
const KEPT_FINISHED = 10_000;

/** The `x-stainless-retry-count` header as a number (0 when absent or not a count). */
export function retryCountOf(header: string | string[] | null | undefined): number {
  const value = Array.isArray(header) ? header[0] : header;
  if (value == null || !/^\s*\d+\s*$/.test(value)) return 0;
  return Number(value);
}

/** Validate a `maxTurns` option (undefined: no cap). */
export function checkMaxTurns(value: unknown, where: string): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isInteger(value) || (value as number) <= 0) {
    throw new ConfigError(
      `${where}: expected a positive integer, found ${JSON.stringify(value)}; omit it for no cap`,
    );
  }
  return value as number;
}

/** One session's answered turns: what to replay, what is recorded, how many turns it may still run. */
export class TurnLedger {
  readonly #entries: Entry[] = [];
  #recorded = 0;
  /** New turns admitted and not yet recorded or given up (generating, or their answer on its way). */
  #running = 0;

  constructor(readonly maxTurns: number | undefined) {}

  /** The key of a request: its route and exact body. */
  static async key(path: string, body: string): Promise<string> {
    const hash = createHash('sha256').update(path).update('\0');
    for (let at = 0; at < body.length; at += HASH_SLICE_CHARS) {
      if (at > 0) await yieldToLoop();
      hash.update(body.slice(at, at + HASH_SLICE_CHARS));
    }
    return hash.digest('base64');
  }

  /** Turns recorded so far. */
  get recorded(): number {
    return this.#recorded;
  }

  /**
   * The kept answer to send again for this request: the client says it is a retry, or the first answer
   * never reached it (the connection dropped). Sending it again records its turn (once).
   */
  replay(key: string, retryCount: number): WireReply | undefined {
    const entry = this.#entries.find((e) => e.key === key);
    if (!entry || (retryCount === 0 && entry.recorded)) return undefined;
    return { ...entry.reply, headers: { ...entry.reply.headers, 'x-vime-replayed': 'true' } };
  }

  /** Record the turn answered to this request (after its answer was handed over); idempotent. */
  commit(key: string): void {
    const entry = this.#entries.find((e) => e.key === key);
    if (!entry || entry.recorded) return;
    entry.recorded = true;
    if (entry.record()) this.#recorded++;
  }

  /** Keep a new turn's answer, not recorded until `commit`. */
  keep(key: string, reply: WireReply, record: () => boolean): void {
    const at = this.#entries.findIndex((e) => e.key === key);
    if (at >= 0) this.#entries.splice(at, 1);
    this.#entries.push({ key, reply, record, recorded: false });
    if (this.#entries.length > KEPT_ANSWERS) this.#entries.shift();
  }

  /** Why a new turn may not start (recorded and running turns count), or undefined. */
  capReached(): string | undefined {
    if (this.maxTurns === undefined || this.#recorded + this.#running < this.maxTurns) return undefined;
    return `the session has used its ${this.maxTurns} turns (maxTurns); finish the rollout`;
  }

  /** Admit a new turn; the returned function ends it (recorded or given up), once. */
  begin(): () => void {
    this.#running++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#running--;
    };
  }
}

/** Keys of finished sessions with the reason, so a late request gets a 409 that says why. */
export class FinishedSessions {
  readonly #reasons = new Map<string, string>();

  add(key: string, reason: string): void {
    this.#reasons.delete(key);
    this.#reasons.set(key, reason);
    if (this.#reasons.size > KEPT_FINISHED) this.#reasons.delete(this.#reasons.keys().next().value!);
  }

  reason(key: string): string | undefined {
    return this.#reasons.get(key);
  }
}
