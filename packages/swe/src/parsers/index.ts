import { ConfigError } from '@vime/core';
import { resolveProfile } from '../profiles.js';
import {
  parseDjango,
  parseMatplotlib,
  parsePytest,
  parsePytestOptions,
  parsePytestV2,
  parseSeaborn,
  parseSympy,
} from './swebench.js';
import { parseCargo, parseGoTest, parseJest, parseMocha, parseUnittest, parseVitest } from './swesmith.js';
import type { StatusMap, SwebenchRef } from './types.js';

export type { LogParser, StatusMap, SwebenchRef, TestStatus } from './types.js';

/** SWE-bench's Python parsers (`ref` picks v4.1.0 or main behaviour). */
export type SwebenchParser =
  | 'pytest'
  | 'pytest_v2'
  | 'pytest_options'
  | 'django'
  | 'sympy'
  | 'matplotlib'
  | 'seaborn';
/** Runner formats without an upstream Python twin. */
export type RunnerParser = 'unittest' | 'go_test' | 'cargo' | 'jest' | 'mocha' | 'vitest';
/** `swesmith:<mirror>`: the log parser of that mirror's SWE-smith profile. */
export type ParserId = SwebenchParser | RunnerParser | `swesmith:${string}`;

/** Options of parsing a test log. */
export interface ParseOptions {
  parser: ParserId;
  /** Whose SWE-bench behaviour to reproduce (default `v4.1.0`, the version SWE-smith runs with). */
  ref?: SwebenchRef | undefined;
}

const swebench: Record<SwebenchParser, (log: string, ref: SwebenchRef) => StatusMap> = {
  pytest: parsePytest,
  pytest_v2: parsePytestV2,
  pytest_options: parsePytestOptions,
  matplotlib: parseMatplotlib,
  seaborn: (log) => parseSeaborn(log),
  django: (log) => parseDjango(log),
  sympy: (log) => parseSympy(log),
};

const runners: Record<RunnerParser, (log: string) => StatusMap> = {
  unittest: parseUnittest,
  go_test: parseGoTest,
  cargo: parseCargo,
  jest: parseJest,
  mocha: parseMocha,
  vitest: parseVitest,
};

/**
 * Parse a test log into `{ testId: status }` exactly as the upstream parser does (later lines overwrite
 * earlier ones; ids are kept as the runner printed them).
 */
export function parseTestLog(log: string, options: ParseOptions): StatusMap {
  const { parser, ref = 'v4.1.0' } = options;
  if (ref !== 'v4.1.0' && ref !== 'main') {
    throw new ConfigError(`parseTestLog: ref must be "v4.1.0" or "main", got ${JSON.stringify(ref)}`);
  }
  if (parser.startsWith('swesmith:')) return resolveProfile(parser.slice('swesmith:'.length)).parser(log);
  if (parser in swebench) return swebench[parser as SwebenchParser](log, ref);
  if (parser in runners) return runners[parser as RunnerParser](log);
  throw new ConfigError(
    `parseTestLog: unknown parser ${JSON.stringify(parser)}; use one of ${[...Object.keys(swebench), ...Object.keys(runners)].join(', ')} or "swesmith:<mirror>" (e.g. "swesmith:swesmith/mewwts__addict.75284f95")`,
  );
}
