/**
 * SWE-smith prep costs, each against a reference measured in the same run:
 * - grading cost per rollout on the offline task set (bubblewrap, gold patches): in a fresh sandbox from a
 *   warm pool (what the loop does) vs in the agent's own sandbox (the reference; never right for training);
 * - log parsing speed on a 50 MB pytest log vs the upstream parsers' own Python loops on the same text.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TaskSpec } from '@vime/core';
import { bubblewrapProvider, type Sandbox } from '@vime/sandbox';
import {
  buildOfflineTaskSet,
  captureAgentPatch,
  gradeInFreshSandbox,
  gradeSweTask,
  parseTestLog,
  SweEnvironments,
  type SweGradeResult,
  SwePools,
  setupSweTask,
} from '@vime/swe';
import { type Bench, fmt, type Table } from './harness.js';

/** The agent's part (not timed): set up, apply the gold patch in the work tree. */
async function agentDone(sandbox: Sandbox, task: TaskSpec, hideHistory: boolean) {
  const session = await setupSweTask(sandbox, task, { hideHistory });
  await sandbox.writeFile('/tmp/agent.diff', task.goldPatch!);
  await sandbox.exec('git apply /tmp/agent.diff');
  return session;
}

async function gradingCost(root: string): Promise<Table> {
  const built = performance.now();
  const set = await buildOfflineTaskSet({ dir: join(root, 'tasks'), force: true });
  const buildMs = performance.now() - built;
  const environments = await SweEnvironments.forDataset(set.jsonlPath);
  const tasks = set.tasks.slice(0, 12);
  const pools = new SwePools(bubblewrapProvider({ rootDir: join(root, 'sbx') }), tasks, {
    kind: 'bubblewrap',
    environments,
    replicas: 2,
    maxLivePerPool: 6,
  });
  const costs = { fresh: [] as number[], inPlace: [] as number[] };
  let resolved = 0;
  const tally = (r: SweGradeResult) => {
    if (r.status === 'graded' && r.reward === 1) resolved++;
  };
  try {
    await pools.ready();
    // Alternate the two ways on each task, so load on the machine hits both alike.
    for (const task of tasks) {
      {
        const sandbox = await pools.claim(task);
        const session = await agentDone(sandbox, task, true);
        const t0 = performance.now();
        const captured = await captureAgentPatch(session);
        await pools.release(sandbox);
        tally(await gradeInFreshSandbox(pools, task, captured));
        costs.fresh.push(performance.now() - t0);
      }
      {
        const sandbox = await pools.claim(task);
        try {
          const session = await agentDone(sandbox, task, false);
          const t0 = performance.now();
          const captured = await captureAgentPatch(session);
          tally(await gradeSweTask(sandbox, task, captured, { allowAgentSandbox: true }));
          costs.inPlace.push(performance.now() - t0);
        } finally {
          await pools.release(sandbox);
        }
      }
      await pools.ready();
    }
  } finally {
    await pools.close();
  }
  const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;
  const ratio = median(costs.fresh) / median(costs.inPlace);
  return {
    title: `Grading cost per rollout: ${tasks.length} offline instances, gold patch, bubblewrap (capture + grade)`,
    columns: ['where', 'median', 'p90-ish (max)', 'vs in place'],
    rows: [
      [
        'in the agent sandbox (reference)',
        fmt.ms(median(costs.inPlace)),
        fmt.ms(Math.max(...costs.inPlace)),
        fmt.ratio(1),
      ],
      [
        'fresh sandbox from a warm pool',
        fmt.ms(median(costs.fresh)),
        fmt.ms(Math.max(...costs.fresh)),
        fmt.ratio(ratio),
      ],
    ],
    checks: [
      {
        target: 'every gold patch resolves',
        measured: `${resolved}/${2 * tasks.length}`,
        ok: resolved === 2 * tasks.length,
      },
      { target: 'fresh-sandbox grading ≤ 1.5× in place', measured: fmt.ratio(ratio), ok: ratio <= 1.5 },
    ],
    notes: [
      `offline task set: ${set.rows.length} instances built from source in ${fmt.ms(buildMs)} (validation with real pytest)`,
      'fresh: capture, terminate the agent sandbox, claim a warm sandbox, check out the instance, pre-patch checks, apply, restore tests, hack probe, hide history, run, parse',
    ],
  };
}

/** A pytest log of about `bytes`: verbose progress lines, then the `-rA` summary, as both parser families read. */
function syntheticLog(bytes: number): string {
  const statuses = ['PASSED', 'PASSED', 'PASSED', 'FAILED', 'SKIPPED', 'ERROR', 'XFAIL'];
  const progress: string[] = [];
  const summary: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const status = statuses[i % statuses.length]!;
    const id = `tests/pkg${i % 97}/test_mod${i % 13}.py::TestClass${i % 7}::test_case_${i}[param-${i % 5}]`;
    const line = `${id} ${status}${' '.repeat(Math.max(1, 60 - id.length))}[${String(i % 100).padStart(3)}%]`;
    progress.push(line);
    summary.push(
      status === 'FAILED' ? `${status} ${id} - AssertionError: assert ${i} == ${i + 1}` : `${status} ${id}`,
    );
    size += line.length + summary.at(-1)!.length + 2;
  }
  return `${progress.join('\n')}\n=== short test summary info ===\n${summary.join('\n')}\n`;
}

