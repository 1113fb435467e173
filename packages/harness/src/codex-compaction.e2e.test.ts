/**
 * Codex, the real pinned binary, compacts its conversation: `model_auto_compact_token_limit = 12000` in its
 * `config.toml` (with `model_context_window = 100000`) makes it summarise after a few commands, then go on
 * from the summary. The stand-in engine (a scripted policy, not a model) prints the file until Codex asks
 * for the summary, writes one, then applies the fix from the continued conversation and stops.
 *
 * What Codex sends (recorded against the proxy): for a provider of its own (not OpenAI's) it compacts
 * locally, with no `/responses/compact` call: the summary request is the history with one more user message
 * ("You are performing a CONTEXT CHECKPOINT COMPACTION. …") and no tools, so its prompt does not extend the
 * last turn. The continuation keeps the opening (instructions, environment, the task) and puts the summary
 * in a user message ("Another language model started to solve this problem …") after the task. Both keep
 * the session's opening, so both are new rows (forks) of the first thread, never a re-tokenised stitch.
 */
import { describe, expect, it } from 'vitest';
import { harnessOnOfflineTask } from './__fixtures__/e2e.js';
import { codexScript, type Fix, toolCall, toolResultsIn } from './standin.js';

const SUMMARY_ASK = 'You are performing a CONTEXT CHECKPOINT COMPACTION';
const CONTINUED = 'Another language model started to solve this problem';
const SUMMARY = 'Summary: the file was printed; the fix is still to be applied.';
/** Commands before the script gives up waiting for a compaction (then the test fails on its assertions). */
const MAX_READS = 12;

function compactionPolicy(prompt: string, fix: Fix): string {
  const lastUser = prompt.slice(prompt.lastIndexOf('<|im_start|>user'));
  if (lastUser.includes(SUMMARY_ASK)) return SUMMARY;
  const continued = prompt.indexOf(CONTINUED);
  if (continued >= 0) return codexScript(toolResultsIn(prompt.slice(continued)), fix);
  if (toolResultsIn(prompt) < MAX_READS)
    return `I print the file.\n${toolCall('exec_command', { cmd: `cat ${fix.path}` })}`;
  return 'No compaction came.';
}

describe('codex compacts its conversation, through the capture proxy', () => {
  it('the summary and the continued conversation are new rows; each sampled token trained once, every row the reward', async () => {
    const { run, reward, samples, sampledTokens, captured } = await harnessOnOfflineTask(
      'codex',
      codexScript,
      'bubblewrap',
      {
        policy: compactionPolicy,
        codexConfig: { model_context_window: 100_000, model_auto_compact_token_limit: 12_000 },
      },
    );
    expect(reward).toBe(1);
    expect(run.events.some((e) => (e as { type?: string }).type === 'turn.completed')).toBe(true);
    // One thread: the opening never changed.
    const sessionId = captured[0]!.trajectoryId;
    expect(new Set(captured.map((c) => c.trajectoryId))).toEqual(new Set([sessionId]));
    expect(samples).toHaveLength(3);
    const [before, summary, after] = samples;
    expect(samples.map((s) => s.metadata.trajectory_row)).toEqual([0, 1, 2]);
    expect(before!.metadata.drift).toMatchObject({ forks: 2, realigns: 0 });
    expect((before!.metadata.trajectory_turns as number[]).length).toBeGreaterThanOrEqual(2);
    // The summary row: one turn, prompted with the compaction request, answering the summary.
    expect(summary!.metadata.trajectory_turns).toHaveLength(1);
    expect(summary!.prompt).toContain(SUMMARY_ASK);
    expect(summary!.response).toContain(SUMMARY);
    // The continued conversation: opens with the summary, applies the fix, stops.
    expect(after!.prompt).toContain(CONTINUED);
    expect(after!.prompt).toContain(SUMMARY);
    expect(after!.prompt).not.toContain(SUMMARY_ASK);
    expect(after!.response).toContain('The bug is fixed.');
    // Exactly once: the tokens trained over all rows are every token the engine sampled.
    const trained = samples.reduce((n, s) => n + s.loss_mask!.reduce((a, m) => a + m, 0), 0);
    expect(trained).toBe(sampledTokens);
    // The reward rule: every row carries the rollout's whole reward.
    expect(samples.map((s) => s.reward)).toEqual([1, 1, 1]);
    expect(samples.every((s) => s.metadata.rollout_reward === 1 && s.metadata.reward_split === 'copy')).toBe(
      true,
    );
  }, 300_000);
});
