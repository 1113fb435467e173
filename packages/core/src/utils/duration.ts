import { ConfigError } from '../errors.js';

const UNIT_MS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

/**
 * Parse a duration into milliseconds: `500ms`, `90s`, `30m`, `6h`, `2d`, `1w` (units in either case, so
 * SkyPilot's `90S` reads too), a decimal such as `1.5h`, or a bare number of seconds. `field` names the
 * option in the error.
 */
export function parseDuration(value: string | number, field = 'duration'): number {
  const text = String(value).trim();
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)?$/i.exec(text);
  if (!m) {
    throw new ConfigError(
      `${field}: ${JSON.stringify(value)} is not a duration; write a number with an optional unit ms, s, m, h, d or w (e.g. "90s", "30m"; a bare number is seconds)`,
      { data: { field, value } },
    );
  }
  return Number(m[1]) * UNIT_MS[(m[2] ?? 's').toLowerCase()]!;
}
