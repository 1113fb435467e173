import { ConfigError } from '@vime/core';

/** Job, job-group and volume names: what SkyPilot's loader accepts (`str.isalnum()` or `-`/`_`). */
export const NAME_PATTERN = /^[A-Za-z0-9_-]+$/;
/** Env and secret keys (SkyPilot task schema). */
export const ENV_KEY_PATTERN = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
/** `termination_delay` durations: SkyPilot's `TIME_PATTERN_SECONDS` (bare number = seconds). */
export const DURATION_PATTERN = /^[0-9]+(s|m|h|d|w|S|M|H|D|W)?$/;
/**
 * `infra`: `cloud[/region[/zone]]`, `*` wildcards, `k8s|kubernetes[/context]`. SkyPilot writes this with
 * Python's inline `(?i:...)` flag, which JavaScript rejects, so it is rewritten with the `i` flag.
 */
export const INFRA_PATTERN = /^(?:(?:k8s|kubernetes)(?:\/.+)?|(?:\*|[a-z0-9-]+)(?:\/(?:\*|[^/\s]+)){0,2})$/i;
/** Volume `infra`: the same without wildcards. */
export const VOLUME_INFRA_PATTERN = /^(?:(?:k8s|kubernetes)(?:\/.+)?|[a-z0-9-]+(?:\/[^/\s*]+){0,2})$/i;
/** Volume sizes such as `100Gi` or a bare number of GiB. */
export const VOLUME_SIZE_PATTERN = /^[0-9]+(?:[KMGTPE]i?)?$/i;
/** `accelerators` as a string: `H100`, `H100:4`, `tpu-v5e-8:1`. */
export const ACCELERATOR_PATTERN = /^[A-Za-z0-9_.-]+(?::[0-9]+(?:\.[0-9]+)?)?$/;

const unitSeconds: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };

/** Parse a SkyPilot-style duration (`60s`, `5m`, `2h`, bare seconds) into milliseconds. */
export function parseDuration(value: string | number, field = 'duration'): number {
  const text = String(value).trim();
  if (!DURATION_PATTERN.test(text)) {
    throw new ConfigError(
      `${field}: ${JSON.stringify(value)} is not a duration; write a whole number with an optional unit s, m, h, d or w (e.g. "90s", "30m")`,
    );
  }
  const unit = /[a-zA-Z]$/.test(text) ? text.slice(-1).toLowerCase() : 's';
  return Number.parseInt(text, 10) * unitSeconds[unit]! * 1000;
}

/** Levenshtein distance, for "did you mean" hints on misspelled keys and flags. */
function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return row[b.length]!;
}

/** The closest known name within a third of its length, if any. */
export function closest(name: string, known: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestScore = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const d = distance(name.toLowerCase(), candidate.toLowerCase());
    if (d < bestScore) {
      best = candidate;
      bestScore = d;
    }
  }
  return best !== undefined && bestScore <= Math.max(2, Math.floor(best.length / 3)) ? best : undefined;
}

export function didYouMean(name: string, known: Iterable<string>): string {
  const hint = closest(name, known);
  return hint ? ` (did you mean ${JSON.stringify(hint)}?)` : '';
}
