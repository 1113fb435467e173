/**
 * Gemini CLI, the real pinned package, unmodified, run by the pinned Node in a bubblewrap sandbox that
 * reaches only the capture proxy through its Gemini API route (`streamGenerateContent`, SSE): it reads
 * the buggy file, edits it and stops, scripted by the stand-in engine (a scripted policy, not a model) in
 * Qwen3's tool-call format, which the proxy turns into `functionCall` parts. Graded in a fresh sandbox:
 * reward 1; every trained token is what the engine sampled.
 */
import { describe, expect, it } from 'vitest';
import { harnessOnOfflineTask } from './__fixtures__/e2e.js';
import { harnessTranscript } from './agent.js';
import { geminiCliScript, oneLineFix } from './standin.js';

interface GeminiEvent {
  type: string;
  tool_name?: string | undefined;
  status?: string | undefined;
  role?: string | undefined;
  content?: string | undefined;
}

describe('gemini-cli in a bubblewrap sandbox, through the capture proxy', () => {
  it('fixes an offline task (reward 1), and every trained token is what the engine sampled', async () => {
    const { run, reward, samples, engineCalls, task } = await harnessOnOfflineTask(
      'gemini-cli',
      geminiCliScript,
    );
    expect(reward).toBe(1);
    expect(samples.every((s) => s.reward === 1)).toBe(true);
    const events = run.events as GeminiEvent[];
    expect(events.filter((e) => e.type === 'tool_result').map((e) => e.status)).toEqual([
      'success',
      'success',
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'result', status: 'success' });
    expect(events.filter((e) => e.type === 'tool_use').map((e) => e.tool_name)).toEqual([
      'read_file',
      'replace',
    ]);
    expect(harnessTranscript(run)).toEqual([
      `read_file {"file_path":"${task.workdir}/${oneLineFix(task)!.file}"}`,
      expect.stringMatching(/^replace \{"file_path":/),
    ]);
    // Three model turns and no other request reached the engine.
    expect(run.turns).toHaveLength(3);
    expect(engineCalls).toBe(3);
  }, 300_000);

  it('a run that answers without a tool sends nothing after its turn', async () => {
    // No next-speaker check, loop detection or summary after the answer: the one turn is the only request.
    const { run, reward, engineCalls } = await harnessOnOfflineTask('gemini-cli', () => 'Nothing to do.');
    expect(reward).toBe(0);
    expect(run.events.at(-1)).toMatchObject({ type: 'result', status: 'success' });
    expect(run.turns).toHaveLength(1);
    expect(engineCalls).toBe(1);
  }, 300_000);
});
