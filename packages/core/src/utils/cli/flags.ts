/**
 * Strict flag parsing on Node's `parseArgs`, whose errors are rewritten for a user: an unknown flag gets
 * the closest known one, a flag without its value is named, and every message ends with where to look
 * (`; see \`vime plan --help\``).
 */
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { didYouMean } from './did-you-mean.js';
import { UsageError } from './values.js';

/** The flags a command takes, in `parseArgs`'s form: `{ out: { type: 'string', short: 'o' } }`. */
export type FlagSpec = NonNullable<ParseArgsConfig['options']>;

/** Options of `parseFlags`. */
export interface ParseFlagsOptions {
  /** The most positional arguments the command takes (default: any number; the command checks them). */
  maxPositionals?: number | undefined;
}

type Parsed<O extends FlagSpec> = ReturnType<
  typeof parseArgs<{ args: string[]; options: O; allowPositionals: true; strict: true }>
>;

const isHelpFlag = (arg: string) => arg === '--help' || arg === '-h';

/** Whether `--help` or `-h` comes anywhere before a `--`: help is answered before anything is checked. */
export function wantsHelp(args: readonly string[]): boolean {
  const end = args.indexOf('--');
  return (end < 0 ? args : args.slice(0, end)).some(isHelpFlag);
}

/**
 * Parse `args` strictly against `flags`. `command` is the command as typed (`vime plan`, `vime-metrics`)
 * for the pointer to its help. An unknown flag, a flag without its value, or one positional argument too
 * many is a `UsageError` that names it.
 */
export function parseFlags<O extends FlagSpec>(
  command: string,
  args: readonly string[],
  flags: O,
  options: ParseFlagsOptions = {},
): Parsed<O> {
  const see = `; see \`${command} --help\``;
  let parsed: Parsed<O>;
  try {
    parsed = parseArgs({ args: [...args], options: flags, allowPositionals: true, strict: true });
  } catch (cause) {
    throw new UsageError(`${describeParseError(cause as NodeJS.ErrnoException, flags)}${see}`, { cause });
  }
  const max = options.maxPositionals;
  if (max !== undefined && parsed.positionals.length > max) {
    const extra = parsed.positionals[max]!;
    // A flag typed without its dashes (`scrape URL`) is the likely mistake.
    const hint = didYouMean(extra, Object.keys(flags)).replace('"', '"--');
    throw new UsageError(`unexpected argument ${JSON.stringify(extra)}${hint}${see}`);
  }
  return parsed;
}

/** `parseArgs`'s message, first line only, with the flag named the way a user fixes it. */
function describeParseError(error: NodeJS.ErrnoException, flags: FlagSpec): string {
  const text = error.message.split('\n')[0]!.replace(/\. To specify.*$/, '');
  // The long name where the message has one: `Option '-c, --config <value>' argument missing`.
  const flag = /'(?:-\w, )?(-[^' ]+)/.exec(text)?.[1];
  if (!flag) return text;
  if (error.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && flag.startsWith('--'))
    return `${text}${didYouMean(flag.slice(2), Object.keys(flags)).replace('"', '"--')}`;
  // `--run --dry-run`: parseArgs will not take a dash-led word as the value.
  if (/ambiguous/.test(text))
    return `${flag} needs a value; for a value that starts with a dash write ${flag}=VALUE`;
  if (/argument missing/.test(text)) return `${flag} needs a value`;
  if (/does not take an argument/.test(text)) return `${flag} takes no value`;
  return text;
}
