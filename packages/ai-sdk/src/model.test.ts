/**
 * The capture session as an AI SDK model: `generateText`, `streamText` and a `ToolLoopAgent` with a tool,
 * run unmodified against the capture proxy (the stand-in engine behind it, a scripted policy, not a
 * model), each captured token-exactly: the packed row passes the token audit against every turn the
 * engine sampled, and every sampled token is trained exactly once.
 */
import { type CapturedTurn, capturedTurnRecord } from '@vime/core';
import { loadTokenizer, sglangEngine } from '@vime/core/engine';
import { type CaptureProxy, startCaptureProxy } from '@vime/core/proxy';
import { startStandInEngine } from '@vime/core/standin';
import { auditTokens } from '@vime/grpo';
import { generateText, isStepCount, streamText, ToolLoopAgent, tool } from 'ai';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { qwen3Dir } from './__fixtures__/tokenizer.js';
import { captureModel } from './model.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

const SCRIPT = [
  '<think>\nList first.\n</think>\n\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -a"}}\n</tool_call>',
  '<think>\nDone.\n</think>\n\nThe repository has two files.',
];

async function setup(): Promise<{ proxy: CaptureProxy; turns: CapturedTurn[] }> {
  const tokenizer = await loadTokenizer(qwen3Dir());
  let turn = 0;
  const standIn = await startStandInEngine({ tokenizer, policy: () => SCRIPT[turn++ % SCRIPT.length]! });
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

/** The session's rows pass the audit; every sampled token is trained once. */
function expectExact(proxy: CaptureProxy, id: string, turns: CapturedTurn[], expectedTurns: number) {
  const samples = proxy.finishSession(id, { reward: 1 });
  expect(samples).toHaveLength(1);
  expect(samples[0]!.metadata.drift).toEqual({ forks: 0, realigns: 0, retokenizedTokens: 0 });
  const report = auditTokens(samples, turns);
  expect(report.problems).toEqual([]);
  expect(report.verdict).toBe('pass');
  expect(report.turns).toMatchObject({ captured: expectedTurns, matched: expectedTurns, untrained: [] });
  expect(report.totals.trainedTokens).toBe(turns.reduce((n, t) => n + t.output_ids.length, 0));
}

const bash = (ran: string[]) =>
  tool({
    description: 'Run a shell command in the repository',
    inputSchema: z.object({ command: z.string() }),
    execute: async ({ command }) => {
      ran.push(command);
      return 'a.py\nb.py';
    },
  });

describe('captureModel: AI SDK calls captured token-exactly', () => {
  for (const transport of ['in-process', 'http'] as const) {
    it(`generateText with a tool loop (${transport})`, async () => {
      const { proxy, turns } = await setup();
      const session = proxy.openSession(`gen-${transport}`);
      const ran: string[] = [];
      const result = await generateText({
        model: captureModel(session, { transport }),
        tools: { bash: bash(ran) },
        stopWhen: isStepCount(5),
        prompt: 'How many files are in the repository?',
        maxRetries: 0,
      });
      expect(ran).toEqual(['ls -a']);
      expect(result.text).toBe('The repository has two files.');
      expect(result.steps).toHaveLength(2);
      expectExact(proxy, session.id, turns, 2);
    });
  }

  it('streamText: the streamed answer and its usage', async () => {
    const { proxy, turns } = await setup();
    const session = proxy.openSession('stream');
    const ran: string[] = [];
    const result = streamText({
      model: captureModel(session),
      tools: { bash: bash(ran) },
      stopWhen: isStepCount(5),
      prompt: 'How many files are in the repository?',
      maxRetries: 0,
    });
    let text = '';
    for await (const chunk of result.textStream) text += chunk;
    expect(text).toBe('The repository has two files.');
    expect(await result.finishReason).toBe('stop');
    expect((await result.totalUsage).outputTokens).toBe(turns.reduce((n, t) => n + t.output_ids.length, 0));
    expect(ran).toEqual(['ls -a']);
    expectExact(proxy, session.id, turns, 2);
  });

  it('a ToolLoopAgent, counted request by request', async () => {
    const { proxy, turns } = await setup();
    const session = proxy.openSession('agent');
    const requests: string[] = [];
    const agent = new ToolLoopAgent({
      model: captureModel(session, { onRequest: (url) => requests.push(url) }),
      instructions: 'You are a coding agent.',
      tools: { bash: bash([]) },
      stopWhen: isStepCount(5),
    });
    const result = await agent.generate({ prompt: 'How many files are in the repository?' });
    expect(result.finishReason).toBe('stop');
    expect(requests).toEqual([`${session.baseURL}/chat/completions`, `${session.baseURL}/chat/completions`]);
    expectExact(proxy, session.id, turns, 2);
  });

  it('a transport that is not one names the field and the choices', async () => {
    const { proxy } = await setup();
    const session = proxy.openSession('bad');
    expect(() => captureModel(session, { transport: 'grpc' as never })).toThrow(
      /transport "grpc" is not one of 'in-process', 'http'/,
    );
  });
});
