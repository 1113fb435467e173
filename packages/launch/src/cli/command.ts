/** What every `vime` subcommand shares: the injectable IO, exit codes, the command shape, flag parsing. */
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { ConfigError } from '@vime/core';
import { didYouMean } from '@vime/core/utils';

export interface CliIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  env: Record<string, string | undefined>;
  cwd: string;
  signal?: AbortSignal;
}

/** Exit codes (documented in the README and `vime --help`). */
export const EXIT = { ok: 0, failed: 1, usage: 2, checks: 3, interrupted: 130 } as const;

export interface Command {
  /** As typed: `plan`, `skypilot render`. */
  name: string;
  /** The name with its arguments, for the command list in `vime --help`. */
  synopsis: string;
  summary: string;
  /** `vime <name> --help`; starts with `Usage: vime <name>`. */
  help: string;
  /** Runs with the arguments after the name (`--help` is answered before) and returns the exit code. */
  run: (args: string[], io: CliIo) => Promise<number>;
}

export type FlagSpec = NonNullable<ParseArgsConfig['options']>;

/** Parse a command's flags strictly; an unknown flag or a missing value is a usage error naming the flag. */
export function parseFlags<O extends FlagSpec>(
  command: string,
  args: string[],
  options: O,
): ReturnType<typeof parseArgs<{ args: string[]; options: O; allowPositionals: true; strict: true }>> {
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (cause) {
    const { code, message } = cause as NodeJS.ErrnoException;
    let text = message.split('\n')[0]!.replace(/\. To specify.*$/, '');
    const flag = /'(-[^' ]+)/.exec(message)?.[1];
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && flag?.startsWith('--')) {
      text += didYouMean(flag.slice(2), Object.keys(options)).replace('"', '"--');
    } else if (/ambiguous/.test(text) && flag) {
      text = `${flag} needs a value; for a value that starts with a dash write ${flag}=VALUE`;
    }
    throw new ConfigError(`${text}; see \`vime ${command} --help\``, { cause });
  }
}

/** A positive whole number from a flag, or undefined when the flag was not given. */
export function positiveInt(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw new ConfigError(`--${flag} expects a positive whole number, got ${JSON.stringify(value)}`);
  return n;
}
