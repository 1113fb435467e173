import { afterEach, describe, expect, it, vi } from 'vitest';
import { type Job, Scheduler } from './scheduler.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('Scheduler', () => {
  it('counts exactly the tokens of finished jobs, however often progress is read', async () => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
    const scheduler = new Scheduler({ slots: 2, tokensPerSecond: 400 });
    let finished = 0;
    const job = (): Job => ({ tokens: 100, promptTokens: 1, done: 0, onDone: () => finished++ });
    for (let i = 0; i < 4; i++) scheduler.submit(job());
    // Progress read at odd moments (a /metrics scrape ticks the scheduler), as fractions of a token.
    let reads = 0;
    while (finished < 4) {
      vi.advanceTimersByTime(1 + (reads++ % 7) * 0.37);
      scheduler.tick();
      expect(scheduler.generated).toBeLessThanOrEqual(400);
    }
    expect(scheduler.generated).toBe(400);
  });
});
