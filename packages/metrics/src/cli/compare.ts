/**
 * `vime-metrics compare RUN RUN [RUN…]`: two or more runs on one page. Each RUN is a folder `vime-loop`
 * wrote or a metrics.jsonl file, optionally named (`NAME=RUN`); every one is read before anything is
 * written, and one that is not a run is named with the fix.
 */
import { writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { ConfigError } from '@vime/core';
import { type CliIo, EXIT, ensureDirectory, parseFlags, pathError, UsageError } from '@vime/core/utils';
import { type CompareRun, configDifferences, renderCompareHtml } from '../compare.js';
import { runReport } from '../report.js';
import { readRun } from './run-folder.js';

export const COMPARE_HELP = `Usage: vime-metrics compare [options] RUN RUN [RUN...]

Draws two or more runs on one page: the settings that differ (from each run's run-config.yaml, with
where each value came from), and every per-step curve (reward, pass@1, truncation, turns, response
length, zero-variance groups, advantages, step time, the trainer's loss, KL, entropy, clip fraction,
grad norm, learning rate and log-prob gap) with a line per run on shared axes.

  RUN                a folder vime-loop wrote (its --out), or a metrics.jsonl file; NAME=RUN names it
  --html FILE        the page (default vime-compare.html)
  --json FILE        the runs' records and the config differences (default vime-compare.json)
  --quiet            print only the output paths
  -h, --help         show this help

Exit codes:
  0  the page was written
  1  the page could not be written
  2  invalid usage or input: unknown flag, fewer than two runs, a RUN that is not a run
`;

const FLAGS = {
  html: { type: 'string', default: 'vime-compare.html' },
  json: { type: 'string', default: 'vime-compare.json' },
  quiet: { type: 'boolean', default: false },
} as const;

/** `NAME=RUN` (a name without a path separator), else the run's own label. */
function namedRun(arg: string): { name: string | undefined; target: string } {
  const eq = arg.indexOf('=');
  const name = eq > 0 ? arg.slice(0, eq) : '';
  return name && !name.includes('/') ? { name, target: arg.slice(eq + 1) } : { name: undefined, target: arg };
}

/** Run `compare` with the arguments after its name. */
export async function compareCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('vime-metrics compare', argv, FLAGS);
  if (positionals.length < 2) {
    throw new UsageError(
      `compare needs at least two runs, got ${positionals.length}; see \`vime-metrics compare --help\``,
    );
  }
  const runs: CompareRun[] = [];
  for (const arg of positionals) {
    const { name, target } = namedRun(arg);
    const run = await readRun(target, 'RUN', io.cwd);
    runs.push({
      label: name ?? run.label,
      path: run.path,
      record: runReport({ ...run.input, name: name ?? run.label }),
    });
  }
  const labels = runs.map((r) => r.label);
  const twice = labels.find((l, i) => labels.indexOf(l) !== i);
  if (twice) {
    throw new ConfigError(
      `two runs are called ${JSON.stringify(twice)}; name them apart with NAME=RUN (e.g. a=${positionals[0]})`,
    );
  }
  const outputs: Array<[flag: string, path: string, text: string]> = [
    ['--html', values.html, renderCompareHtml(runs)],
    [
      '--json',
      values.json,
      `${JSON.stringify({ runs: runs.map((r) => ({ label: r.label, path: r.path, record: r.record })), config: configDifferences(runs) }, null, 2)}\n`,
    ],
  ];
  for (const [flag, path] of outputs) await ensureDirectory(dirname(resolve(io.cwd, path)), flag);
  for (const [flag, path, text] of outputs) {
    await writeFile(resolve(io.cwd, path), text).catch((error: unknown) => {
      throw pathError(error, flag, path, 'write it');
    });
  }
  if (!values.quiet) {
    const { differences } = configDifferences(runs);
    io.stdout(
      `${runs.length} runs: ${labels.join(', ')}; ${differences.length} setting(s) differ${differences.length ? `: ${differences.map((d) => d.key).join(', ')}` : ''}\n`,
    );
  }
  for (const [, path] of outputs) io.stdout(`wrote ${resolve(io.cwd, path)}\n`);
  return EXIT.ok;
}
