/**
 * Routing replay (R3) through the capture proxy, against the stand-in engine on SGLang's and vLLM's
 * wires. The stand-in's routing is made up (a deterministic function of token, position, layer, slot
 * and weight version: `standInExpert`), never a model's; what is checked is that every row carries
 * exactly the routing the engine reported for each of its positions, in slime's layout.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { DIALECTS, toolLoop } from '../__fixtures__/dialect-conversation.js';
import {
  closeAll,
  closers,
  openaiMessage,
  post,
  script,
  TOOL_LOOP,
  tools,
} from '../__fixtures__/proxy-harness.js';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { TemplateMessage } from '../engine/tokenizer/template.js';
import { vllmEngine } from '../engine/vllm.js';
import type { Turn } from '../rollout.js';
import type { Sample } from '../sample.js';
import { type StandInPolicy, startStandInEngine } from '../standin/engine.js';
import { type StandInRouting, standInExpert } from '../standin/routing.js';
import type { CaptureProxyOptions } from './api.js';
import { startCaptureProxy } from './proxy.js';
import type { DriftReport } from './trajectory/manager.js';

afterEach(closeAll);

const ROUTING = { layers: 3, topK: 2, experts: 16 };
const SHAPE = { layers: 3, topK: 2 };
type Kind = 'sglang' | 'vllm';

async function rig(
  kind: Kind,
  policy: StandInPolicy,
  opts: {
    fault?: StandInRouting['fault'];
    weightVersion?: string | undefined;
    tokensPerSecond?: number | undefined;
    proxy?: Partial<CaptureProxyOptions> | undefined;
  } = {},
) {
  const tokenizer = await qwen3();
  const standIn = await startStandInEngine({
    tokenizer,
    policy,
    routedExperts: { ...ROUTING, fault: opts.fault },
    weightVersion: opts.weightVersion,
    ...(opts.tokensPerSecond ? { service: { tokensPerSecond: opts.tokensPerSecond } } : {}),
  });
  closers.push(() => standIn.close());
  const engine =
    kind === 'vllm' ? vllmEngine(standIn.url, { model: 'vime-standin' }) : sglangEngine(standIn.url);
  closers.push(() => engine.close());
  const proxy = await startCaptureProxy({ engine, tokenizer, routingReplay: SHAPE, ...opts.proxy });
  closers.push(() => proxy.close());
  const turns: Turn[] = [];
  const errors: string[] = [];
  const drift: DriftReport[] = [];
  proxy.events.on('turn', (e) => turns.push(e.turn));
  proxy.events.on('turn:error', (e) => errors.push(e.error.message));
  proxy.trajectories.on('drift', (d) => drift.push(d));
  return { tokenizer, standIn, proxy, turns, errors, drift };
}

async function until(ok: () => boolean, what: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`waited ${ms} ms for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The row's routing is the engine's at every position but the last, under the version that forwarded it. */
function expectRouted(sample: Sample, versionAt: (position: number) => string = () => 'default'): void {
  const want: number[][][] = [];
  for (let p = 0; p < sample.tokens.length - 1; p++) {
    want.push(
      Array.from({ length: ROUTING.layers }, (_, l) =>
        Array.from({ length: ROUTING.topK }, (_, k) =>
          standInExpert(sample.tokens[p]!, p, l, k, ROUTING, versionAt(p)),
        ),
      ),
    );
  }
  expect(sample.rollout_routed_experts).toHaveLength(sample.tokens.length - 1);
  expect(sample.rollout_routed_experts).toEqual(want);
}

describe('routing replay: every dialect, streamed and not, on both wires (stand-in engine)', () => {
  for (const kind of ['sglang', 'vllm'] as const) {
    for (const dialect of DIALECTS) {
      for (const stream of [false, true]) {
        const name = `${dialect} ${stream ? 'SSE' : 'JSON'} on ${kind}`;
        it(`${name}: a three-turn tool loop stitches into one row with the engine's routing at every position`, async () => {
          const { proxy, turns } = await rig(kind, script(...TOOL_LOOP));
          const session = proxy.openSession(`loop-${kind}-${dialect}-${stream}`);
          expect((await toolLoop(dialect, session, stream)).statuses).toEqual([200, 200, 200]);
          await until(() => turns.length === 3, 'three recorded turns');
          // the session keeps of each turn only the positions a row takes from it
          for (const [k, t] of turns.entries()) {
            const prev = turns[k - 1];
            const start = prev ? prev.promptIds.length + prev.outputIds.length - 1 : 0;
            expect(t.routes!.start).toBe(start);
            expect(t.routes!.experts.length).toBe((t.promptIds.length + t.outputIds.length - 1 - start) * 6);
          }
          const samples = proxy.finishSession(session.id, { reward: 1 });
          expect(samples).toHaveLength(1);
          expectRouted(samples[0]!);
        });

        it(`${name}: a compaction (a prompt that extends no earlier one) starts a new row with its own routing`, async () => {
          const { proxy, turns, drift } = await rig(kind, script(...TOOL_LOOP));
          const session = proxy.openSession(`compact-${kind}-${dialect}-${stream}`);
          expect((await toolLoop(dialect, session, stream, { compactAt: 2 })).statuses).toEqual([
            200, 200, 200,
          ]);
          await until(() => turns.length === 3, 'three recorded turns');
          const samples = proxy.finishSession(session.id, { reward: 1 });
          // the summary opens a thread of its own: a trajectory, and a row, of its own
          expect(samples).toHaveLength(2);
          expect(drift.map((d) => d.forks)).toEqual([0, 0]);
          for (const s of samples) expectRouted(s);
          expect(Array.from(samples[1]!.tokens.subarray(0, turns[2]!.promptIds.length))).toEqual(
            Array.from(turns[2]!.promptIds),
          );
        });
      }
    }
  }
});

