// Requests written to cost the proxy gigabytes or minutes of tokenizer time: one 30 MB body to
// count_tokens took the proxy from 203 MB to 2.3 GB resident and 38 s. The proxy runs in a process of its
// own, so its peak resident memory (the kernel's high-water mark) is what an attack cost it; a legitimate
// session's turns run throughout the attack and must all be answered.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Attacker,
  LegitClient,
  type ProxyProcess,
  startAttacker,
  startProxyProcess,
} from '../../__fixtures__/proxy-attack.js';
import type { AttackResult, BodySpell } from '../../__fixtures__/proxy-attacker.js';
import { qwen3 } from '../../__fixtures__/tokenizer.js';
import { type StandInEngine, startStandInEngine } from '../../standin/engine.js';
import type { ProxyLimits } from '../server.js';

const MB = 1024 * 1024;
/** What one attack may add to the proxy's resident memory. */
const GROWTH = 300 * MB;

type Answer = AttackResult<{ op: 'body'; url: string; spell: BodySpell; bytes: number }>;

let engine: StandInEngine;
let attacker: Attacker;
beforeAll(async () => {
  engine = await startStandInEngine({ tokenizer: await qwen3(), policy: () => 'pong' });
  attacker = await startAttacker();
});
afterAll(async () => {
  await attacker?.close();
  await engine?.close();
});

/** A session of the proxy process, and a legitimate client of it (on its shard). */
async function session(proxy: ProxyProcess, id: string) {
  const s = await proxy.open(id);
  return { ...s, client: new LegitClient(new URL(s.baseURL).origin, s.apiKey) };
}

/**
 * Run `legit`'s turns while `attacks` are answered, and watch the proxy's peak memory: it stops as soon
 * as the attacks are all answered, or the growth passes `GROWTH` (an unbounded proxy fails fast, not
 * after minutes of tokenizing). Every legitimate turn must be answered 200 (`LegitClient.turn` throws).
 */
async function underAttack(proxy: ProxyProcess, legit: LegitClient, attacks: Array<Promise<Answer>>) {
  const base = (await proxy.stats()).rss;
  let answered = false;
  const all = Promise.all(attacks).then((a) => {
    answered = true;
    return a;
  });
  let turns = 0;
  let growth = 0;
  while (!answered && growth <= GROWTH) {
    await legit.turn();
    if (!answered) turns++;
    growth = (await proxy.stats()).peakRss - base;
  }
  growth = Math.max(growth, (await proxy.stats()).peakRss - base);
  return { answers: answered ? await all : undefined, turnsDuring: turns, growth };
}

const json = (a: Answer) => ('text' in a ? JSON.parse(a.text) : a);

describe.each(['single', 'sharded'] as const)('%s proxy: requests that would cost gigabytes', (mode) => {
  let proxy: ProxyProcess;
  beforeAll(async () => {
    proxy = await startProxyProcess({ mode, engineUrl: engine.url });
  });
  afterAll(() => proxy?.close());

  const spellings: Array<[string, string, BodySpell]> = [
    ['a 30 MB user message to count_tokens', '/messages/count_tokens', 'anthropic-message'],
    ['a 30 MB system prompt to count_tokens', '/messages/count_tokens', 'anthropic-system'],
    ['a 30 MB tool result to messages', '/messages', 'anthropic-tool-result'],
    ['20,000 distinct messages (30 MB) to chat/completions', '/chat/completions', 'openai-messages'],
    ['30 MB of Responses instructions', '/responses', 'responses-instructions'],
    ['10,000 Responses input items (30 MB)', '/responses', 'responses-items'],
  ];
  for (const [name, route, spell] of spellings) {
    it(`refuses ${name} with a 413 in the dialect, in under 300 MB, while another session is served`, async () => {
      const victim = await session(proxy, `victim-${spell}`);
      const evil = await session(proxy, `evil-${spell}`);
      await victim.client.turns(2);
      await proxy.resetPeak();
      const attack = attacker.run({ op: 'body', url: `${evil.baseURL}${route}`, spell, bytes: 30 * MB });
      const { answers, turnsDuring, growth } = await underAttack(proxy, victim.client, [attack]);
      victim.client.close();
      expect(growth, `the proxy grew ${Math.round(growth / MB)} MB`).toBeLessThan(GROWTH);
      const [answer] = answers!;
      expect(answer).toMatchObject({ status: 413 });
      const body = json(answer!);
      if (spell.startsWith('anthropic')) {
        expect(body).toMatchObject({ type: 'error', error: { type: 'request_too_large' } });
      } else expect(body.error.type).toBe('invalid_request_error');
      expect(body.error.message).toMatch(/limits\.maxTokenizeChars/);
      // the other session was answered while the attack was in flight
      expect(turnsDuring).toBeGreaterThan(0);
    });
  }

  it("holds one session's large bodies to one at a time: four 30 MB count_tokens at once cost under 300 MB", async () => {
    const victim = await session(proxy, 'victim-four');
    const evil = await session(proxy, 'evil-four');
    await victim.client.turns(2);
    await proxy.resetPeak();
    const url = `${evil.baseURL}/messages/count_tokens`;
    const attacks = Array.from({ length: 4 }, () =>
      attacker.run({ op: 'body', url, spell: 'anthropic-message', bytes: 30 * MB }),
    );
    const { answers, turnsDuring, growth } = await underAttack(proxy, victim.client, attacks);
    victim.client.close();
    expect(growth, `the proxy grew ${Math.round(growth / MB)} MB`).toBeLessThan(GROWTH);
    // each is refused: 413 once read (too much to tokenize), or 429 at once (the session's bodies in
    // flight would pass limits.maxSessionBodyBytes); a refused client may see the reset first
    for (const answer of answers!) {
      if ('error' in answer) expect(answer.error).toMatch(/EPIPE|ECONNRESET/);
      else expect([413, 429]).toContain(answer.status);
    }
    // Whether two uploads overlap (and one is refused with 429) is up to how the machine schedules the
    // four; the bound above holds either way, and budget.test.ts checks the 429 itself. A 429 seen here
    // must say why and when to retry.
    for (const limited of answers!.filter((a) => 'status' in a && a.status === 429)) {
      expect(json(limited)).toMatchObject({
        type: 'error',
        error: { type: 'rate_limit_error', message: expect.stringMatching(/limits\.maxSessionBodyBytes/) },
      });
      expect(limited).toMatchObject({ retryAfter: expect.stringMatching(/^\d+$/) });
    }
    expect(turnsDuring).toBeGreaterThan(0);
  });
});

