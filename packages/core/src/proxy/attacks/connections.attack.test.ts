// Slow connections against a proxy whose process has the common 1,024 open-file limit: 1,100 of them
// took every descriptor (the connection cap was 4,096), so legitimate turns failed until the header
// timeout dropped the attackers. The proxy runs in its own process under `prlimit --nofile=1024:1024`
// with its default limits; a legitimate session's turns, on a kept connection and on fresh ones, run
// throughout the attack and must all be answered.
import { Agent } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Attacker,
  LegitClient,
  type ProxyProcess,
  parseRaw,
  send,
  startAttacker,
  startProxyProcess,
} from '../../__fixtures__/proxy-attack.js';
import { qwen3 } from '../../__fixtures__/tokenizer.js';
import { type StandInEngine, startStandInEngine } from '../../standin/engine.js';

const NOFILE = 1024;
const FLOOD = 1_100;

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

/** A turn on a connection of its own (a harness's client opens new ones at times), answered or thrown. */
async function freshTurn(origin: string, key: string): Promise<void> {
  const agent = new Agent({ keepAlive: false });
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'ping' }], max_tokens: 4 });
  // a proxy out of descriptors leaves the connection unanswered: give up long after any served turn
  const timeout = new Promise<never>((_, reject) =>
    setTimeout(() => reject(new Error('a fresh connection got no answer in 30 s')), 30_000).unref(),
  );
  try {
    const answer = await Promise.race([
      send(agent, `${origin}/v1/chat/completions`, body, { authorization: `Bearer ${key}` }),
      timeout,
    ]);
    if (answer.status !== 200)
      throw new Error(`a fresh connection's turn answered ${answer.status}: ${answer.text}`);
  } finally {
    agent.destroy();
  }
}

/** `count` slow connections in four spellings, those that post a turn with the attacker's `key`. */
function floodScripts(key: string, count: number): Array<string | { now: string; dribble: string }> {
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n`;
  return Array.from({ length: count }, (_, i) => {
    switch (i % 4) {
      case 0: // a header a byte at a time
        return `${head}Content-Length: 60\r\n\r\n`;
      case 1: // connect and never send
        return '';
      case 2: // the head at once, the body a byte at a time (the attacker's own session)
        return { now: `${head}Content-Length: 5000\r\n\r\n{"messages"`, dribble: ' '.repeat(4989) };
      default: // a request, then an idle keep-alive connection
        return { now: 'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n', dribble: '' };
    }
  });
}

describe.each(['single', 'sharded'] as const)('%s proxy at a 1,024 descriptor limit', (mode) => {
  let proxy: ProxyProcess;
  beforeAll(async () => {
    proxy = await startProxyProcess({ mode, engineUrl: engine.url }, { nofile: NOFILE });
  });
  afterAll(() => proxy?.close());

  it('keeps its connection cap below the descriptor limit', async () => {
    const stats = await proxy.stats();
    expect(stats.nofile).toBe(NOFILE);
    // half of what the process's own descriptors leave, less those let linger: (1024 - 64) / 2 - 32
    expect(stats.maxConnections).toBe(448);
  });

  it(`serves legitimate turns throughout a flood of ${FLOOD} slow connections (four spellings)`, async () => {
    // victims on every shard, and an attacker's session on every shard (sessions go to the least loaded)
    const victims = [await proxy.open('victim-0'), await proxy.open('victim-1')];
    const evils = [await proxy.open('evil-0'), await proxy.open('evil-1')];
    const clients = victims.map((v) => new LegitClient(new URL(v.baseURL).origin, v.apiKey));
    for (const c of clients) await c.turns(2);
    const origins = proxy.urls;
    expect(new Set(evils.map((e) => new URL(e.baseURL).origin))).toEqual(new Set(origins));
    const scriptsFor = (origin: string, count: number) => {
      const evil = evils.find((e) => new URL(e.baseURL).origin === origin)!;
      return floodScripts(evil.apiKey, count);
    };
    await proxy.resetPeak();
    const floods = origins.map((origin) =>
      attacker.run({
        op: 'sockets',
        url: origin,
        scripts: scriptsFor(origin, FLOOD / origins.length),
        everyMs: 200,
        // past the default 10 s header timeout: the slow heads are dropped meanwhile
        waitMs: 15_000,
      }),
    );
    let done = false;
    const all = Promise.all(floods).then((r) => {
      done = true;
      return r.flat();
    });
    let served = 0;
    while (!done) {
      for (const [i, v] of victims.entries()) {
        await clients[i]!.turn();
        await freshTurn(new URL(v.baseURL).origin, v.apiKey);
        served += 2;
      }
    }
    const sockets = await all;
    for (const c of clients) c.close();
    const stats = await proxy.stats();
    expect(served).toBeGreaterThan(4);
    expect(stats.peakFds).toBeLessThan(NOFILE);
    // what the attackers got: their connections made room for others (503), timed out (408), were
    // refused past the session's cap (429), answered (200 for the models request) or still held
    const statuses = new Map<number, number>();
    for (const s of sockets) {
      const status = parseRaw(s.received).status;
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
    }
    expect([...statuses.keys()].filter((s) => ![0, 200, 408, 429, 503].includes(s))).toEqual([]);
    expect(statuses.get(429) ?? 0, JSON.stringify([...statuses])).toBeGreaterThan(0);
    // and after the flood, sessions are served on fresh connections still
    for (const v of victims) await freshTurn(new URL(v.baseURL).origin, v.apiKey);
  });
});
