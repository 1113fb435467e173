/**
 * Bounded output capture. A stream keeps its first and last `maxBytes / 2` bytes and counts what it drops,
 * so a 100 MB log costs constant memory and still shows how it started and how it ended.
 * Read-backs of whole files are capped too (`readCap`), with an error that says what to do.
 */
import { ConfigError, SandboxError } from '@vime/core';

export const DEFAULT_MAX_OUTPUT_BYTES = 1 << 20;

/** Largest file `readFile` brings back to the host unless told otherwise (64 MiB). */
export const DEFAULT_MAX_READ_BYTES = 64 << 20;

const decoder = new TextDecoder('utf-8', { fatal: false });

/** Decode bytes as UTF-8, replacing invalid sequences with U+FFFD. */
export function decodeUtf8(bytes: Uint8Array): string {
  return decoder.decode(bytes);
}

export class BoundedOutput {
  private readonly headLimit: number;
  private readonly tailLimit: number;
  private head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  /** Bytes received in total. */
  total = 0;

  constructor(maxBytes: number = DEFAULT_MAX_OUTPUT_BYTES) {
    this.headLimit = Math.ceil(maxBytes / 2);
    this.tailLimit = Math.floor(maxBytes / 2);
  }

  get truncated(): boolean {
    return this.total > this.headBytes + this.tailBytes;
  }

  push(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.headBytes < this.headLimit) {
      const take = Math.min(chunk.length, this.headLimit - this.headBytes);
      this.head.push(chunk.subarray(0, take));
      this.headBytes += take;
      chunk = chunk.subarray(take);
      if (chunk.length === 0) return;
    }
    if (this.tailLimit === 0) return;
    if (chunk.length >= this.tailLimit) {
      this.tail = [Buffer.from(chunk.subarray(chunk.length - this.tailLimit))];
      this.tailBytes = this.tailLimit;
      return;
    }
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    while (this.tailBytes > this.tailLimit) {
      const first = this.tail[0]!;
      const excess = this.tailBytes - this.tailLimit;
      if (first.length <= excess) {
        this.tail.shift();
        this.tailBytes -= first.length;
      } else {
        this.tail[0] = first.subarray(excess);
        this.tailBytes -= excess;
      }
    }
  }

  /** The captured text; an elided middle is marked with how many bytes were dropped. */
  text(): string {
    if (!this.truncated) return decodeUtf8(Buffer.concat([...this.head, ...this.tail]));
    const head = decodeUtf8(Buffer.concat(this.head));
    const dropped = this.total - this.headBytes - this.tailBytes;
    return `${head}\n[… ${dropped} bytes elided …]\n${decodeUtf8(Buffer.concat(this.tail))}`;
  }
}

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
