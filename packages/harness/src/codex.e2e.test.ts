/**
 * Codex, the real pinned binary, unmodified, in a bubblewrap sandbox that reaches only the capture proxy
 * (the Responses API, streamed, store: false): it runs one shell command that applies the fix and stops,
 * scripted by the stand-in engine in Qwen3's tool-call format. Graded in a fresh sandbox: reward 1; every
 * trained token is what the engine sampled.
 */
import { describe, expect, it } from 'vitest';
import { harnessOnOfflineTask } from './__fixtures__/e2e.js';
import { codexScript } from './standin.js';

describe('codex in a bubblewrap sandbox, through the capture proxy', () => {
  it('fixes an offline task (reward 1), and every trained token is what the engine sampled', async () => {
    const { run, reward, samples, engineCalls } = await harnessOnOfflineTask('codex', codexScript);
    expect(reward).toBe(1);
    expect(samples.every((s) => s.reward === 1)).toBe(true);
    const items = run.events
      .filter((e) => (e as { type: string }).type === 'item.completed')
      .map(
        (e) =>
          (e as { item: { type: string; exit_code?: number | undefined; text?: string | undefined } }).item,
      );
    expect(items.filter((i) => i.type === 'command_execution').map((i) => i.exit_code)).toEqual([0]);
    expect(items.at(-1)).toMatchObject({ type: 'agent_message', text: 'The bug is fixed.' });
    expect(run.events.at(-1)).toMatchObject({ type: 'turn.completed' });
    // Two model turns and no other request reached the engine.
    expect(run.turns).toHaveLength(2);
    expect(engineCalls).toBe(2);
  }, 300_000);
});
