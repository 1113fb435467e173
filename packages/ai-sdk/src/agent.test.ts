/**
 * `aiSdkAgent`'s contract with `sweRollout`, against the capture proxy and the stand-in engine (a scripted
 * policy, not a model): the turns and transcript of a run, an agent stopped at its step limit is a
 * truncated `LimitsExceeded` run, and an engine that fails every turn is an `EngineError` thrown through
 * the AI SDK's retries, never an ordinary ending. The sandbox here is a recording stub (the real one is
 * exercised in `sandbox.int.test.ts` and the example's end-to-end test).
 */
import { EngineError, type TaskSpec } from '@vime/core';
import { loadTokenizer, sglangEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { type StandInFault, startStandInEngine } from '@vime/core/standin';
import type { ExecResult, Sandbox } from '@vime/sandbox';
import type { SweAgentInput } from '@vime/swe';
import { generateText, isStepCount, tool } from 'ai';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { qwen3Dir } from './__fixtures__/tokenizer.js';
import { aiSdkAgent } from './agent.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

const CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "git status"}}\n</tool_call>';

async function input(policy: (prompt: string) => string, fault?: () => StandInFault | undefined) {
  const tokenizer = await loadTokenizer(qwen3Dir());
  const standIn = await startStandInEngine({ tokenizer, policy: ({ prompt }) => policy(prompt), fault });
  const engine = sglangEngine(standIn.url);
  const proxy = await startCaptureProxy({ engine, tokenizer, router: { unavailableDeadlineMs: 1_000 } });
  closers.push(
    () => standIn.close(),
    () => engine.close(),
    () => proxy.close(),
  );
  const ran: string[] = [];
  const result: ExecResult = {
    exitCode: 0,
    stdout: 'clean\n',
    stderr: '',
    output: 'clean\n',
    timedOut: false,
    truncated: false,
    durationMs: 1,
  };
  const sandbox = {
    workdir: '/testbed',
    capabilities: { isolatedNetwork: true, persistentProcesses: false },
    exec: async (command: string) => {
      ran.push(command);
      return result;
    },
  } as unknown as Sandbox;
  const session = proxy.openSession('r1');
  const task = { id: 't1', prompt: 'Fix the bug.' } as TaskSpec;
  const agentInput = { task, sandbox, proxy, session, signal: new AbortController().signal } as SweAgentInput;
  return { agentInput, ran, proxy };
}

const agentWithLimit = (steps: number) =>
  aiSdkAgent(({ model, sandbox, task, abortSignal }) =>
    generateText({
      model,
      prompt: task.prompt,
      tools: {
        bash: tool({
          inputSchema: z.object({ command: z.string() }),
          execute: async ({ command }, { experimental_sandbox }) =>
            (await experimental_sandbox!.run({ command })).stdout,
        }),
      },
      stopWhen: isStepCount(steps),
      experimental_sandbox: sandbox,
      abortSignal,
    }),
  );

describe('aiSdkAgent', () => {
  it('counts the turns and records the commands the agent ran', async () => {
    const { agentInput, ran, proxy } = await input((p) => (p.includes('<tool_response>') ? 'Fixed.' : CALL));
    const run = await agentWithLimit(5).run(agentInput);
    expect(run).toEqual({
      exitStatus: 'Submitted',
      truncated: false,
      turns: 2,
      transcript: ['git status'],
      metadata: { finish_reason: 'stop' },
    });
    expect(ran).toEqual(['git status']);
    expect(proxy.finishSession('r1', { reward: 0 })[0]!.metadata.trajectory_turns).toEqual([0, 1]);
  });

  it('an agent stopped at its step limit while still calling tools is LimitsExceeded, truncated', async () => {
    const { agentInput } = await input(() => CALL);
    const run = await agentWithLimit(2).run(agentInput);
    expect(run).toMatchObject({ exitStatus: 'LimitsExceeded', truncated: true, turns: 2 });
    expect(run.transcript).toEqual(['git status', 'git status']);
  });

  it('an engine that fails every turn is an EngineError, through the AI SDK retries', async () => {
    const { agentInput } = await input(
      () => CALL,
      () => ({ kind: 'error', status: 500, message: 'engine down' }),
    );
    const error = await agentWithLimit(5)
      .run(agentInput)
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(EngineError.isInstance(error)).toBe(true);
    expect((error as Error).message).toMatch(/the capture proxy answered 5\d\d/);
  }, 60_000);

  it('an agent that is not a function is a clear error', () => {
    expect(() => aiSdkAgent('agent' as never)).toThrow(/the agent must be a function/);
  });
});
