import { z } from 'zod';
import { describeValue, ValidationError, type VimeErrorCode } from './errors.js';

/** Format a path like `[3].tokens[7]` or `metadata.instance_id`. */
export function formatPath(path: ReadonlyArray<PropertyKey>, root = ''): string {
  let out = root;
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out ? `.${String(key)}` : String(key);
  }
  return out;
}

function valueAt(value: unknown, path: ReadonlyArray<PropertyKey>): unknown {
  let cur: unknown = value;
  for (const key of path) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<PropertyKey, unknown>)[key as string];
  }
  return cur;
}

/**
 * Parse `value` with a zod schema; on failure throw a `ValidationError` whose message names every
 * offending field path, the kind of value found there, and what was expected.
 */
export function parseWith<S extends z.ZodType>(
  schema: S,
  value: unknown,
  what: string,
  options: { root?: string | undefined; code?: VimeErrorCode | undefined } = {},
): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = result.error.issues;
  const lines = issues.slice(0, 8).map((issue) => {
    const path = formatPath(issue.path, options.root ?? '');
    const found = describeValue(valueAt(value, issue.path));
    return `${path || '(root)'}: ${issue.message} (found ${found})`;
  });
  if (issues.length > 8) lines.push(`… and ${issues.length - 8} more`);
  const first = issues[0];
  const path = first ? formatPath(first.path, options.root ?? '') : '';
  throw new ValidationError(path, `invalid ${what}: ${lines.join('; ')}`, {
    code: options.code ?? 'validation_error',
    data: {
      issues: issues.map((i) => ({ path: formatPath(i.path, options.root ?? ''), message: i.message })),
    },
  });
}

interface TypedArrays {
  Int32Array: Int32Array;
  Uint8Array: Uint8Array;
  Float32Array: Float32Array;
  Float64Array: Float64Array;
}
const typedArrayClasses = { Int32Array, Uint8Array, Float32Array, Float64Array };
/** A zod schema for one typed-array class, by name (any backing buffer). */
export function typedArray<K extends keyof TypedArrays>(name: K) {
  const ctor = typedArrayClasses[name];
  return z.custom<TypedArrays[K]>((v) => v instanceof ctor, { message: `expected ${name}` });
}
