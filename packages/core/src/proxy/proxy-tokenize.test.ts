// Large inputs are tokenized off the event loop: a 30 MB body on one session must not hold the turns of
// the others, and a client that gives up stops the work.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type Attacker,
  LegitClient,
  latencyBound,
  p99,
  startAttacker,
} from '../__fixtures__/proxy-attack.js';
import { closeAll, closers, setup } from '../__fixtures__/proxy-harness.js';

afterEach(closeAll);
let attacker: Attacker;
beforeAll(async () => {
  attacker = await startAttacker();
});
afterAll(() => attacker.close());

/** Source-like text: what a `cat` of a huge log or generated file sends back as a tool result. */
const FILL = 'def handler(event, ctx):\\n    return process(event.payload, retries=3)  # see issue 1234\\n';

describe('capture proxy: tokenizing large inputs', () => {
  for (const dialect of ['openai', 'anthropic'] as const) {
    it(`a 30 MB ${dialect} body does not hold other sessions' turns`, async () => {
      const { proxy } = await setup(() => 'pong');
      proxy.openSession('victim');
      proxy.openSession('big');
      const legit = new LegitClient(proxy.url, 'victim');
      closers.push(async () => legit.close());
      await legit.turns(3);
      const bound = latencyBound(await legit.turns(15));
      const turns: unknown[] = [];
      proxy.events.on('turn', (e) => turns.push(e.sessionId));
      const big = attacker.run({
        op: 'stream',
        url: `${proxy.url}/sessions/big/v1/${dialect === 'openai' ? 'chat/completions' : 'messages'}`,
        bytes: 30 * 1024 * 1024,
        headers: {},
        fill: FILL,
      });
      // every legitimate turn while the big one is received, parsed and tokenized
      const during = await legit.turns(30);
      expect(turns.filter((s) => s === 'big')).toEqual([]); // still tokenizing: the bound held against it
      // Turns keep flowing (a held loop would stall every one of them for the whole tokenization): nine
      // in ten within the bound, and none past twice the bound (receiving, parsing and collecting a 30 MB
      // body still cost the main thread a few short pauses).
      const sorted = [...during].sort((a, b) => a - b);
      expect(sorted[Math.floor(sorted.length * 0.9)]).toBeLessThan(bound);
      expect(p99(during)).toBeLessThan(2 * bound);
      await proxy.close(); // the big request's connection drops: its tokenization is stopped
      expect(await big).toMatchObject({ error: expect.any(String) });
    });
  }
});
