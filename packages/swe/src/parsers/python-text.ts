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

const leading = new RegExp(`^${S}+`, 'u');
const trailing = new RegExp(`${S}+$`, 'u');

/** Python's `str.isspace()` for one UTF-16 code unit (every whitespace character is in the BMP). */
export function isPyWhitespace(c: number): boolean {
  if (c <= 32) return c === 32 || (c >= 9 && c <= 13) || (c >= 28 && c <= 31);
  if (c < 0x85) return false;
  return (
    c === 0x85 ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000
  );
}

/**
 * Python `s.split()` with no arguments: split on whitespace runs, no empty strings. With `limit`, stop after
 * that many tokens (the rest of the line is not needed; the tokens found are the same).
 */
export function pySplit(s: string, limit = Number.POSITIVE_INFINITY): string[] {
  const out: string[] = [];
  let start = -1;
  for (let i = 0; i < s.length; i++) {
    if (isPyWhitespace(s.charCodeAt(i))) {
      if (start >= 0) {
        out.push(s.slice(start, i));
        if (out.length >= limit) return out;
        start = -1;
      }
    } else if (start < 0) start = i;
  }
  if (start >= 0) out.push(s.slice(start));
  return out;
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

/** Python `s.splitlines()`: breaks at \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029. */
export function pySplitLines(s: string): string[] {
  const lines = s.split(/\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]/);
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  return lines;
}
