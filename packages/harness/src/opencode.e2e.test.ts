/**
 * opencode, the real pinned platform binary, unmodified, in a bubblewrap sandbox that reaches only the
 * capture proxy (Chat Completions, streamed): it reads the buggy file, edits it and stops, scripted by the
 * stand-in engine (a scripted policy, not a model) in Qwen3's tool-call format. Graded in a fresh sandbox:
 * reward 1; every trained token is what the engine sampled.
 */
import { loadTokenizer } from '@vime/core/engine';
import { describe, expect, it } from 'vitest';
import { harnessOnOfflineTask } from './__fixtures__/e2e.js';
import { qwen3Dir } from './__fixtures__/tokenizer.js';
import { harnessTranscript } from './agent.js';
import { opencodeScript } from './standin.js';

interface OpencodeEvent {
  type: string;
  part: {
    tool?: string | undefined;
    text?: string | undefined;
    reason?: string | undefined;
    state?: { status: string } | undefined;
  };
}

describe('opencode in a bubblewrap sandbox, through the capture proxy', () => {
  it('fixes an offline task (reward 1), and every trained token is what the engine sampled', async () => {
    const { run, reward, samples, engineCalls, task } = await harnessOnOfflineTask(
      'opencode',
      opencodeScript,
    );
    expect(reward).toBe(1);
    // The task's prompt reached the model as written (on stdin; opencode quotes a prompt argument).
    const tokenizer = await loadTokenizer(qwen3Dir());
    const prompt = tokenizer.decode(Array.from(run.turns[0]!.promptIds));
    expect(prompt).toContain(`<|im_start|>user\n${task.prompt}`);
    expect(samples.every((s) => s.reward === 1)).toBe(true);
    const events = run.events as OpencodeEvent[];
    const tools = events.filter((e) => e.type === 'tool_use');
    expect(tools.map((e) => [e.part.tool, e.part.state?.status])).toEqual([
      ['read', 'completed'],
      ['edit', 'completed'],
    ]);
    expect(events.filter((e) => e.type === 'text').at(-1)?.part.text).toBe('The bug is fixed.');
    expect(events.at(-1)).toMatchObject({ type: 'step_finish', part: { reason: 'stop' } });
    expect(harnessTranscript(run)).toHaveLength(2);
    // Three model turns and no other request reached the engine (no title request: the run names it).
    expect(run.turns).toHaveLength(3);
    expect(engineCalls).toBe(3);
  }, 300_000);

  it('a run that answers without a tool sends nothing after its turn', async () => {
    const { run, reward, engineCalls } = await harnessOnOfflineTask('opencode', () => 'Nothing to do.');
    expect(reward).toBe(0);
    expect(run.events.at(-1)).toMatchObject({ type: 'step_finish', part: { reason: 'stop' } });
    expect(run.turns).toHaveLength(1);
    expect(engineCalls).toBe(1);
  }, 300_000);
});
