/**
 * Qwen Code, the real pinned package, unmodified, run by the pinned Node in a bubblewrap sandbox that
 * reaches only the capture proxy (Chat Completions, streamed): it reads the buggy file, edits it and
 * stops, scripted by the stand-in engine (a scripted policy, not a model) in Qwen3's tool-call format.
 * Graded in a fresh sandbox: reward 1; every trained token is what the engine sampled.
 */
import { describe, expect, it } from 'vitest';
import { harnessOnOfflineTask } from './__fixtures__/e2e.js';
import { harnessTranscript } from './agent.js';
import { qwenCodeScript } from './standin.js';

describe('qwen-code in a bubblewrap sandbox, through the capture proxy', () => {
  it('fixes an offline task (reward 1), and every trained token is what the engine sampled', async () => {
    const { run, reward, samples, engineCalls } = await harnessOnOfflineTask('qwen-code', qwenCodeScript);
    expect(reward).toBe(1);
    expect(samples.every((s) => s.reward === 1)).toBe(true);
    expect(run.events.at(-1)).toMatchObject({ type: 'result', is_error: false, result: 'The bug is fixed.' });
    const uses = run.events.flatMap((e) => {
      const event = e as {
        type: string;
        message?: { content?: Array<{ type: string; name?: string | undefined }> | undefined } | undefined;
      };
      return event.type === 'assistant' && Array.isArray(event.message?.content)
        ? event.message.content.filter((b) => b.type === 'tool_use').map((b) => b.name)
        : [];
    });
    expect(uses).toEqual(['read_file', 'edit']);
    expect(harnessTranscript(run)).toHaveLength(2);
    // Three model turns and no other request reached the engine.
    expect(run.turns).toHaveLength(3);
    expect(engineCalls).toBe(3);
  }, 300_000);

  it('a run that answers without a tool sends nothing after its turn (no memory extraction)', async () => {
    // Qwen Code schedules its memory-extraction subagent when a user query's turn ends without tool
    // calls; QWEN_CODE_SETTINGS turns it off, so the one turn is the only request.
    const { run, reward, engineCalls } = await harnessOnOfflineTask('qwen-code', () => 'Nothing to do.');
    expect(reward).toBe(0);
    expect(run.events.at(-1)).toMatchObject({ type: 'result', is_error: false, result: 'Nothing to do.' });
    expect(run.turns).toHaveLength(1);
    expect(engineCalls).toBe(1);
  }, 300_000);
});
