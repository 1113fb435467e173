/**
 * Read-backs of whole files are capped (`readCap`), with an error that says what to do (`tooLarge`), and
 * error messages quote the end of long texts (`tailOf`). Output capture is `@vime/core/utils`'
 * `BoundedOutput`.
 */
import { ConfigError, SandboxError } from '@vime/core';

/** Largest file `readFile` brings back to the host unless told otherwise (64 MiB). */
export const DEFAULT_MAX_READ_BYTES = 64 << 20;

/** The last `maxChars` characters of a text, for error messages. */
export function tailOf(text: string, maxChars = 2000): string {
  return text.length <= maxChars ? text : `…${text.slice(text.length - maxChars)}`;
}

/** The read-back cap of a `readFile` call, validated. */
export function readCap(maxBytes: number | undefined): number {
  if (maxBytes === undefined) return DEFAULT_MAX_READ_BYTES;
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) {
    throw new ConfigError(
      `readFile maxBytes must be a whole number of bytes >= 0 (got ${JSON.stringify(maxBytes)}); e.g. { maxBytes: 256 << 20 }`,
    );
  }
  return maxBytes;
}

/** The error of a read-back over its cap. */
export function tooLarge(path: string, id: string, cap: number, size?: number): SandboxError {
  return new SandboxError(
    `readFile ${path} in sandbox ${id}: the file is larger than the ${cap}-byte read cap` +
      `${size === undefined ? '' : ` (${size} bytes)`}; pass a larger { maxBytes } to readFile, or read part ` +
      `of it with exec (e.g. \`tail -c 1000000 ${path}\`)`,
    { code: 'file_too_large', data: { path, maxBytes: cap, ...(size === undefined ? {} : { size }) } },
  );
}
