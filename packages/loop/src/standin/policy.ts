/**
 * The stand-in engine's scripted coding policy: a stand-in for a model, never presented as one.
 * Per rollout it explores the repository, then applies the gold fix, a wrong fix, or malformed output
 * with configurable odds (so groups get mixed rewards), then submits. Prompts of Claude Code and Codex get
 * the harness scripts of `@vime/harness/standin` (tool calls in Qwen3's format that apply the gold fix). It is stateless: the conversation so
 * far (the prompt text the engine receives) tells it where it is.
 */
import { seededRandom } from '@vime/core/utils';
import { ACTION_FENCE, SUBMIT_SENTINEL } from '@vime/harness';
import { fixOf, HARNESS_SCRIPTS, harnessOfPrompt, toolResultsIn } from '@vime/harness/standin';

/** A task as the stand-in policy knows it: how to find it in a prompt, its gold patch and its folder. */
export interface PolicyTask {
  /** Text that identifies the task inside the prompt (its problem statement). */
  problemStatement: string;
  goldPatch: string;
  /** The repository's folder in the sandbox (where a harness script edits). */
  workdir: string;
}

/** How often the stand-in policy applies the gold fix, a wrong fix or malformed output. */
export interface PolicyOdds {
  gold: number;
  wrong: number;
  malformed: number;
}

/** The stand-in policy's default odds. */
export const defaultOdds: PolicyOdds = { gold: 0.5, wrong: 0.35, malformed: 0.15 };

const reply = (thought: string, command: string) =>
  `THOUGHT: ${thought}\n\n\`\`\`${ACTION_FENCE}\n${command}\n\`\`\``;

/** Files a unified diff touches (`+++ b/<path>`). */
export function patchedFiles(patch: string): string[] {
  return [...patch.matchAll(/^\+\+\+ b\/(.+)$/gm)].map((m) => m[1]!.trim());
}

/** The stand-in engine's scripted coding policy (not a model): explores, then fixes or not, then submits. */
export function codingAgentPolicy(
  tasks: PolicyTask[],
  options: { odds?: PolicyOdds | undefined; seed?: number | undefined } = {},
) {
  const odds = options.odds ?? defaultOdds;
  const random = seededRandom(options.seed ?? 1);
  return (promptText: string): string => {
    const task = tasks.find((t) => promptText.includes(t.problemStatement.slice(0, 200)));
    // Claude Code and Codex (known by the tools they declare): the harness scripts, which apply the gold fix.
    const harness = harnessOfPrompt(promptText);
    if (harness) {
      const fix = task && fixOf(task);
      return fix
        ? HARNESS_SCRIPTS[harness](toolResultsIn(promptText), fix)
        : 'I cannot find the issue text; I stop.';
    }
    if (!task)
      return reply('I cannot find the issue text; I will submit without changes.', `echo ${SUBMIT_SENTINEL}`);
    const file = patchedFiles(task.goldPatch)[0] ?? '.';
    const observations = promptText.split('<returncode>').length - 1;
    const fixed = promptText.includes('VIME_PATCH') || promptText.includes('# reviewed: edge cases');
    if (observations === 0)
      return reply(
        'First I look at the layout of the repository.',
        'ls -R . | grep -v "^\\./\\.git" | head -60',
      );
    if (observations === 1)
      return reply(`The issue points at ${file}; let me read it.`, `nl -ba ${file} | sed -n '1,120p'`);
    if (!fixed) {
      const r = random() * (odds.gold + odds.wrong + odds.malformed);
      if (r < odds.gold) {
        return reply(
          'I see the bug. I will fix it with a patch.',
          `cat <<'VIME_PATCH' > /tmp/fix.patch\n${task.goldPatch.trimEnd()}\nVIME_PATCH\ngit apply /tmp/fix.patch && git diff --stat`,
        );
      }
      if (r < odds.gold + odds.wrong) {
        return reply(
          'I think the problem is an unhandled edge case; I will mark the function for review.',
          `sed -i '1i # reviewed: edge cases' ${file} && git diff --stat`,
        );
      }
      return 'I believe the fix is straightforward, so I will just describe it: change the comparison in the function.';
    }
    return reply('The change is in place. I am done.', `echo ${SUBMIT_SENTINEL}`);
  };
}
