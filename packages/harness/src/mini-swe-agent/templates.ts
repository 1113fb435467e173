/**
 * The agent's prompts, in our own words, following mini-swe-agent's text-based protocol:
 * one fenced `mswea_bash_command` block per reply, a fresh shell per action, and a submit sentinel.
 */

export const SUBMIT_SENTINEL = 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT';
/** The code fence mini-swe-agent's actions are written in. */
export const ACTION_FENCE = 'mswea_bash_command';
/** Outputs at or above this many characters are shown as head + tail. */
export const OBSERVATION_LIMIT = 10_000;

export const systemTemplate = `You are a careful software engineer working in a Linux shell on a code repository.

Every reply has two parts:
1. THOUGHT: a short explanation of what you will do next and why.
2. Exactly one shell command in a fenced block tagged ${ACTION_FENCE}, like this:

<format_example>
THOUGHT: I want to see which files the package contains.

\`\`\`${ACTION_FENCE}
ls -la src/
\`\`\`
</format_example>

Reply with exactly one such block. Chain steps with && or || if you need several in one action.`;

export function instanceTemplate(vars: {
  task: string;
  system: string;
  release: string;
  machine: string;
}): string {
  return `Fix the following issue in the repository in the current directory:

<issue>
${vars.task}
</issue>

Suggested workflow:
1. Find and read the code involved.
2. Reproduce the problem with a small script if that helps.
3. Edit the source to fix it (not the tests).
4. Check your fix.
5. When you are done, submit with this command on its own:
   echo ${SUBMIT_SENTINEL}
   You cannot change anything after submitting.

Rules:
- One action per reply, in one \`\`\`${ACTION_FENCE} block.
- Each action runs in a new shell: \`cd\` and exported variables do not carry over; prefix commands with \`cd dir &&\` where needed.
- Useful edits: \`sed -i 's/old/new/' file\`, or write a whole file with a here-document (cat <<'EOF' > file ... EOF).
- View part of a file with \`nl -ba file | sed -n '10,40p'\`.

Environment: ${vars.system} ${vars.release} ${vars.machine}`;
}

export function observationTemplate(result: {
  exitCode: number | null;
  output: string;
  exception?: string | undefined;
}): string {
  const parts: string[] = [];
  if (result.exception) parts.push(`<exception>${result.exception}</exception>`);
  parts.push(`<returncode>${result.exitCode ?? -1}</returncode>`);
  const out = result.output;
  if (out.length < OBSERVATION_LIMIT) {
    parts.push(`<output>\n${out}</output>`);
  } else {
    const half = OBSERVATION_LIMIT / 2;
    parts.push(
      '<warning>\nThe output was too long; only its beginning and end are shown. Narrow the command down (grep, head, sed -n) to see the rest.\n</warning>',
      `<output_head>\n${out.slice(0, half)}\n</output_head>`,
      `<elided_chars>\n${out.length - OBSERVATION_LIMIT} characters elided\n</elided_chars>`,
      `<output_tail>\n${out.slice(-half)}\n</output_tail>`,
    );
  }
  return parts.join('\n');
}

export function formatErrorTemplate(found: number, finishReason: string | null): string {
  const cause =
    finishReason === 'length'
      ? 'Your reply was cut off because it reached the output token limit. Keep replies short.'
      : `Expected exactly 1 action, found ${found}.`;
  return `Format error: ${cause}

Every reply must contain a THOUGHT and exactly one fenced block tagged ${ACTION_FENCE}. To finish, run:

\`\`\`${ACTION_FENCE}
echo ${SUBMIT_SENTINEL}
\`\`\``;
}
