/**
 * The usage error and the flag value parsers: each names the flag as the user typed it, the value it got
 * and what it expects (`--steps expects a positive whole number, got "x"`).
 */
import { ConfigError, errorMarker, hasErrorMarker, type VimeErrorOptions } from '../../errors.js';
import { didYouMean } from './did-you-mean.js';

const usageMarker = errorMarker('UsageError');

/**
 * A mistake on the command line (an unknown flag or command, a missing or bad value): a program prints
 * its message on one line, with no stack trace, and exits 2. A `ConfigError`, so code that catches those
 * catches it too.
 */
export class UsageError extends ConfigError {
  readonly [usageMarker] = true;
  constructor(message: string, options: VimeErrorOptions = {}) {
    super(message, options);
  }

  /** Whether `value` is a `UsageError`, from any copy of this package. */
  static override isInstance(value: unknown): value is UsageError {
    return hasErrorMarker(value, usageMarker);
  }
}

/** A positive whole number from `flag`'s value, or undefined when the flag was not given. */
export function positiveInt(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < 1)
    throw new UsageError(`${flag} expects a positive whole number, got ${JSON.stringify(value)}`);
  return n;
}

/** A finite number (at least `min`, when given) from `flag`'s value, or undefined when not given. */
export function finiteNumber(value: string | undefined, flag: string, min?: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || (min !== undefined && n < min)) {
    const expected = min === undefined ? 'a number' : `a number ≥ ${min}`;
    throw new UsageError(`${flag} expects ${expected}, got ${JSON.stringify(value)}`);
  }
  return n;
}

/** `a or b`, `a, b or c`. */
const alternatives = (choices: readonly string[]) =>
  choices.length < 2 ? choices.join('') : `${choices.slice(0, -1).join(', ')} or ${choices.at(-1)}`;

/** `flag`'s value when it is one of `choices`, or undefined when the flag was not given. */
export function oneOf<T extends string>(
  value: string | undefined,
  flag: string,
  choices: readonly T[],
): T | undefined {
  if (value === undefined || choices.includes(value as T)) return value as T | undefined;
  throw new UsageError(
    `${flag} must be ${alternatives(choices)}, got ${JSON.stringify(value)}${didYouMean(value, choices)}`,
  );
}
