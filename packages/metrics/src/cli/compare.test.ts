// `vime-metrics compare` and `--run`, driven through `main` as the bin calls it: runs read from a run
// folder or a metrics file (the committed H200 run's, as it is), the settings that differ named with
// their sources, and every input that is not a run refused with the path named, exit 2, no stack trace
// and nothing written.
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunRecord } from '../report.js';
import { main } from './main.js';

const EVIDENCE = fileURLToPath(new URL('../../../../examples/closed-loop/evidence/h200/', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'vime-metrics-compare-'));
const STACK = /^\s+at .+[:(]/m;

async function metrics(args: string[]) {
  let stdout = '';
  let stderr = '';
  const out = join(dir, `out-${Math.random().toString(36).slice(2)}`);
  const code = await main([...args, '--json', join(out, 'r.json'), '--html', join(out, 'r.html')], {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
    env: {},
    cwd: dir,
  });
  const wrote = existsSync(join(out, 'r.json')) || existsSync(join(out, 'r.html'));
  return { code, stdout, stderr, wrote, out };
}

const runConfig = (maxTurns: number, source: string) => `# a run's resolved config
run:
  steps: 10 # default
  mode: sync # default
agents:
  max_turns: ${maxTurns} # ${source}
sampling:
  stop: [] # default
`;

beforeAll(() => {
  // Two run folders around the committed run's metrics, with settings that differ in one value.
  for (const [name, turns, source] of [
    ['run-a', 4, 'flag --max-turns'],
    ['run-b', 6, 'file b.yaml (agents.max_turns)'],
  ] as const) {
    mkdirSync(join(dir, name, 'steps'), { recursive: true });
    copyFileSync(`${EVIDENCE}train__metrics.jsonl`, join(dir, name, 'metrics.jsonl'));
    writeFileSync(join(dir, name, 'run-config.yaml'), runConfig(turns, source));
  }
  copyFileSync(`${EVIDENCE}step-10/batch.msgpack`, join(dir, 'run-a', 'steps', '10.msgpack'));
  mkdirSync(join(dir, 'empty-dir'));
  writeFileSync(join(dir, 'notes.txt'), 'this is not a metrics file\n');
  mkdirSync(join(dir, 'bad-yaml'));
  copyFileSync(`${EVIDENCE}train__metrics.jsonl`, join(dir, 'bad-yaml', 'metrics.jsonl'));
  writeFileSync(join(dir, 'bad-yaml', 'run-config.yaml'), 'run: [unclosed\n  x: {');
  mkdirSync(join(dir, 'bad-batch', 'steps'), { recursive: true });
  copyFileSync(`${EVIDENCE}train__metrics.jsonl`, join(dir, 'bad-batch', 'metrics.jsonl'));
  writeFileSync(join(dir, 'bad-batch', 'steps', '3.msgpack'), 'not msgpack at all');
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('vime-metrics compare', () => {
  it('draws two runs on one page and names the settings that differ, each with where it came from', async () => {
    const r = await metrics(['compare', 'run-a', 'b=run-b']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^2 runs: run-a, b; 1 setting\(s\) differ: agents\.max_turns$/m);
    const json = JSON.parse(readFileSync(join(r.out, 'r.json'), 'utf8')) as {
      runs: Array<{ label: string; record: RunRecord }>;
      config: { differences: unknown[]; same: number };
    };
    expect(json.config).toEqual({
      differences: [
        {
          key: 'agents.max_turns',
          values: [
            { value: 4, source: 'flag --max-turns' },
            { value: 6, source: 'file b.yaml (agents.max_turns)' },
          ],
        },
      ],
      same: 3,
    });
    // run-a's folder holds step 10's batch; run-b's none.
    expect(json.runs[0]!.record.shape!.per_step['10']!.with_rows).toBe(64);
    expect(json.runs[1]!.record.shape!.per_step['10']!.with_rows).toBe(0);
    const html = readFileSync(join(r.out, 'r.html'), 'utf8');
    expect(html).toContain('<td>agents.max_turns</td><td>4 (flag --max-turns)</td>');
    // One chart per curve, a line per run, named in its legend.
    expect(html.match(/data-series="run-a"/g)!.length).toBe(html.match(/data-series="b"/g)!.length);
    expect(html).toMatch(/In no run: [^<]*trainer: entropy; trainer: learning rate/);
  });

  it.each([
    [['compare', '--htm', 'x', 'run-a', 'run-b'], `Unknown option '--htm' (did you mean "--html"?)`],
    [['compare', 'run-a'], 'compare needs at least two runs, got 1'],
    [['compare', 'nowhere', 'run-a'], 'RUN nowhere: does not exist; give a folder vime-loop wrote'],
    [['compare', 'empty-dir', 'run-a'], 'RUN empty-dir: not a run folder: it has no metrics.jsonl'],
    [
      ['compare', 'notes.txt', 'run-a'],
      'RUN notes.txt: not a vime metrics file: no "run" line of schema vime.metrics/1',
    ],
    [['compare', 'run-a', 'run-a'], 'two runs are called "run-a"; name them apart with NAME=RUN'],
    [['compare', 'bad-yaml', 'run-a'], 'RUN bad-yaml: run-config.yaml: not YAML'],
    [['compare', 'bad-batch', 'run-a'], /RUN .*bad-batch\/steps\/3\.msgpack: not a batch of training rows/],
    [['comapre', 'run-a', 'run-b'], 'unknown command "comapre" (did you mean "compare"?)'],
    [['--batch', '10=x.msgpack'], '--batch adds rows to a run: pass the run with --run'],
    [['--run', 'run-b', '--batch', 'ten=x'], '--batch "ten=x": write it as STEP=FILE'],
    [['--run', 'run-b', '--batch', '10=notes.txt'], /--batch .*notes\.txt: not a batch of training rows/],
    [['--run', 'empty-dir'], '--run empty-dir: not a run folder: it has no metrics.jsonl'],
  ])('%j', async (args, message) => {
    const r = await metrics(args);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).not.toMatch(STACK);
    if (typeof message === 'string') expect(r.stderr).toContain(message);
    else expect(r.stderr).toMatch(message);
    expect(r.stderr.trimEnd().split('\n'), 'one line').toHaveLength(1);
    expect(r.wrote).toBe(false);
  });

  it('answers compare --help', async () => {
    const r = await metrics(['compare', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: vime-metrics compare/);
  });
});

describe('vime-metrics --run', () => {
  it('reports a metrics file, with a step batch kept elsewhere', async () => {
    const r = await metrics([
      '--run',
      `${EVIDENCE}train__metrics.jsonl`,
      '--batch',
      `10=${EVIDENCE}step-10/batch.msgpack`,
      '--quiet',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const record = JSON.parse(readFileSync(join(r.out, 'r.json'), 'utf8')) as RunRecord;
    expect(Object.keys(record.trainer!.per_step)).toHaveLength(10);
    expect(record.shape!.per_step['10']!.advantage!.count).toBe(64);
    expect(record.rollouts_completed).toBe(640);
  });
});
