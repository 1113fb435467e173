/**
 * Claude Code, the real pinned binary, compacts its conversation: a small auto-compact threshold
 * (`CLAUDE_CODE_AUTO_COMPACT_WINDOW` at its 100k minimum, `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=10`: compact
 * past 10% of the window less its 20k output reserve, 8,000 tokens) makes it summarise after a few reads,
 * then go on from the summary. The stand-in engine (a scripted policy, not a model) reads the file until
 * Claude Code asks for the summary, writes one, then edits the line from the continued conversation.
 *
 * What Claude Code sends (recorded against the proxy): the summary request is the conversation as it was,
 * its last user message (the tool result) carrying the compaction instructions as one more text block, so
 * its prompt does not extend the last turn: a new row of the first thread (a fork, never a re-tokenised
 * stitch). The continuation is a fresh conversation (a first user message that starts "This session is being
 * continued from a previous conversation", the summary, and the last messages kept verbatim; the system
 * prompt's `cc_version` hash changes with it): a new thread of the session, parent 0.
 */
import { describe, expect, it } from 'vitest';
import { harnessOnOfflineTask } from './__fixtures__/e2e.js';
import { CLAUDE_CODE_TOOLS } from './adapters.js';
import { claudeCodeScript, type Fix, toolCall, toolResultsIn } from './standin.js';

/** What Claude Code's compaction prompt asks for, and how its continued conversation opens. */
const SUMMARY_ASK = 'Your task is to create a detailed summary of the conversation so far';
const CONTINUED = 'This session is being continued from a previous conversation';
/** Reads before the script gives up waiting for a compaction (then the test fails on its assertions). */
const MAX_READS = 12;

/** The stand-in's script: read until asked to summarise, summarise, then edit the line and stop. */
function compactionPolicy(prompt: string, fix: Fix): string {
  const lastUser = prompt.slice(prompt.lastIndexOf('<|im_start|>user'));
  if (lastUser.includes(SUMMARY_ASK)) {
    return `<analysis>\nThe user asked to fix a bug; the file was read several times.\n</analysis>\n<summary>\n1. Primary Request and Intent: fix the bug in ${fix.path}.\n2. Files and Code Sections: ${fix.path}, the line \`${fix.old?.trim()}\` is wrong.\n3. Pending Tasks: edit that line.\n</summary>`;
  }
  const continued = prompt.indexOf(CONTINUED);
  if (continued >= 0) {
    const edited = /"name":\s*"Edit"/.test(prompt.slice(continued));
    return edited ? 'The bug is fixed.' : claudeCodeScript(1, fix);
  }
  if (toolResultsIn(prompt) < MAX_READS)
    return `I read the file again.\n${toolCall('Read', { file_path: fix.path })}`;
  return 'No compaction came.';
}

interface Lineage {
  thread: number;
  parent: number | null;
  threads: number;
}

describe('claude-code compacts its conversation, through the capture proxy', () => {
  it('the summary is a new row, the continued conversation a thread of its own; each sampled token trained once, every row the reward', async () => {
    const { run, reward, samples, sampledTokens, captured } = await harnessOnOfflineTask(
      'claude-code',
      claudeCodeScript,
      'bubblewrap',
      {
        policy: compactionPolicy,
        env: { CLAUDE_CODE_AUTO_COMPACT_WINDOW: '100000', CLAUDE_AUTOCOMPACT_PCT_OVERRIDE: '10' },
        tools: CLAUDE_CODE_TOOLS,
      },
    );
    expect(reward).toBe(1);
    expect(run.events.at(-1)).toMatchObject({ type: 'result', is_error: false, result: 'The bug is fixed.' });
    const sessionId = captured[0]!.trajectoryId;
    // One summary turn, in the first thread; the continuation in thread 1.
    const summaries = samples.filter((s) => s.response.includes('<summary>'));
    expect(summaries).toHaveLength(1);
    const summary = summaries[0]!;
    expect(summary.session_id).toBe(sessionId);
    expect((summary.metadata.lineage as Lineage).thread).toBe(0);
    // The summary's prompt is not the last turn's extended: packing forked a new row for it.
    expect(summary.metadata.trajectory_row).toBe(1);
    expect(summary.metadata.drift).toMatchObject({ forks: 1, realigns: 0 });
    const continued = samples.filter((s) => s.session_id === `${sessionId}/1`);
    expect(continued).toHaveLength(1);
    expect(continued[0]!.metadata.lineage).toMatchObject({ thread: 1, parent: 0, threads: 2 });
    expect(continued[0]!.prompt).toContain(CONTINUED);
    expect(continued[0]!.response).toContain('The bug is fixed.');
    expect(samples.map((s) => s.session_id)).toEqual([sessionId, sessionId, `${sessionId}/1`]);
    expect(captured.filter((c) => c.trajectoryId === `${sessionId}/1`).length).toBeGreaterThanOrEqual(2);
    // Exactly once: the tokens trained over all rows are every token the engine sampled.
    const trained = samples.reduce((n, s) => n + s.loss_mask!.reduce((a, m) => a + m, 0), 0);
    expect(trained).toBe(sampledTokens);
    // The reward rule: every row of every thread carries the rollout's whole reward.
    expect(samples.map((s) => s.reward)).toEqual(samples.map(() => 1));
    expect(samples.every((s) => s.metadata.rollout_reward === 1 && s.metadata.reward_split === 'copy')).toBe(
      true,
    );
  }, 300_000);
});
