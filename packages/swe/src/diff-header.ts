/**
 * The path a `diff --git` header names, as git writes it: plain (`a/x b/x`), or C-quoted when the path
 * holds a quote, a backslash, a control character or (with `core.quotepath`) a non-ASCII byte
 * (`"a/x\"y" "b/x\"y"`, octal escapes for bytes).
 */
const ESCAPES: Record<string, number> = { a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, '"': 34, '\\': 92 };

/** A C-quoted string at the start of `text`: its value and what follows it, or undefined. */
function unquote(text: string): { value: string; rest: string } | undefined {
  if (!text.startsWith('"')) return undefined;
  const bytes: number[] = [];
  for (let i = 1; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"') return { value: Buffer.from(bytes).toString('utf8'), rest: text.slice(i + 1) };
    if (c !== '\\') {
      bytes.push(...Buffer.from(c, 'utf8'));
      continue;
    }
    const next = text[++i] ?? '';
    const octal = /^[0-7]{3}/.exec(text.slice(i, i + 3));
    if (octal) {
      bytes.push(Number.parseInt(octal[0], 8));
      i += 2;
    } else bytes.push(ESCAPES[next] ?? next.charCodeAt(0));
  }
  return undefined;
}

const strip = (path: string, prefix: string) => (path.startsWith(prefix) ? path.slice(prefix.length) : path);

/** The post-image path of a `diff --git` line (`b/…` without its prefix), or undefined for other lines. */
export function diffHeaderPath(line: string): string | undefined {
  if (!line.startsWith('diff --git ')) return undefined;
  const rest = line.slice('diff --git '.length);
  const first = unquote(rest);
  if (first) {
    const tail = first.rest.trimStart();
    return strip(unquote(tail)?.value ?? tail, 'b/');
  }
  if (rest.endsWith('"')) {
    const at = rest.lastIndexOf(' "');
    const second = at >= 0 ? unquote(rest.slice(at + 1)) : undefined;
    if (second) return strip(second.value, 'b/');
  }
  return /^a\/.+ b\/(.+)$/.exec(rest)?.[1];
}
