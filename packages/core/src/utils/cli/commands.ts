/**
 * Subcommands: a program is a list of commands (`plan`, or a two-word `skypilot render`), each with its
 * own `--help` and its own flags. `runProgram` finds the command, answers help, and points a mistyped
 * command at the closest one.
 */
import { closest, didYouMean } from './did-you-mean.js';
import { wantsHelp } from './flags.js';
import { type CliIo, EXIT } from './io.js';
import { UsageError } from './values.js';

/** One command of a CLI: its name, flags, summary and what it runs. */
export interface Command {
  /** As typed: `plan`, or two words for a command of a group (`skypilot render`). */
  name: string;
  /** The name with its arguments, for the command list in the program's help (default: the name). */
  synopsis?: string | undefined;
  /** One line for the command list. */
  summary: string;
  /** The whole text of `<program> <name> --help`; starts with `Usage: <program> <name>`. */
  help: string;
  /**
   * Runs with the arguments after the name (`--help` is answered before) and returns the exit code;
   * throws a `UsageError` (or any `ConfigError`) for a user's mistake.
   */
  run: (args: string[], io: CliIo) => Promise<number>;
}

/** A CLI: its name, summary, commands and exit codes. */
export interface CliProgram {
  /** The bin's name: `vime`, `vime-grpo`. */
  name: string;
  /** One line: what the program is for. */
  summary: string;
  commands: readonly Command[];
  /**
   * What each exit code means, for the program's help: `[[0, 'success'], [2, 'invalid usage']]`. A program
   * of one command documents them in that command's help instead.
   */
  exitCodes?: ReadonlyArray<readonly [code: number, meaning: string]> | undefined;
}

/**
 * The program's help: its commands and exit codes. A program of one command answers with that command's
 * help, which then documents the exit codes.
 */
export function programHelp(program: CliProgram): string {
  const { name, commands } = program;
  if (commands.length === 1) return commands[0]!.help;
  const synopses = commands.map((c) => c.synopsis ?? c.name);
  const width = Math.max(...synopses.map((s) => s.length));
  return `${name}: ${program.summary}

Usage: ${name} <command> [options]

Commands:
${commands.map((c, i) => `  ${synopses[i]!.padEnd(width)}  ${c.summary}`).join('\n')}

Run \`${name} <command> --help\` for a command's options.

Exit codes:
${(program.exitCodes ?? []).map(([code, meaning]) => `  ${String(code).padEnd(4)} ${meaning}`).join('\n')}`;
}

/**
 * Run the command that `argv` names. No command: the help on stderr, exit 2. `--help` (or `help`) first:
 * the program's help; `--help` anywhere after a command: that command's. Options may come before the
 * command (`--json check a b`). An unknown command is a `UsageError` naming the closest one.
 */
export async function runProgram(program: CliProgram, argv: readonly string[], io: CliIo): Promise<number> {
  const [first] = argv;
  if (first === undefined || first === 'help' || first === '--help' || first === '-h') {
    (first === undefined ? io.stderr : io.stdout)(`${programHelp(program)}\n`);
    return first === undefined ? EXIT.usage : EXIT.ok;
  }
  const found = findCommand(program, argv);
  if (!found || wantsHelp(found.args)) {
    io.stdout(`${found ? found.command.help : programHelp(program)}\n`);
    return EXIT.ok;
  }
  return found.command.run(found.args, io);
}

/** The command `argv` names and the arguments around it; undefined for options alone, `--help` among them. */
function findCommand(
  program: CliProgram,
  argv: readonly string[],
): { command: Command; args: string[] } | undefined {
  const { name: prog, commands } = program;
  const names = commands.map((c) => c.name);
  const firstWords = new Set(names.map((n) => n.split(' ')[0]!));
  const groups = new Set(names.filter((n) => n.includes(' ')).map((n) => n.split(' ')[0]!));
  const list = `commands: ${names.join(', ')}; see \`${prog} --help\``;
  const end = argv.indexOf('--');
  const head = end < 0 ? argv : argv.slice(0, end);
  // Options before the command: the command is the first word that starts one.
  const at = argv[0]!.startsWith('-') ? head.findIndex((a) => firstWords.has(a)) : 0;
  if (at < 0) {
    if (wantsHelp(argv)) return undefined;
    // A misspelled command after the options (`--json chekc`) is named; any other word may be a value.
    const typo = head.find((a) => !a.startsWith('-') && closest(a, names));
    if (typo)
      throw new UsageError(`unknown command ${JSON.stringify(typo)}${didYouMean(typo, names)}; ${list}`);
    throw new UsageError(`${prog} needs a command before ${JSON.stringify(argv[0])}; ${list}`);
  }
  const word = argv[at]!;
  const next = argv[at + 1];
  const grouped = groups.has(word) && !names.includes(word) && next !== undefined && !next.startsWith('-');
  const typed = grouped ? `${word} ${next}` : word;
  const command = commands.find((c) => c.name === typed);
  if (!command)
    throw new UsageError(`unknown command ${JSON.stringify(typed)}${didYouMean(typed, names)}; ${list}`);
  const args = [...argv];
  args.splice(at, grouped ? 2 : 1);
  return { command, args };
}
