/**
 * `finishSession` as a harness and its agent can break it, on the one-thread and the sharded proxy: a
 * branch whose first turn never got an answer (a fault, or the agent's client hanging up) and a call
 * with a missing or bad reward. Every answered turn stays in the rows, and nothing throws that a
 * rollout would then count as an infrastructure failure.
 */
import type { EventEmitter } from 'eventemitter3';
import { afterEach, describe, expect, it } from 'vitest';
import { QWEN3_DIR, qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import { ValidationError } from '../errors.js';
import type { Sample } from '../sample.js';
import { type StandInFault, startStandInEngine } from '../standin/engine.js';
import type { ProxyEvents } from './events.js';
import { startCaptureProxy } from './proxy.js';
import { startShardedCaptureProxy } from './shards/sharded.js';
import type { FinishOptions } from './trajectory/manager.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

/** The branch's system prompt: the stand-in answers it slowly (long text) or not at all (a fault). */
const BRANCH = 'You are a subagent.';
const LONG = 'word '.repeat(400);

/** What the tests use of either proxy. */
interface Proxy {
  open(id: string): { baseURL: string };
  finishSession(id: string, options?: FinishOptions): Sample[];
  /** Resolves when a turn is aborted (its client hung up). */
  aborted(): Promise<void>;
}

async function start(kind: 'one thread' | 'sharded', fault?: (index: number) => StandInFault | undefined) {
  const tokenizer = await qwen3();
  const standIn = await startStandInEngine({
    tokenizer,
    policy: (r) => (r.prompt.includes(BRANCH) ? LONG : 'Checked.'),
    // 100 tokens/s: the long branch answer takes seconds, so a client can hang up in the middle
    service: { slots: 100, maxTokensPerSecondPerRequest: 100 },
    ...(fault ? { fault: (r) => fault(r.requestIndex) } : {}),
  });
  closers.push(() => standIn.close());
  const engine = sglangEngine(standIn.url);
  closers.push(() => engine.close());
  const p =
    kind === 'one thread'
      ? await startCaptureProxy({ engine, tokenizer })
      : await startShardedCaptureProxy({
          shards: 2,
          engines: [{ kind: 'sglang', url: standIn.url }],
          tokenizerDir: QWEN3_DIR,
        });
  closers.push(() => p.close());
  const proxy: Proxy = {
    open: (id) => p.openSession(id),
    finishSession: (id, options) => p.finishSession(id, options),
    aborted: () =>
      new Promise((resolve) => (p.events as EventEmitter<ProxyEvents>).once('turn:abort', () => resolve())),
  };
  return { standIn, proxy };
}

const chat = (system: string) => ({
  model: 'policy',
  messages: [
    { role: 'system', content: system },
    { role: 'user', content: 'Fix a.py.' },
  ],
});

async function ask(baseURL: string, path: string, body: object, signal?: AbortSignal) {
  return fetch(`${baseURL}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

/** Ways a branch's first turn ends with no answer. */
const DROPS: Array<{
  name: string;
  fault?: (index: number) => StandInFault | undefined;
  path: string;
  body: object;
}> = [
  {
    name: 'the engine refuses it (a fault)',
    fault: (index) => (index === 1 ? { kind: 'error', status: 400, message: 'bad prompt' } : undefined),
    path: '/chat/completions',
    body: chat(BRANCH),
  },
  { name: 'its client hangs up mid-decode (OpenAI)', path: '/chat/completions', body: chat(BRANCH) },
  {
    name: 'its client hangs up mid-stream (OpenAI, stream: true)',
    path: '/chat/completions',
    body: { ...chat(BRANCH), stream: true },
  },
  {
    name: 'its client hangs up mid-decode (Anthropic)',
    path: '/messages',
    body: {
      model: 'policy',
      max_tokens: 1024,
      system: BRANCH,
      messages: [{ role: 'user', content: 'Fix a.py.' }],
    },
  },
];

describe.each(['one thread', 'sharded'] as const)('finishSession on the %s proxy', (kind) => {
  it.each(DROPS)(
    'a branch whose first turn is dropped ($name): the rows of the answered turns, nothing thrown',
    async (drop) => {
      const { standIn, proxy } = await start(kind, drop.fault);
      const s = proxy.open('drop-1');
      const first = await ask(s.baseURL, '/chat/completions', chat('You are the main agent.'));
      expect(first.status).toBe(200);
      await first.text();
      if (drop.fault) {
        const res = await ask(s.baseURL, drop.path, drop.body);
        expect(res.status).toBeGreaterThanOrEqual(400);
        await res.text();
      } else {
        // hang up once the engine decodes the branch's turn (it was planned on a thread of its own)
        const client = new AbortController();
        const decoding = new Promise((resolve) => standIn.events.once('request', resolve));
        const aborted = proxy.aborted();
        const res = ask(s.baseURL, drop.path, drop.body, client.signal).then(
          (r) => r.text(),
          () => undefined,
        );
        await decoding;
        client.abort();
        await res;
        await aborted;
      }
      const rows = proxy.finishSession('drop-1', { reward: 0 });
      expect(rows).toHaveLength(1);
      expect(rows[0]!.metadata.lineage).toMatchObject({ id: 'drop-1', thread: 0, threads: 1 });
      expect(rows[0]!.response).toContain('Checked.');
    },
  );

  it.each([
    ['no reward', {}],
    ['a NaN reward', { reward: Number.NaN }],
    ['an infinite reward', { reward: Number.POSITIVE_INFINITY }],
    ['an unknown split', { reward: 1, rewardSplit: 'half' }],
  ])(
    'a call with %s throws a ValidationError and ends nothing: the corrected call returns every row',
    async (_, bad) => {
      const { proxy } = await start(kind);
      const s = proxy.open('reward-1');
      for (const system of ['You are the main agent.', 'You are a reviewer.']) {
        const res = await ask(s.baseURL, '/chat/completions', chat(system));
        expect(res.status).toBe(200);
        await res.text();
      }
      expect(() => proxy.finishSession('reward-1', bad as FinishOptions)).toThrow(ValidationError);
      const rows = proxy.finishSession('reward-1', { reward: 1 });
      expect(rows.map((r) => (r.metadata.lineage as { thread: number }).thread)).toEqual([0, 1]);
      expect(rows.every((r) => r.reward === 1)).toBe(true);
    },
  );
});
