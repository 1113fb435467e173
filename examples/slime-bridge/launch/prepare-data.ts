/**
 * Writes slime's prompt data from SWE-smith rows: one JSON line per instance with `text` (the task),
 * `label` (the instance id) and `metadata` (the whole row, which the rollout server turns into a task).
 *
 *   node --import tsx --conditions=@vime/source examples/slime-bridge/launch/prepare-data.ts --out FILE
 *     [--dataset rows.jsonl|rows.parquet] [--repo SUBSTRING ...]
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { buildOfflineTaskSet, loadJsonl, loadParquet, taskPrompt } from '@vime/swe';

const { values } = parseArgs({
  options: { out: { type: 'string' }, dataset: { type: 'string' }, repo: { type: 'string', multiple: true } },
});
if (!values.out) throw new Error('--out FILE is required');
const rows = values.dataset
  ? (
      await (values.dataset.endsWith('.parquet') ? loadParquet : loadJsonl)(values.dataset, {
        repos: values.repo ?? [],
        onInvalid: 'skip',
      })
    ).rows
  : (await buildOfflineTaskSet({ dir: join('runs', '.cache', 'offline-tasks') })).rows;
const lines = rows.map((row) =>
  JSON.stringify({ text: taskPrompt(row), label: row.instance_id, metadata: row }),
);
await writeFile(values.out, `${lines.join('\n')}\n`);
console.log(`wrote ${rows.length} prompts to ${values.out}`);
