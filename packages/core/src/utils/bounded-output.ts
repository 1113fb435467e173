/**
 * Bounded output capture. A stream keeps its first and last `maxBytes / 2` bytes and counts what it drops,
 * so a 100 MB log costs constant memory and still shows how it started and how it ended.
 */

/** What a captured stream keeps unless told otherwise: 1 MiB, half from its start and half from its end. */
export const DEFAULT_MAX_OUTPUT_BYTES = 1 << 20;

const decoder = new TextDecoder('utf-8', { fatal: false });

/** Decode bytes as UTF-8, replacing invalid sequences with U+FFFD. */
export function decodeUtf8(bytes: Uint8Array): string {
  return decoder.decode(bytes);
}

/** A process's output kept in constant memory: its first and last bytes, with the middle counted. */
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

  /** Whether bytes were left out. */
  get truncated(): boolean {
    return this.total > this.headBytes + this.tailBytes;
  }

  /** Add a chunk of output. */
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
