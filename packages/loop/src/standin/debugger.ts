/**
 * A scripted debugger for the stand-in engine: a procedure, not answers. It acts only on what an agent
 * sees in the conversation (the issue and its own commands' output): it reproduces the failure the issue
 * quotes (`f(args) returned X, expected Y`), opens the file the issue names, then tries one small edit at a
 * time by fixed heuristics (flip a comparison, swap `+` and `-`, drop a `± 1`), re-running its
 * reproduction after each, and submits when it passes or when the heuristics run out. It never sees a gold
 * patch or the hidden tests' source. The heuristics are right for some bugs (a flipped comparison, `+`/`-`
 * exchanged, an added `± 1`) and wrong or incomplete for others (a wrong constant, swapped arguments, a
 * missing branch, a dropped `+ 1`). A scripted policy, not a model. Stateless: the prompt tells it where
 * it is.
 */
import { ACTION_FENCE, SUBMIT_SENTINEL } from '@vime/harness';

/** Most edits it tries before it gives up. */
export const DEBUGGER_MAX_TRIES = 8;

const reply = (thought: string, command: string) =>
  `THOUGHT: ${thought}\n\n\`\`\`${ACTION_FENCE}\n${command}\n\`\`\``;

/** What the issue says: the function (`pkg.module.name`) and a failing call with its expected result. */
export interface IssueFacts {
  module: string;
  name: string;
  file: string;
  /** The first quoted failure `name(args) returned actual, expected value`, when the issue has one. */
  failure?: { args: string; expected: string } | undefined;
}

/** Read the function and the first failing call from the issue text (undefined when it names none). */
export function issueFacts(prompt: string): IssueFacts | undefined {
  const issue = /<issue>([\s\S]*?)<\/issue>/.exec(prompt)?.[1] ?? prompt;
  const named = /`([A-Za-z_][\w.]*)\.([A-Za-z_]\w*)`/.exec(issue);
  if (!named) return undefined;
  const [, module, name] = named as unknown as [string, string, string];
  const failed = new RegExp(`AssertionError: ${name}\\((.*)\\) returned .*, expected (.*)$`, 'm').exec(issue);
  return {
    module,
    name,
    file: `${module.replace(/\./g, '/')}.py`,
    failure: failed ? { args: failed[1]!, expected: failed[2]!.trim() } : undefined,
  };
}

/** One edit: on `line` of the file, the first `from` becomes `to`. */
export interface Edit {
  line: number;
  from: string;
  to: string;
}

const FLIPS: ReadonlyArray<[string, string]> = [
  [' <= ', ' < '],
  [' >= ', ' > '],
  [' < ', ' <= '],
  [' > ', ' >= '],
  [' == ', ' != '],
  [' != ', ' == '],
];
const SWAPS: ReadonlyArray<[string, string]> = [
  [' + ', ' - '],
  [' - ', ' + '],
];
const DROPS: ReadonlyArray<[string, string]> = [
  [' - 1', ''],
  [' + 1', ''],
];

/**
 * The edits to try, in order, for function `name` in a `nl -ba` listing of its file: comparison flips,
 * then `+`/`-` swaps, then dropped `± 1`s, each line of the function top to bottom.
 */
export function candidateEdits(listing: string, name: string): Edit[] {
  const lines = [...listing.matchAll(/^\s*(\d+)\t(.*)$/gm)].map((m) => ({ n: Number(m[1]), text: m[2]! }));
  const start = lines.findIndex((l) => l.text.startsWith(`def ${name}(`));
  if (start < 0) return [];
  const body: typeof lines = [];
  for (const l of lines.slice(start + 1)) {
    if (/^\S/.test(l.text)) break;
    if (!/^\s*(#|"""|$)/.test(l.text)) body.push(l);
  }
  const edits: Edit[] = [];
  for (const rules of [FLIPS, SWAPS, DROPS])
    for (const l of body)
      for (const [from, to] of rules) if (l.text.includes(from)) edits.push({ line: l.n, from, to });
  return edits.slice(0, DEBUGGER_MAX_TRIES);
}

/** The reproduction of the quoted failure: exits 0 when the call returns what the test expects. */
function reproduction(facts: IssueFacts): string {
  const { module, name, failure } = facts;
  return `python3 - <<'VIME_REPRO'
from ${module} import ${name}
actual = ${name}(${failure!.args})
print("${name} returned", repr(actual), "- expected", repr(${failure!.expected}))
raise SystemExit(0 if actual == ${failure!.expected} else 1)
VIME_REPRO`;
}

/** The outputs of the agent's commands so far, in order, with their return codes. */
function observations(prompt: string): Array<{ code: number; output: string }> {
  return [...prompt.matchAll(/<returncode>(-?\d+)<\/returncode>\s*<output>\n?([\s\S]*?)<\/output>/g)].map(
    (m) => ({
      code: Number(m[1]),
      output: m[2]!,
    }),
  );
}

/** The scripted debugger (not a model): reproduce, open the file, try heuristic edits, submit. */
export function debuggerPolicy() {
  return (prompt: string): string => {
    const facts = issueFacts(prompt);
    if (!facts?.failure)
      return reply(
        'The issue quotes no failing call I can reproduce; I submit without changes.',
        `echo ${SUBMIT_SENTINEL}`,
      );
    const seen = observations(prompt);
    if (seen.length === 0)
      return reply(`First I reproduce the failure the issue quotes for ${facts.name}.`, reproduction(facts));
    if (seen.length === 1)
      return reply(`The issue names ${facts.module}; let me read ${facts.file}.`, `nl -ba ${facts.file}`);
    const tries = (prompt.match(/# try \d+/g) ?? []).length;
    if (tries > 0 && seen.at(-1)!.code === 0)
      return reply('The reproduction passes now. I am done.', `echo ${SUBMIT_SENTINEL}`);
    const edits = candidateEdits(seen[1]!.output, facts.name);
    const edit = edits[tries];
    if (!edit)
      return reply(
        'None of my usual fixes made the reproduction pass; I stop here.',
        `echo ${SUBMIT_SENTINEL}`,
      );
    const sed = `${edit.line}s/${edit.from}/${edit.to}/`;
    return reply(
      `${tries === 0 ? 'The reproduction fails.' : 'That edit did not help; I undo it.'} I try changing "${edit.from.trim()}" to "${edit.to.trim() || 'nothing'}" on line ${edit.line}, then run the reproduction again.`,
      `# try ${tries + 1}\ngit checkout -q -- ${facts.file} && sed -i '${sed}' ${facts.file} && ${reproduction(facts)}`,
    );
  };
}
