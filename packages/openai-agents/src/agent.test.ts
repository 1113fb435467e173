/**
 * `agentsSdkAgent`'s contract with `sweRollout`, against the capture proxy and the stand-in engine (a
 * scripted policy, not a model): the turns and transcript of a run, a run stopped at its `maxTurns` is a
 * truncated `LimitsExceeded` run, and an engine that fails every turn is an `EngineError`, never an
 * ordinary ending. The sandbox here is a recording stub (the real one is exercised in
 * `sandbox.int.test.ts` and the example's end-to-end test).
 */
import { Agent, run, setTracingDisabled, tool } from '@openai/agents';
import { EngineError, type TaskSpec } from '@vime/core';
import { loadTokenizer, sglangEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { type StandInFault, startStandInEngine } from '@vime/core/standin';
import type { ExecResult, Sandbox } from '@vime/sandbox';
import type { SweAgentInput } from '@vime/swe';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { qwen3Dir } from './__fixtures__/tokenizer.js';
import { agentsSdkAgent } from './agent.js';

beforeAll(() => setTracingDisabled(true));
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

const CALL = '<tool_call>\n{"name": "shell", "arguments": {"cmd": "git status"}}\n</tool_call>';

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
    exec: async () => result,
  } as unknown as Sandbox;
  const session = proxy.openSession('r1');
  const task = { id: 't1', prompt: 'Fix the bug.' } as TaskSpec;
  return { task, sandbox, proxy, session, signal: new AbortController().signal } as SweAgentInput;
}

const agentWithLimit = (maxTurns: number) =>
  agentsSdkAgent(({ model, sandbox, task, signal }) => {
    const shell = tool({
      name: 'shell',
      description: 'Run a command',
      parameters: z.object({ cmd: z.string() }),
      execute: async ({ cmd }) => sandbox.execCommand!({ cmd }),
    });
    return run(new Agent({ name: 'coder', model, tools: [shell] }), task.prompt, { maxTurns, signal });
  });

describe('agentsSdkAgent', () => {
  it('counts the turns and records the commands the agent ran', async () => {
    const agentInput = await input((p) => (p.includes('<tool_response>') ? 'Fixed.' : CALL));
    const run = await agentWithLimit(5).run(agentInput);
    expect(run).toEqual({
      exitStatus: 'Submitted',
      truncated: false,
      turns: 2,
      transcript: ['git status'],
      metadata: { api: 'chat-completions' },
    });
  });

  it('a run stopped at its maxTurns is LimitsExceeded, truncated', async () => {
    const agentInput = await input(() => CALL);
    const run = await agentWithLimit(2).run(agentInput);
    expect(run).toMatchObject({ exitStatus: 'LimitsExceeded', truncated: true, turns: 2 });
  });

  it('an engine that fails every turn is an EngineError', async () => {
    const agentInput = await input(
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
    expect(() => agentsSdkAgent('agent' as never)).toThrow(/the agent must be a function/);
  });
});
