/**
 * Writes slime's prompt data from SWE-smith rows: one JSON line per instance with `text` (the task),
 * `label` (the instance id) and `metadata` (the whole row, which the rollout server turns into a task).
 *
 *   node --import tsx --conditions=@vime/source examples/slime-bridge/launch/prepare-data.ts --out FILE
 *     [--dataset rows.jsonl|rows.parquet] [--repo SUBSTRING ...] [--per-repo N]
 */
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ConfigError, VimeError } from '@vime/core';
import { buildOfflineTaskSet, loadJsonl, loadParquet, selectRows, taskPrompt } from '@vime/swe';

const USAGE = `Usage: prepare-data.ts --out FILE [--dataset rows.jsonl|rows.parquet] [--repo SUBSTRING ...] [--per-repo N]

Writes slime's --prompt-data (text, label, metadata = the SWE-smith row) from SWE-smith rows, or from the
offline task set when no --dataset is given. Every repo is kept unless --repo filters.
`;

async function main(): Promise<number> {
  let values: { out?: string; dataset?: string; repo?: string[]; 'per-repo'?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      options: {
        out: { type: 'string' },
        dataset: { type: 'string' },
        repo: { type: 'string', multiple: true },
        'per-repo': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }));
  } catch (cause) {
    throw new ConfigError(`${(cause as Error).message}\n\n${USAGE}`);
  }
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (!values.out) throw new ConfigError(`--out FILE is required\n\n${USAGE}`);
  const perRepo = values['per-repo'] === undefined ? undefined : Number(values['per-repo']);
  if (perRepo !== undefined && !(Number.isInteger(perRepo) && perRepo >= 0)) {
    throw new ConfigError(`--per-repo: expected a whole number, got ${JSON.stringify(values['per-repo'])}`);
  }
  if (values.dataset && !existsSync(values.dataset))
    throw new ConfigError(`--dataset: ${values.dataset} does not exist`);
  const all = values.dataset
    ? (
        await (values.dataset.endsWith('.parquet') ? loadParquet : loadJsonl)(values.dataset, {
          onInvalid: 'skip',
        })
      ).rows
    : (await buildOfflineTaskSet({ dir: join('runs', '.cache', 'offline-tasks') })).rows;
  const rows = selectRows(all, {
    ...(values.repo?.length ? { repos: values.repo } : {}),
    ...(perRepo ? { perRepo } : {}),
  });
  const lines = rows.map((row) =>
    JSON.stringify({ text: taskPrompt(row), label: row.instance_id, metadata: row }),
  );
  await writeFile(values.out, `${lines.join('\n')}\n`);
  console.log(`wrote ${rows.length} prompts to ${values.out}`);
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    if (VimeError.isInstance(error)) {
      console.error(`prepare-data: ${error.message}`);
      process.exitCode = ConfigError.isInstance(error) ? 2 : 1;
    } else {
      console.error(error);
      process.exitCode = 1;
    }
  },
);
