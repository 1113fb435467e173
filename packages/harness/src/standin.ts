/**
 * Scripted stand-in policies for the harnesses (a stand-in for a model, never presented as one): each
 * answers a harness's prompt in Qwen3's own `<tool_call>` format, which the capture proxy turns into the
 * harness's dialect, so an unmodified harness fixes a task whose gold patch is known. Claude Code reads
 * the buggy file, edits it and stops (Qwen Code and pi the same with their own tools); Codex applies the
 * fix with one shell command and stops. The conversation so far tells a script where it is (the number of tool results in the prompt).
 *
 * @module @vime/harness/standin
 */
import type { TaskSpec } from '@vime/core';
import type { HarnessKind } from './install.js';

/** A tool call as Qwen3 writes it. */
export const toolCall = (name: string, args: Record<string, unknown>) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

/** The change a stand-in script makes: the file, its changed line before and after, and the gold patch. */
export interface Fix {
  /** Absolute path of the changed file in the sandbox. */
  path: string;
  /** The one changed line, before and after (absent when the gold patch is not a one-line change). */
  old?: string | undefined;
  new?: string | undefined;
  goldPatch: string;
}

/** The one changed line of a single-hunk gold patch (Claude Code's Edit arguments), if it is one. */
export function oneLineFix(
  task: Pick<TaskSpec, 'goldPatch'>,
): { file: string; old: string; new: string } | undefined {
  const patch = task.goldPatch ?? '';
  const file = /^\+\+\+ [ab]\/(.+)$/m.exec(patch)?.[1];
  const removed = patch.split('\n').filter((l) => l.startsWith('-') && !l.startsWith('---'));
  const added = patch.split('\n').filter((l) => l.startsWith('+') && !l.startsWith('+++'));
  if (!file || removed.length !== 1 || added.length !== 1) return undefined;
  return { file, old: removed[0]!.slice(1), new: added[0]!.slice(1) };
}

/** The fix a script applies for `task` (its gold patch), or undefined when the task has none. */
export function fixOf(task: Pick<TaskSpec, 'goldPatch' | 'workdir'>): Fix | undefined {
  if (!task.goldPatch) return undefined;
  const line = oneLineFix(task);
  const file = line?.file ?? /^\+\+\+ [ab]\/(.+)$/m.exec(task.goldPatch)?.[1] ?? '.';
  return { path: `${task.workdir}/${file}`, old: line?.old, new: line?.new, goldPatch: task.goldPatch };
}

/** A scripted policy: the reply to a prompt that already holds `results` tool results. */
export type Script = (results: number, fix: Fix) => string;

const applyGold = (fix: Fix) => `git apply <<'VIME_PATCH'\n${fix.goldPatch}VIME_PATCH`;

/** Claude Code: Read the file, Edit the line (Bash `git apply` when the fix is not one line), stop. */
export const claudeCodeScript: Script = (results, fix) => {
  if (results === 0) return `I will read the file first.\n${toolCall('Read', { file_path: fix.path })}`;
  if (results === 1) {
    return fix.old !== undefined && fix.new !== undefined
      ? toolCall('Edit', { file_path: fix.path, old_string: fix.old, new_string: fix.new })
      : toolCall('Bash', { command: applyGold(fix) });
  }
  return 'The bug is fixed.';
};

/** Codex: one `exec_command` that applies the gold patch, then stop. */
export const codexScript: Script = (results, fix) => {
  if (results === 0) return `I will apply the fix.\n${toolCall('exec_command', { cmd: applyGold(fix) })}`;
  return 'The bug is fixed.';
};

/**
 * Qwen Code: `read_file` the file, `edit` the line (`run_shell_command` `git apply` when the fix is not one
 * line), stop. Its tool names and arguments are the ones it declares in its requests.
 */
export const qwenCodeScript: Script = (results, fix) => {
  if (results === 0) return `I will read the file first.\n${toolCall('read_file', { file_path: fix.path })}`;
  if (results === 1) {
    return fix.old !== undefined && fix.new !== undefined
      ? toolCall('edit', { file_path: fix.path, old_string: fix.old, new_string: fix.new })
      : toolCall('run_shell_command', { command: applyGold(fix) });
  }
  return 'The bug is fixed.';
};

/**
 * pi: `read` the file, `edit` the line (`bash` `git apply` when the fix is not one line), stop. Its edit
 * takes a list of replacements (`edits: [{ oldText, newText }]`), as it declares the tool.
 */
