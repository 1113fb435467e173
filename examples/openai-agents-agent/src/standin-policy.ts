/**
 * A scripted stand-in for the policy (not a model): it answers the coding agent's prompts in Qwen3's
 * `<tool_call>` format, which the capture proxy turns into tool calls of the wire the agent speaks (Chat
 * Completions or Responses). It looks at the repository with one `exec_command` call, applies the task's
 * gold patch with a second, and stops. The conversation so far (the number of tool results in the
 * prompt) tells it where it is.
 */
import type { StandInRequest } from '@vime/core/standin';
import { fixOf, toolCall, toolResultsIn } from '@vime/harness/standin';

/** A task the stand-in knows: text that identifies it in a prompt, its gold patch and its folder. */
export interface ScriptedTask {
  prompt: string;
  goldPatch?: string | undefined;
  workdir: string;
}

/** The stand-in's reply to one prompt of the coding agent. */
export function scriptedFix(tasks: readonly ScriptedTask[]): (request: StandInRequest) => string {
  return ({ prompt }) => {
    const task = tasks.find((t) => prompt.includes(t.prompt.slice(0, 200)));
    const fix = task && fixOf(task);
    if (!fix) return 'I cannot find the issue text; I stop.';
    switch (toolResultsIn(prompt)) {
      case 0:
        return `I look at the change set first.\n${toolCall('exec_command', { cmd: 'git status --short && ls' })}`;
      case 1:
        return `I apply the fix.\n${toolCall('exec_command', { cmd: `git apply <<'VIME_PATCH'\n${fix.goldPatch}VIME_PATCH` })}`;
      default:
        return 'The fix is in place: the function now handles the case the issue describes.';
    }
  };
}
