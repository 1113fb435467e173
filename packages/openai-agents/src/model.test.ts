/**
 * The capture session as the OpenAI Agents SDK's model: an `Agent` with a function tool, run by the
 * SDK's own `run` (and a `Runner` with the provider), over Chat Completions and over Responses, against
 * the capture proxy and the stand-in engine (a scripted policy, not a model). Each run is captured
 * token-exactly: its row passes the token audit against every turn the engine sampled.
 */
import { Agent, Runner, run, setTracingDisabled, tool } from '@openai/agents';
import { type CapturedTurn, capturedTurnRecord } from '@vime/core';
import { loadTokenizer, sglangEngine } from '@vime/core/engine';
import { type CaptureProxy, startCaptureProxy } from '@vime/core/proxy';
import { startStandInEngine } from '@vime/core/standin';
import { auditTokens } from '@vime/grpo';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { qwen3Dir } from './__fixtures__/tokenizer.js';
import { type AgentsApi, captureAgentsModel, captureModelProvider } from './model.js';

beforeAll(() => setTracingDisabled(true));
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

const SCRIPT = [
  '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -a"}}\n</tool_call>',
  'The repository has two files.',
];

async function setup(): Promise<{ proxy: CaptureProxy; turns: CapturedTurn[] }> {
  const tokenizer = await loadTokenizer(qwen3Dir());
  const standIn = await startStandInEngine({
    tokenizer,
    policy: ({ prompt }) => SCRIPT[prompt.includes('<tool_response>') ? 1 : 0]!,
  });
  const engine = sglangEngine(standIn.url);
  const proxy = await startCaptureProxy({ engine, tokenizer });
  closers.push(
    () => standIn.close(),
    () => engine.close(),
    () => proxy.close(),
  );
  const turns: CapturedTurn[] = [];
  proxy.events.on('turn', (e) => turns.push(capturedTurnRecord(e.sessionId, e.turn)));
  return { proxy, turns };
}

function expectExact(proxy: CaptureProxy, id: string, turns: CapturedTurn[]) {
  const samples = proxy.finishSession(id, { reward: 1 });
  expect(samples).toHaveLength(1);
  expect(samples[0]!.metadata.trajectory_turns).toEqual([0, 1]);
  expect(samples[0]!.metadata.drift).toEqual({ forks: 0, realigns: 0, retokenizedTokens: 0 });
  const report = auditTokens(samples, turns);
  expect(report.problems).toEqual([]);
  expect(report.verdict).toBe('pass');
  expect(report.turns).toMatchObject({ captured: 2, matched: 2, untrained: [] });
  expect(report.totals.trainedTokens).toBe(turns.reduce((n, t) => n + t.output_ids.length, 0));
}

const bash = (ran: string[]) =>
  tool({
    name: 'bash',
    description: 'Run a shell command in the repository',
    parameters: z.object({ command: z.string() }),
    execute: async ({ command }) => {
      ran.push(command);
      return 'a.py\nb.py';
    },
  });

describe('captureAgentsModel: Agents SDK runs captured token-exactly', () => {
  for (const api of ['chat-completions', 'responses'] as AgentsApi[]) {
    for (const transport of ['in-process', 'http'] as const) {
      it(`an Agent with a tool over ${api} (${transport})`, async () => {
        const { proxy, turns } = await setup();
        const session = proxy.openSession(`${api}-${transport}`);
        const requests: string[] = [];
        const ran: string[] = [];
        const agent = new Agent({
          name: 'coder',
          instructions: 'You are a coding agent.',
          model: captureAgentsModel(session, { api, transport, onRequest: (url) => requests.push(url) }),
          tools: [bash(ran)],
        });
        const result = await run(agent, 'How many files are in the repository?', { maxTurns: 5 });
        expect(result.finalOutput).toBe('The repository has two files.');
        expect(ran).toEqual(['ls -a']);
        const path = api === 'responses' ? 'responses' : 'chat/completions';
        expect(requests).toEqual([`${session.baseURL}/${path}`, `${session.baseURL}/${path}`]);
        expectExact(proxy, session.id, turns);
      });
    }
  }

  it('a Runner with the session as its model provider, streamed', async () => {
    const { proxy, turns } = await setup();
    const session = proxy.openSession('runner');
    const runner = new Runner({ modelProvider: captureModelProvider(session) });
    const agent = new Agent({ name: 'coder', instructions: 'You are a coding agent.', tools: [bash([])] });
    const result = await runner.run(agent, 'How many files are in the repository?', { stream: true });
    await result.completed;
    expect(result.finalOutput).toBe('The repository has two files.');
    expectExact(proxy, session.id, turns);
  });

  it('an api that is not one names the field and the choices', async () => {
    const { proxy } = await setup();
    const session = proxy.openSession('bad');
    expect(() => captureAgentsModel(session, { api: 'completions' as never })).toThrow(
      /api "completions" is not one of 'chat-completions', 'responses'/,
    );
  });
});
