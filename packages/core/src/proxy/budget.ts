/**
 * What one session may hold and spend at once, so that one agent cannot take the memory, the tokenizer
 * or the connections every rollout shares: its requests in flight (`limits.maxSessionRequests`), the
 * bytes of their bodies (`maxSessionBodyBytes`), and the characters it has tokenized in the last minute
 * (`maxTokenizeCharsPerMinute`, a bucket that refills continuously), each request's at most
 * `maxTokenizeChars`. A refusal is a `RequestError` the route answers in its dialect: 413 for one
 * request over its cap, 429 with `Retry-After` for a session over its share.
 */
import { RequestError } from './dialects.js';
import type { BodyAccount, ResolvedLimits } from './server.js';

export type BudgetLimits = Pick<
  ResolvedLimits,
  'maxSessionRequests' | 'maxSessionBodyBytes' | 'maxTokenizeChars' | 'maxTokenizeCharsPerMinute'
>;

/** One request's share of its session's budget: its body bytes as they arrive; `end` gives all back. */
export interface RequestBudget extends BodyAccount {
  end(): void;
}

export class SessionBudget {
  readonly #limits: BudgetLimits;
  readonly #now: () => number;
  #requests = 0;
  #bodyBytes = 0;
  /** Characters the session may still have tokenized now, and when that was last worked out. */
  #chars: number;
  #at: number;

  constructor(limits: BudgetLimits, now: () => number = () => performance.now()) {
    this.#limits = limits;
    this.#now = now;
    this.#chars = limits.maxTokenizeCharsPerMinute;
    this.#at = now();
  }

  /** A request of the session begins: its share (give it back with `end`), or the 429 refusing it. */
  begin(): RequestBudget | RequestError {
    const { maxSessionRequests, maxSessionBodyBytes } = this.#limits;
    if (this.#requests >= maxSessionRequests) {
      return new RequestError(
        429,
        `this session has ${this.#requests} requests in flight, its most (limits.maxSessionRequests); retry when one is answered`,
        1,
      );
    }
    this.#requests++;
    let bytes = 0;
    let ended = false;
    return {
      reserve: (n) => {
        if (this.#bodyBytes + n > maxSessionBodyBytes) {
          return new RequestError(
            429,
            `this session's requests in flight hold ${this.#bodyBytes} bytes of body; ${n} more would pass its ${maxSessionBodyBytes} (limits.maxSessionBodyBytes); retry when one is answered`,
            1,
          );
        }
        this.#bodyBytes += n;
        bytes += n;
        return undefined;
      },
      end: () => {
        if (ended) return;
        ended = true;
        this.#bodyBytes -= bytes;
        this.#requests--;
      },
    };
  }

  /**
   * Charge `chars` characters about to be tokenized; throws the 413 (over one request's cap) or the
   * 429 (over the session's minute, with the seconds until they would fit) that refuses them.
   */
  tokenize(chars: number): void {
    const { maxTokenizeChars, maxTokenizeCharsPerMinute: perMinute } = this.#limits;
    if (chars > maxTokenizeChars) {
      throw new RequestError(
        413,
        `the prompt to tokenize holds ${chars} characters, over the proxy's limit of ${maxTokenizeChars} per request (limits.maxTokenizeChars)`,
      );
    }
    const now = this.#now();
    const perMs = perMinute / 60_000;
    this.#chars = Math.min(perMinute, this.#chars + (now - this.#at) * perMs);
    this.#at = now;
    if (chars > this.#chars) {
      const waitS = Math.max(1, Math.ceil((chars - this.#chars) / perMs / 1000));
      throw new RequestError(
        429,
        `this session had ${perMinute} characters tokenized in the last minute, its most (limits.maxTokenizeCharsPerMinute); these ${chars} fit in ${waitS} s`,
        waitS,
      );
    }
    this.#chars -= chars;
  }
}
