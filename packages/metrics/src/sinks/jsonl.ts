import { appendFile, mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { MetricSink, RunMetadata } from './sink.js';

/** The JSONL schema's name and version, in the first line of every file. */
export const JSONL_SCHEMA = 'vime.metrics/1';

/**
 * One JSON object per line: first `{"kind":"run","schema":"vime.metrics/1",…}`, then a
 * `{"kind":"rollout",…}` line per finished rollout and a `{"kind":"step",…}` line per finished step,
 * and `{"kind":"end","summary":{…}}` on close (documented in the package README). Each line is
 * appended whole, in order, so a killed run leaves every line it finished readable.
 */
export async function jsonlSink(path: string, run: RunMetadata): Promise<MetricSink> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(
    path,
    `${JSON.stringify({ kind: 'run', schema: JSONL_SCHEMA, run_id: run.runId, started_at: new Date(run.startedAt).toISOString(), engine: run.engine ?? null, config: run.config ?? null })}\n`,
  );
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