export const piScript: Script = (results, fix) => {
  if (results === 0) return `I will read the file first.\n${toolCall('read', { path: fix.path })}`;
  if (results === 1) {
    return fix.old !== undefined && fix.new !== undefined
      ? toolCall('edit', { path: fix.path, edits: [{ oldText: fix.old, newText: fix.new }] })
      : toolCall('bash', { command: applyGold(fix) });
  }
  return 'The bug is fixed.';
};

/**
 * opencode: `read` the file, `edit` the line (`bash` `git apply` when the fix is not one line), stop. Its
 * tools take camel-case arguments (`filePath`, `oldString`, `newString`), as it declares them.
 */
export const opencodeScript: Script = (results, fix) => {
  if (results === 0) return `I will read the file first.\n${toolCall('read', { filePath: fix.path })}`;
  if (results === 1) {
    return fix.old !== undefined && fix.new !== undefined
      ? toolCall('edit', { filePath: fix.path, oldString: fix.old, newString: fix.new })
      : toolCall('bash', { command: applyGold(fix) });
  }
  return 'The bug is fixed.';
};

/**
 * Gemini CLI: `read_file` the file, `replace` the line (`run_shell_command` `git apply` when the fix is not
 * one line), stop. Its tool names and arguments (`replace` requires an `instruction`) are the ones it
 * declares in its requests.
 */
export const geminiCliScript: Script = (results, fix) => {
  if (results === 0) return `I will read the file first.\n${toolCall('read_file', { file_path: fix.path })}`;
  if (results === 1) {
    return fix.old !== undefined && fix.new !== undefined
      ? toolCall('replace', {
          file_path: fix.path,
          instruction: 'Fix the bug the issue describes.',
          old_string: fix.old,
          new_string: fix.new,
        })
      : toolCall('run_shell_command', { command: applyGold(fix) });
  }
  return 'The bug is fixed.';
};

/** The stand-in script of each harness. */
export const HARNESS_SCRIPTS: Readonly<Record<HarnessKind, Script>> = {
  'claude-code': claudeCodeScript,
  codex: codexScript,
  'qwen-code': qwenCodeScript,
  pi: piScript,
  opencode: opencodeScript,
  'gemini-cli': geminiCliScript,
};

/** Tool results so far in a Qwen3-rendered prompt. */
export const toolResultsIn = (prompt: string) => prompt.split('<tool_response>').length - 1;

/**
 * Which harness sent a Qwen3-rendered prompt, by the tools it declares (Codex's `exec_command`, Qwen
 * Code's `run_shell_command`, pi's `bash`, Claude Code's `Edit`); undefined for a prompt without them (the
 * coding-agent example's own agent).
 */
export function harnessOfPrompt(prompt: string): HarnessKind | undefined {
  if (/"name":\s*"exec_command"/.test(prompt)) return 'codex';
  // Gemini CLI and Qwen Code (its fork) both declare `run_shell_command`; Gemini CLI's `replace` tells them apart.
  if (/"name":\s*"replace"/.test(prompt)) return 'gemini-cli';
  if (/"name":\s*"run_shell_command"/.test(prompt)) return 'qwen-code';
  // opencode's shell tool is `bash` too; its `todowrite` tells it from pi.
  if (/"name":\s*"todowrite"/.test(prompt)) return 'opencode';
  // pi's shell tool is `bash`, lower case (Claude Code's is `Bash`).
  if (/"name":\s*"bash"/.test(prompt)) return 'pi';
  if (/"name":\s*"Edit"/.test(prompt)) return 'claude-code';
  return undefined;
}

/**
 * A stand-in policy for an agent of your own whose shell tool is `tool`, the command in its `argument`
 * (e.g. an AI SDK agent's `bash` / `command`): it looks at the repository, applies the task's gold patch,
 * and stops. It finds the task by the start of its problem statement in the prompt.
 */
export function shellFixPolicy(
  tasks: readonly Pick<TaskSpec, 'prompt' | 'goldPatch' | 'workdir'>[],
  tool: string,
  argument: string,
): (request: { prompt: string }) => string {
  return ({ prompt }) => {
    const task = tasks.find((t) => prompt.includes(t.prompt.slice(0, 200)));
    const fix = task && fixOf(task);
    if (!fix) return 'I cannot find the issue text; I stop.';
    switch (toolResultsIn(prompt)) {
      case 0:
        return `I look at the change set first.\n${toolCall(tool, { [argument]: 'git status --short && ls' })}`;
      case 1:
        return `I apply the fix.\n${toolCall(tool, { [argument]: applyGold(fix) })}`;
      default:
        return 'The fix is in place: the function now handles the case the issue describes.';
    }
  };
}