/** The upstream loops (SWE-smith `PythonProfile.log_parser`, SWE-bench v4.1.0 `parse_log_pytest`), timed in CPython. */
const PYTHON_REFERENCE = `
import re, sys, time
log = open(sys.argv[1], encoding="utf-8").read()
statuses = ["FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL"]
def profile(log):
    m = {}
    for line in log.split("\\n"):
        for s in statuses:
            x = re.match(rf"^(\\S+)(\\s+){s}", line)
            if x:
                m[x.group(1)] = s
    return m
def rA(log):
    m = {}
    for line in log.split("\\n"):
        if any(line.startswith(s) for s in statuses):
            if line.startswith("FAILED"):
                line = line.replace(" - ", " ")
            t = line.split()
            if len(t) <= 1:
                continue
            m[t[1]] = t[0]
    return m
for f in (profile, rA):
    t = time.perf_counter(); n = len(f(log)); print(f.__name__, time.perf_counter() - t, n)
`;

async function parsing(root: string): Promise<Table> {
  const log = syntheticLog(50 * 1024 * 1024);
  const lines = log.split('\n').length;
  const path = join(root, 'big.log');
  writeFileSync(path, log);
  const script = join(root, 'reference.py');
  writeFileSync(script, PYTHON_REFERENCE);
  const py = Object.fromEntries(
    execFileSync('python3', [script, path], { encoding: 'utf8', maxBuffer: 1 << 20 })
      .trim()
      .split('\n')
      .map((l) => l.split(' '))
      .map(([name, secs, n]) => [name!, { ms: Number(secs) * 1000, n: Number(n) }]),
  ) as Record<string, { ms: number; n: number }>;

  const timeParse = (parser: Parameters<typeof parseTestLog>[1]) => {
    parseTestLog(log.slice(0, 1 << 20), parser); // warm up the regexes
    const t0 = performance.now();
    const n = Object.keys(parseTestLog(log, parser)).length;
    return { ms: performance.now() - t0, n };
  };
  const ours = {
    profile: timeParse({ parser: 'swesmith:swesmith/mewwts__addict.75284f95' }),
    rA: timeParse({ parser: 'pytest', ref: 'v4.1.0' }),
    v2: timeParse({ parser: 'pytest_v2', ref: 'main' }),
  };
  const rate = (ms: number) => fmt.rate((lines / ms) * 1000, ' lines');
  const rows: Table['rows'] = [
    [
      'SWE-smith default (verbose lines)',
      'CPython (reference)',
      fmt.ms(py.profile!.ms),
      rate(py.profile!.ms),
      py.profile!.n,
      fmt.ratio(1),
    ],
    [
      '',
      'Vime',
      fmt.ms(ours.profile.ms),
      rate(ours.profile.ms),
      ours.profile.n,
      fmt.ratio(py.profile!.ms / ours.profile.ms),
    ],
    [
      'SWE-bench v4.1.0 parse_log_pytest (-rA)',
      'CPython (reference)',
      fmt.ms(py.rA!.ms),
      rate(py.rA!.ms),
      py.rA!.n,
      fmt.ratio(1),
    ],
    ['', 'Vime', fmt.ms(ours.rA.ms), rate(ours.rA.ms), ours.rA.n, fmt.ratio(py.rA!.ms / ours.rA.ms)],
    ['SWE-bench main parse_log_pytest_v2', 'Vime', fmt.ms(ours.v2.ms), rate(ours.v2.ms), ours.v2.n, '—'],
  ];
  return {
    title: `Log parsing: ${fmt.bytes(log.length)} pytest log, ${lines.toLocaleString('en-US')} lines`,
    columns: ['parser', 'implementation', 'time', 'lines/s', 'ids', 'speed-up'],
    rows,
    checks: [
      {
        target: 'same ids as the upstream loop',
        measured: `${ours.profile.n} / ${py.profile!.n}, ${ours.rA.n} / ${py.rA!.n}`,
        ok: ours.profile.n === py.profile!.n && ours.rA.n === py.rA!.n,
      },
      {
        target: 'faster than CPython on the SWE-smith default parser',
        measured: fmt.ratio(py.profile!.ms / ours.profile.ms),
        ok: ours.profile.ms < py.profile!.ms,
      },
      // parse_log_pytest is split/startswith/dict work CPython does in C; the cost left is filling a 340k-key map.
      {
        target: 'parse_log_pytest within 0.75× of CPython',
        measured: fmt.ratio(py.rA!.ms / ours.rA.ms),
        ok: py.rA!.ms / ours.rA.ms >= 0.75,
      },
    ],
  };
}

const bench: Bench = {
  name: 'swe',
  description: 'SWE-smith grading cost per rollout (fresh sandbox vs in place), and test-log parsing speed',
  async run() {
    const root = mkdtempSync(join(tmpdir(), 'vime-bench-swe-'));
    execFileSync('chmod', ['755', root]);
    try {
      return [await parsing(root), await gradingCost(root)];
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  },
};
export default bench;
