import { describe, expect, it } from 'vitest';
import { type BudgetLimits, type RequestBudget, SessionBudget } from './budget.js';
import { RequestError } from './dialects.js';

const limits: BudgetLimits = {
  maxSessionRequests: 2,
  maxSessionBodyBytes: 1000,
  maxTokenizeChars: 600,
  maxTokenizeCharsPerMinute: 6000, // 100 per second
};

/** A budget on a clock the test moves. */
function budget() {
  let now = 0;
  const b = new SessionBudget(limits, () => now);
  const tick = (ms: number) => {
    now += ms;
  };
  return { b, tick };
}

const refusal = (f: () => void): RequestError => {
  try {
    f();
  } catch (e) {
    if (e instanceof RequestError) return e;
    throw e;
  }
  throw new Error('not refused');
};

describe('SessionBudget', () => {
  it('admits maxSessionRequests at once; the next is a 429 until one ends', () => {
    const { b } = budget();
    const first = b.begin() as RequestBudget;
    b.begin();
    const third = b.begin();
    expect(third).toBeInstanceOf(RequestError);
    expect(third).toMatchObject({ status: 429, retryAfterS: 1 });
    expect((third as Error).message).toMatch(/2 requests in flight, .*limits\.maxSessionRequests/);
    first.end();
    first.end(); // once only
    expect(b.begin()).not.toBeInstanceOf(RequestError);
    expect(b.begin()).toBeInstanceOf(RequestError);
  });

  it("caps the bytes of the session's bodies in flight together, and gives them back when a request ends", () => {
    const { b } = budget();
    const one = b.begin() as RequestBudget;
    const two = b.begin() as RequestBudget;
    expect(one.reserve(700)).toBeUndefined();
    expect(two.reserve(300)).toBeUndefined();
    expect(two.reserve(1)).toMatchObject({ status: 429, retryAfterS: 1 });
    expect(two.reserve(1)!.message).toMatch(/hold 1000 bytes .*limits\.maxSessionBodyBytes/);
    one.end();
    expect(two.reserve(700)).toBeUndefined();
  });

  it('refuses one request over maxTokenizeChars with a 413, charging nothing', () => {
    const { b } = budget();
    expect(refusal(() => b.tokenize(601))).toMatchObject({ status: 413, retryAfterS: undefined });
    expect(refusal(() => b.tokenize(601)).message).toMatch(
      /601 characters, .*600 per request \(limits\.maxTokenizeChars\)/,
    );
    for (let i = 0; i < 10; i++) b.tokenize(600); // the whole minute is still there
    expect(refusal(() => b.tokenize(1)).status).toBe(429);
  });

  it("refills a minute's characters continuously; a 429 says when the request would fit", () => {
    const { b, tick } = budget();
    for (let i = 0; i < 10; i++) b.tokenize(600);
    const limited = refusal(() => b.tokenize(250));
    expect(limited).toMatchObject({ status: 429, retryAfterS: 3 }); // 250 at 100 a second
    expect(limited.message).toMatch(/limits\.maxTokenizeCharsPerMinute.*250 fit in 3 s/);
    tick(2000);
    expect(refusal(() => b.tokenize(250)).retryAfterS).toBe(1);
    tick(500);
    b.tokenize(250);
    // never more than a minute's worth, however long it idles
    tick(3_600_000);
    for (let i = 0; i < 10; i++) b.tokenize(600);
    expect(refusal(() => b.tokenize(100)).retryAfterS).toBe(1);
  });
});
