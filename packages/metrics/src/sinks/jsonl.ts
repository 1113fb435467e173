import { appendFile, mkdir, readFile, truncate, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { MetricSink, RunMetadata } from './sink.js';

/** The JSONL schema's name and version, in the first line of every file. */
export const JSONL_SCHEMA = 'vime.metrics/1';

/** Options of `jsonlSink`. */
export interface JsonlSinkOptions {
  /**
   * Keep the lines already in `path` (a resumed run): the new `run` line and what follows are appended
   * after them, and a line torn by a killed writer is cut off first. Default: the file is started anew.
   */
  append?: boolean | undefined;
}

/**
 * One JSON object per line: first `{"kind":"run","schema":"vime.metrics/1",…}`, then a
 * `{"kind":"rollout",…}` line per finished rollout and a `{"kind":"step",…}` line per finished step,
 * and `{"kind":"end","summary":{…}}` on close (documented in the package README). Each line is
 * appended whole, in order, so a killed run leaves every line it finished readable. With `append`,
 * each start of a resumed run adds its own `run` line.
 */
export async function jsonlSink(
  path: string,
  run: RunMetadata,
  options: JsonlSinkOptions = {},
): Promise<MetricSink> {
  await mkdir(dirname(path), { recursive: true });
  const header = `${JSON.stringify({ kind: 'run', schema: JSONL_SCHEMA, run_id: run.runId, started_at: new Date(run.startedAt).toISOString(), engine: run.engine ?? null, config: run.config ?? null })}\n`;
  if (options.append) {
    await cutTornLine(path);
    await appendFile(path, header);
  } else await writeFile(path, header);
  let chain: Promise<void> = Promise.resolve();
  const line = (value: unknown) => {
    const text = `${JSON.stringify(value)}\n`;
    chain = chain.then(() => appendFile(path, text));
    return chain;
  };
  return {
    rollout: (r) => line({ kind: 'rollout', ...r }),
    step: (s) => line({ kind: 'step', ...s }),
    close: (summary) => line({ kind: 'end', t: Date.now(), summary: summary ?? {} }),
  };
}

/** Cut a last line without its newline (a write the killed run never finished). */
async function cutTornLine(path: string): Promise<void> {
  const text = await readFile(path).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });
  if (!text || text.length === 0 || text.at(-1) === 0x0a) return;
  await truncate(path, text.lastIndexOf(0x0a) + 1);
}
