/**
 * Python `str` semantics the upstream parsers depend on. Python's `str.split()`, `str.strip()` and the
 * `re` classes `\s`/`\S` use Unicode whitespace (including \x1c-\x1f and \x85, which JavaScript's `\s`
 * lacks, and excluding \ufeff, which it has), so the parsers use these instead of the JS built-ins.
 */

/** Characters for which Python's `str.isspace()` is true. */
export const PY_WS =
  '\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
/** Regex source for Python's `\s` and `\S`. */
export const S = `[${PY_WS}]`;
export const NS = `[^${PY_WS}]`;

const wsRun = new RegExp(`${S}+`, 'u');
const leading = new RegExp(`^${S}+`, 'u');
const trailing = new RegExp(`${S}+$`, 'u');

/** Python `s.split()` with no arguments: split on whitespace runs, no empty strings. */
export function pySplit(s: string): string[] {
  const parts = s.split(wsRun);
  if (parts.length > 0 && parts[0] === '') parts.shift();
  if (parts.length > 0 && parts[parts.length - 1] === '') parts.pop();
  return parts;
}

/** Python `s.strip()` with no arguments. */
export function pyStrip(s: string): string {
  return s.replace(leading, '').replace(trailing, '');
}

/** Python `s.lstrip()` with no arguments. */
export function pyLstrip(s: string): string {
  return s.replace(leading, '');
}

/** Python `s.split(sep)[0]`. */
export function beforeFirst(s: string, sep: string): string {
  const i = s.indexOf(sep);
  return i < 0 ? s : s.slice(0, i);
}

/** Python `s.rsplit(sep, 1)[0]`. */
export function beforeLast(s: string, sep: string): string {
  const i = s.lastIndexOf(sep);
  return i < 0 ? s : s.slice(0, i);
}

/** Python `s.replace(a, b)` (all occurrences). */
export function replaceAll(s: string, a: string, b: string): string {
  return s.includes(a) ? s.split(a).join(b) : s;
}
