/**
 * pi, the real pinned package with its pinned dependency tree (npm ci of `pins/pi/package-lock.json`),
 * unmodified, run by the pinned Node in a bubblewrap sandbox that reaches only the capture proxy (Chat
 * Completions, streamed): it reads the buggy file, edits it and stops, scripted by the stand-in engine (a
 * scripted policy, not a model) in Qwen3's tool-call format. Graded in a fresh sandbox: reward 1; every
 * trained token is what the engine sampled.
 */
import { describe, expect, it } from 'vitest';
import { harnessOnOfflineTask } from './__fixtures__/e2e.js';
import { harnessTranscript } from './agent.js';
import { piScript } from './standin.js';

interface PiEvent {
  type: string;
  toolName?: string | undefined;
  isError?: boolean | undefined;
  messages?: Array<{ role: string; content: Array<{ type: string; text?: string | undefined }> }> | undefined;
}

describe('pi in a bubblewrap sandbox, through the capture proxy', () => {
  it('fixes an offline task (reward 1), and every trained token is what the engine sampled', async () => {
    const { run, reward, samples, engineCalls } = await harnessOnOfflineTask('pi', piScript);
    expect(reward).toBe(1);
    expect(samples.every((s) => s.reward === 1)).toBe(true);
    const events = run.events as PiEvent[];
    const tools = events.filter((e) => e.type === 'tool_execution_end');
    expect(tools.map((e) => [e.toolName, e.isError])).toEqual([
      ['read', false],
      ['edit', false],
    ]);
    const end = events.at(-1)!;
    expect(end.type).toBe('agent_end');
    expect(end.messages!.at(-1)).toMatchObject({
      role: 'assistant',
      content: [{ type: 'text', text: 'The bug is fixed.' }],
    });
    expect(harnessTranscript(run)).toHaveLength(2);
    // Three model turns and no other request reached the engine.
    expect(run.turns).toHaveLength(3);
    expect(engineCalls).toBe(3);
  }, 300_000);
});
