/**
 * Claude Code, the real pinned binary, runs a subagent: the stand-in engine (a scripted policy, not a
 * model) calls the `Agent` tool (Claude Code's Task tool, `--tools` with `Agent`), and Claude Code runs the
 * subagent's own conversation through the proxy, in the background (its default), while the main thread goes
 * on; the subagent reads the file and reports, and once Claude Code hands the report back (a
 * `<task-notification>` message) the main thread edits the line and stops.
 *
 * What Claude Code sends (recorded against the proxy): every request of both conversations on the one
 * session key and `x-claude-code-session-id`, with nothing that names a thread. The subagent's requests have
 * their own system prompt (its first block `x-anthropic-billing-header: …; cc_is_subagent=true;`, then the
 * subagent's instructions) and their own first user message (the task prompt), and its turns run while the
 * main thread's do: the proxy tells them apart by the opening (system prompt and first message), so the
 * subagent is a thread of its own, parent 0.
 */
import { describe, expect, it } from 'vitest';
import { harnessOnOfflineTask } from './__fixtures__/e2e.js';
import { CLAUDE_CODE_TOOLS } from './adapters.js';
import { claudeCodeScript, type Fix, toolCall, toolResultsIn } from './standin.js';

/** How a subagent's system prompt marks it, and how Claude Code hands its report back. */
const SUBAGENT = 'cc_is_subagent=true';
const REPORT = '<task-notification>';
const TASK = 'Find the line that causes the bug';

/** How long the main thread's waiting turn holds its answer for the subagent's first request. */
const HOLD_MS = 60_000;

/**
 * The stand-in's script for both conversations. The main thread's turn after the launch holds its answer
 * until the subagent's first request has come (at most `HOLD_MS`), so two requests of the session are in
 * flight at once.
 */
function subagentPolicy(): (prompt: string, fix: Fix) => Promise<string> {
  let arrived: () => void = () => {};
  const subagentStarted = new Promise<void>((resolve) => {
    arrived = resolve;
  });
  return async (prompt, fix) => reply(prompt, fix, subagentStarted, arrived);
}

async function reply(prompt: string, fix: Fix, subagentStarted: Promise<void>, arrived: () => void) {
  if (prompt.includes(SUBAGENT)) {
    arrived();
    return toolResultsIn(prompt) === 0
      ? `I read the file.\n${toolCall('Read', { file_path: fix.path })}`
      : `The line to change in ${fix.path} is \`${fix.old?.trim()}\`.`;
  }
  if (toolResultsIn(prompt) === 0) {
    return toolCall('Agent', {
      description: 'find the buggy line',
      prompt: `${TASK} in ${fix.path}, and report it.`,
      subagent_type: 'general-purpose',
    });
  }
  const report = prompt.indexOf(REPORT);
  if (report < 0) {
    await Promise.race([subagentStarted, new Promise((resolve) => setTimeout(resolve, HOLD_MS).unref())]);
    return 'I wait for the report of the agent.';
  }
  return /"name":\s*"Edit"/.test(prompt.slice(report)) ? 'The bug is fixed.' : claudeCodeScript(1, fix);
}

interface Lineage {
  thread: number;
  parent: number | null;
  threads: number;
}

describe('claude-code runs a subagent, through the capture proxy', () => {
  it('the subagent is a thread of its own; each sampled token trained once, every row the reward', async () => {
    const { run, reward, samples, sampledTokens, captured, engineCalls } = await harnessOnOfflineTask(
      'claude-code',
      claudeCodeScript,
      'bubblewrap',
      { policy: subagentPolicy(), tools: [...CLAUDE_CODE_TOOLS, 'Agent'] },
    );
    expect(reward).toBe(1);
    expect(run.events.at(-1)).toMatchObject({ type: 'result', is_error: false, result: 'The bug is fixed.' });
    const sessionId = captured[0]!.trajectoryId;
    const main = samples.filter((s) => s.session_id === sessionId);
    const sub = samples.filter((s) => s.session_id === `${sessionId}/1`);
    expect(main.length + sub.length).toBe(samples.length);
    // The subagent's two turns (Read, report) are its own thread; the main thread's stay one row.
    expect(captured.filter((c) => c.trajectoryId === `${sessionId}/1`)).toHaveLength(2);
    expect(sub).toHaveLength(1);
    expect(sub[0]!.metadata.lineage).toMatchObject({ thread: 1, parent: 0, threads: 2 });
    expect(sub[0]!.prompt).toContain(SUBAGENT);
    expect(sub[0]!.prompt).toContain(TASK);
    expect(main).toHaveLength(1);
    expect((main[0]!.metadata.lineage as Lineage).thread).toBe(0);
    expect(main[0]!.prompt).not.toContain(SUBAGENT);
    expect(main[0]!.metadata.drift).toMatchObject({ forks: 0, realigns: 0 });
    // Parallel: the main thread's turn after the launch was in flight when the subagent's first turn began.
    const mainTurns = captured.filter((c) => c.trajectoryId === sessionId).map((c) => c.turn);
    const subFirst = captured.find((c) => c.trajectoryId === `${sessionId}/1`)!.turn;
    expect(mainTurns).toHaveLength(4);
    expect(mainTurns[1]!.startedAt).toBeLessThan(subFirst.startedAt);
    expect(mainTurns[1]!.endedAt, 'the waiting turn was answered before the subagent asked').toBeGreaterThan(
      subFirst.startedAt,
    );
    // The main thread saw the subagent's report, then edited.
    expect(main[0]!.response).toContain(REPORT);
    expect(main[0]!.response).toContain('The bug is fixed.');
    // Exactly once: the tokens trained over all rows are every token the engine sampled.
    const trained = samples.reduce((n, s) => n + s.loss_mask!.reduce((a, m) => a + m, 0), 0);
    expect(trained).toBe(sampledTokens);
    expect(captured).toHaveLength(engineCalls);
    // The reward rule: every row of every thread carries the rollout's whole reward.
    expect(samples.map((s) => s.reward)).toEqual(samples.map(() => 1));
    expect(samples.every((s) => s.metadata.rollout_reward === 1 && s.metadata.reward_split === 'copy')).toBe(
      true,
    );
    expect(new Set(samples.map((s) => s.rollout_id)).size).toBe(1);
  }, 300_000);
});