describe('routing replay: a fork inside a thread', () => {
  for (const kind of ['sglang', 'vllm'] as const) {
    for (const stream of [false, true]) {
      it(`a client that edits an earlier answer forks the row; both rows carry their routing (${kind}, ${stream ? 'SSE' : 'JSON'})`, async () => {
        const { proxy, turns, drift } = await rig(kind, script(...TOOL_LOOP));
        const session = proxy.openSession(`fork-${kind}-${stream}`);
        const kinds: string[] = [];
        proxy.events.on('turn', (e) => kinds.push(e.stitch.kind));
        const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix the failing test.' }];
        for (let k = 0; k < 3; k++) {
          const res = await post(
            `${session.baseURL}/chat/completions`,
            { messages, tools, stream },
            {
              authorization: `Bearer ${session.apiKey}`,
            },
          );
          expect(res.status).toBe(200);
          const { message } = openaiMessage(res.text, stream);
          // the harness rewrites its copy of the second answer: the third prompt is tokenized whole
          if (k === 1) message.content = 'Reading a.py.';
          messages.push(message as unknown as TemplateMessage);
          const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
          if (call) messages.push({ role: 'tool', tool_call_id: call.id, content: 'a.py' });
        }
        await until(() => turns.length === 3, 'three recorded turns');
        expect(kinds).toEqual(['first', 'reused', 'changed']);
        const samples = proxy.finishSession(session.id, { reward: 1 });
        expect(drift).toHaveLength(1);
        expect(drift[0]).toMatchObject({ forks: 1, realigns: 0 });
        expect(samples.map((s) => s.metadata.trajectory_turns)).toEqual([[0, 1], [2]]);
        for (const s of samples) expectRouted(s);
      });
    }
  }
});

describe('routing replay: a weight update inside a turn', () => {
  const scripted = Array.from({ length: 300 }, (_, i) => 1000 + i);
  for (const stream of [false, true]) {
    it(`a turn continued across an update concatenates its generations' routing (${stream ? 'SSE' : 'JSON'})`, async () => {
      const { proxy, standIn, turns } = await rig('sglang', () => ({ ids: scripted }), {
        weightVersion: '1',
        tokensPerSecond: 600,
      });
      const session = proxy.openSession(`update-${stream}`);
      const reply = post(
        `${session.baseURL}/chat/completions`,
        { messages: [{ role: 'user', content: 'long' }], stream, max_tokens: 400 },
        { authorization: `Bearer ${session.apiKey}` },
      );
      await until(() => standIn.stats().running === 1, 'the turn to run on the engine');
      await new Promise((r) => setTimeout(r, 100));
      await proxy.router.updateWeights({ modelPath: '/ckpt/step-2', weightVersion: '2' });
      expect((await reply).status).toBe(200);
      await until(() => turns.length === 1, 'the recorded turn');
      const turn = turns[0]!;
      expect(turn.versionRuns!.map((r) => r.version)).toEqual(['1', '2']);
      const before = turn.versionRuns![0]!.tokens;
      expect(before).toBeGreaterThan(0);
      const [sample] = proxy.finishSession(session.id, { reward: 1 });
      // positions the first generation forwarded carry version 1's routing; from its last token on, 2's
      const firstEnd = turn.promptIds.length + before - 1;
      expectRouted(sample!, (p) => (p < firstEnd ? '1' : '2'));
    });
  }
});

describe('routing replay fails closed', () => {
  for (const kind of ['sglang', 'vllm'] as const) {
    for (const dialect of ['openai', 'gemini'] as const) {
      for (const stream of [false, true]) {
        for (const fault of ['missing', 'short'] as const) {
          it(`${dialect} ${kind} ${stream ? 'SSE' : 'JSON'}: routing ${fault} fails the turn, unrecorded`, async () => {
            const { proxy, turns, errors } = await rig(kind, script(...TOOL_LOOP), { fault: () => fault });
            const session = proxy.openSession(`fail-${dialect}-${kind}-${stream}-${fault}`);
            const { statuses, error } = await toolLoop(dialect, session, stream, { turns: 1 });
            const expected =
              fault === 'missing'
                ? /routing replay needs the routed experts of every token, found none/
                : kind === 'sglang'
                  ? /expected \d+ expert ids .* found \d+/
                  : /expected shape \(\d+, 3, 2\) .* found \(\d+, 3, 2\)/;
            // a streamed answer may have begun (200): the failure then ends the stream with an error event
            expect(statuses).toEqual([stream ? statuses[0] : 502]);
            expect(error).toMatch(expected);
            await until(() => errors.length === 1, 'the turn error');
            expect(errors[0]).toMatch(expected);
            expect(turns).toHaveLength(0);
            expect(proxy.trajectories.trajectory(session.id).turns).toHaveLength(0);
          });
        }
      }
    }
  }

  for (const dialect of ['anthropic', 'responses', 'gemini'] as const) {
    it(`${dialect}: an engine without routing capture fails the turn`, async () => {
      const { proxy, turns, errors } = await rig('sglang', script(...TOOL_LOOP), { fault: () => 'missing' });
      const session = proxy.openSession(`fail-${dialect}`);
      const { statuses } = await toolLoop(dialect, session, false, { turns: 1 });
      expect(statuses).toEqual([502]);
      expect(errors[0]).toMatch(/found none; serve with --enable-return-routed-experts/);
      expect(turns).toHaveLength(0);
    });
  }
});