describe.each(['single', 'sharded'] as const)('%s proxy: tokenizer characters per session', (mode) => {
  const limits: ProxyLimits = { maxTokenizeChars: 256 * 1024, maxTokenizeCharsPerMinute: 1024 * 1024 };
  let proxy: ProxyProcess;
  beforeAll(async () => {
    proxy = await startProxyProcess({ mode, engineUrl: engine.url, limits });
  });
  afterAll(() => proxy?.close());

  it('answers 429 with Retry-After once a session spent its minute, in every dialect; other sessions keep theirs', async () => {
    const evil = await session(proxy, 'evil-rate');
    const other = await session(proxy, 'other-rate');
    const count = (s: { baseURL: string }) =>
      attacker.run({
        op: 'body',
        url: `${s.baseURL}/messages/count_tokens`,
        spell: 'anthropic-message',
        bytes: 200_000,
      });
    // one request past the per-request cap: 413, and nothing charged for it
    const over = await attacker.run({
      op: 'body',
      url: `${evil.baseURL}/messages/count_tokens`,
      spell: 'anthropic-message',
      bytes: 300_000,
    });
    expect(over).toMatchObject({ status: 413 });
    expect(json(over).error.message).toMatch(/limits\.maxTokenizeChars\b/);
    // distinct 200 KB requests: a minute's budget (about five) passes, then 429
    const statuses: number[] = [];
    let limited: Answer | undefined;
    for (let i = 0; i < 12 && !limited; i++) {
      const answer = await count(evil);
      expect(answer).toHaveProperty('status');
      if ((answer as { status: number }).status === 429) limited = answer;
      else statuses.push((answer as { status: number }).status);
    }
    expect(statuses.length).toBeGreaterThanOrEqual(5);
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(limited, 'no 429 after 12 requests of 200 KB').toBeDefined();
    expect(Number((limited as { retryAfter: string }).retryAfter)).toBeGreaterThanOrEqual(1);
    expect(json(limited!)).toMatchObject({
      type: 'error',
      error: {
        type: 'rate_limit_error',
        message: expect.stringMatching(/limits\.maxTokenizeCharsPerMinute/),
      },
    });
    // the same session's budget is spent on every route
    for (const [route, spell] of [
      ['/chat/completions', 'openai-messages'],
      ['/responses', 'responses-instructions'],
    ] as const) {
      const answer = await attacker.run({
        op: 'body',
        url: `${evil.baseURL}${route}`,
        spell,
        bytes: 200_000,
      });
      expect(answer, route).toMatchObject({ status: 429, retryAfter: expect.stringMatching(/^\d+$/) });
      expect(json(answer).error.type).toBe('rate_limit_exceeded');
    }
    // another session's budget is its own
    expect(await count(other)).toMatchObject({ status: 200 });
    await other.client.turns(2);
    other.client.close();
  });
});
