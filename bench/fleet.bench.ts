/**
 * `pnpm bench fleet [--rollouts N] [--backends K] [--max-starting S] [--docker unix:///…/docker.sock]`:
 * N concurrent rollouts of the coding-agent loop's shape (claim → turns of stand-in model call + command
 * → capture → fresh grading sandbox → release) on a fleet of K bubblewrap backends (plus a Docker
 * engine's backend when one is given, or when `DOCKER_HOST` names a local socket and this runs as root),
 * against the same rollouts on one bubblewrap provider in the same run. Then the fleet run again,
 * SIGKILLed once half its rollouts have claimed a sandbox, followed by one `reapOrphans` from here.
 * Each run is a child process (`fleet-driver.ts`), so its memory and its death are its own.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { reapAndCount, setup } from './fleet-setup.js';
import { type Bench, fmt, type Table } from './harness.js';

const here = dirname(fileURLToPath(import.meta.url));

interface Quantiles {
  n: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
}
interface Leftovers {
  folders: number;
  cgroups: number;
  processes: number;
  mounts: number;
  containers: number;
  total: number;
}
interface DriveResult {
  backends: string[];
  rollouts: number;
  completed: number;
  rewarded: number;
  failures: Record<string, number>;
  examples: Record<string, string>;
  wallS: number;
  claims: Quantiles;
  claimsPerS: number;
  queueWait: Quantiles;
  exec: Quantiles;
  model: Quantiles & { source: string };
  peakMemory: Quantiles;
  driverPeakRssBytes: number | null;
  perBackend?: Array<{ name: string; created: number; failed: number }> | undefined;
  leftovers: Leftovers;
}

function flags() {
  const { values } = parseArgs({
    args: process.argv.slice(2).filter((a) => a !== '--'),
    options: {
      rollouts: { type: 'string', default: '512' },
      backends: { type: 'string', default: '4' },
      'max-starting': { type: 'string', default: '8' },
      docker: { type: 'string' },
    },
    strict: false,
    allowPositionals: true,
  });
  const docker =
    (values.docker as string | undefined) ??
    (process.getuid?.() === 0 &&
    process.env.DOCKER_HOST?.startsWith('unix://') &&
    existsSync(process.env.DOCKER_HOST.slice('unix://'.length))
      ? process.env.DOCKER_HOST
      : undefined);
  return {
    rollouts: String(values.rollouts),
    backends: String(values.backends),
    maxStarting: String(values['max-starting']),
    docker,
  };
}

/** Runs the driver; `onLine` sees each JSON line it prints (and may kill it). */
function driver(args: string[], onLine: (line: Record<string, unknown>, kill: () => void) => void) {
  // From the sources through tsx, or the bundled driver (`fleet-bundle.sh` names it).
  const bundled = process.env.VIME_FLEET_DRIVER;
  const command = bundled
    ? [bundled, ...args]
    : ['--import', 'tsx', '--conditions=@vime/source', join(here, 'fleet-driver.ts'), ...args];
  const child = spawn(process.execPath, command, {
    cwd: bundled ? process.cwd() : join(here, '..'),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const kill = () => child.kill('SIGKILL');
  createInterface({ input: child.stdout }).on('line', (l) => {
    if (l.startsWith('{')) onLine(JSON.parse(l) as Record<string, unknown>, kill);
  });
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
}

async function drive(args: string[]): Promise<DriveResult> {
  let result: DriveResult | undefined;
  const exit = await driver(['drive', ...args], (l) => {
    if (l.type === 'result') result = l as unknown as DriveResult;
  });
  if (!result) throw new Error(`the fleet driver ended (${JSON.stringify(exit)}) without its result`);
  return result;
}

const ms = (v: number | null) => (v === null ? '—' : fmt.ms(v));
const q = (x: Quantiles) => `${ms(x.p50)} / ${ms(x.p99)}`;
const mib = (v: number | null) => (v === null ? '—' : fmt.bytes(v));
const causes = (r: DriveResult) =>
  Object.entries(r.failures)
    .map(([c, n]) => `${c}: ${n}`)
    .join(', ') || 'none';
const left = (l: Leftovers) =>
  `${l.total} (folders ${l.folders}, cgroups ${l.cgroups}, processes ${l.processes}, mounts ${l.mounts}, containers ${l.containers})`;
const ratio = (a: number | null, b: number | null) =>
  a === null || b === null || b === 0 ? '—' : fmt.ratio(a / b);

function comparison(n: number, single: DriveResult, fleet: DriveResult): Table {
  const rows: Array<Array<string | number>> = [
    ['backends', single.backends.join(', '), fleet.backends.join(', '), ''],
    [
      'rollouts completed (reward 1)',
      `${single.completed} (${single.rewarded})`,
      `${fleet.completed} (${fleet.rewarded})`,
      '',
    ],
    ['infrastructure failures by cause', causes(single), causes(fleet), ''],
    [
      'run wall time',
      `${single.wallS.toFixed(1)} s`,
      `${fleet.wallS.toFixed(1)} s`,
      ratio(fleet.wallS, single.wallS),
    ],
    [
      'claims/s (claims over the run wall time)',
      single.claimsPerS.toFixed(1),
      fleet.claimsPerS.toFixed(1),
      ratio(fleet.claimsPerS, single.claimsPerS),
    ],
    ['claim p50 / p99', q(single.claims), q(fleet.claims), ratio(fleet.claims.p50, single.claims.p50)],
    [
      'creation-queue wait p50 / p99 (max)',
      `${q(single.queueWait)} (${ms(single.queueWait.max)})`,
      `${q(fleet.queueWait)} (${ms(fleet.queueWait.max)})`,
      '',
    ],
    ['exec p50 / p99', q(single.exec), q(fleet.exec), ratio(fleet.exec.p50, single.exec.p50)],
    ['model turn p50 / p99', q(single.model), q(fleet.model), ''],
    [
      'peak memory per sandbox p50 / p99 / max (cgroup; sandboxes measured)',
      `${mib(single.peakMemory.p50)} / ${mib(single.peakMemory.p99)} / ${mib(single.peakMemory.max)} (${single.peakMemory.n})`,
      `${mib(fleet.peakMemory.p50)} / ${mib(fleet.peakMemory.p99)} / ${mib(fleet.peakMemory.max)} (${fleet.peakMemory.n})`,
      '',
    ],
    [
      'rollout process peak RSS (VmHWM), per rollout',
      `${mib(single.driverPeakRssBytes)}, ${mib((single.driverPeakRssBytes ?? 0) / n)}`,
      `${mib(fleet.driverPeakRssBytes)}, ${mib((fleet.driverPeakRssBytes ?? 0) / n)}`,
      '',
    ],
    ['leftovers after the run', left(single.leftovers), left(fleet.leftovers), ''],
  ];
  const accounted = (r: DriveResult) => r.completed + Object.values(r.failures).reduce((a, b) => a + b, 0);
  return {
    title: `${n} concurrent rollouts: one bubblewrap provider (reference) vs the fleet`,
    columns: ['measure', 'single provider (reference)', 'fleet', 'fleet vs single'],
    rows,
    checks: [
      {
        target: `every rollout completed or counted as an infrastructure failure (${n} each)`,
        measured: `single ${accounted(single)}, fleet ${accounted(fleet)}`,
        ok: accounted(single) === n && accounted(fleet) === n,
      },
      {
        target: 'nothing left after either run',
        measured: `single ${single.leftovers.total}, fleet ${fleet.leftovers.total}`,
        ok: single.leftovers.total === 0 && fleet.leftovers.total === 0,
      },
    ],
    notes: [
      `model: ${fleet.model.source} (the stand-in engine is a scripted policy behind SGLang's /generate, not a model).`,
      `fleet placement: ${(fleet.perBackend ?? []).map((b) => `${b.name} ${b.created} created, ${b.failed} failed`).join('; ')}.`,
      "claim: create as the rollout sees it; creation-queue wait: the claim less the backend create (its `create` event), i.e. waiting for the fleet's starting cap, placement or a token.",
      "peak memory: the kernel's peak charge of each bubblewrap sandbox's memory cgroup (v1 memory.max_usage_in_bytes, v2 memory.peak) read at release: its processes and the page cache they caused; a Docker backend's sandboxes are not measured.",
      ...Object.entries({ ...single.examples, ...fleet.examples }).map(([c, m]) => `failure ${c}: ${m}`),
    ],
  };
}

async function killed(base: string[], root: string, n: number, docker: string | undefined): Promise<Table> {
  const run = `bench-fleet-kill-${randomBytes(4).toString('hex')}`;
  const killAt = Math.max(1, Math.floor(n / 2));
  let claimedAtKill = 0;
  const exit = await driver(['drive', ...base, '--run', run], (l, kill) => {
    if (l.type === 'claimed' && claimedAtKill === 0 && Number(l.claimed) >= killAt) {
      claimedAtKill = Number(l.claimed);
      kill();
    }
  });
  const s = setup({
    mode: 'fleet',
    root,
    run,
    backends: Number(base[base.indexOf('--backends') + 1]),
    capacity: 1,
    docker,
    dockerCapacity: 1,
    maxStarting: 1,
    lifetimeMs: 3_600_000,
  });
  const reap = await reapAndCount(s, run);
  await s.close();
  return {
    title: `SIGKILL of the rollout process once ${killAt} of ${n} rollouts had claimed a sandbox, then one reapOrphans`,
    columns: ['measure', 'value'],
    rows: [
      ['rollout process ended by', exit.signal ?? `exit ${exit.code}`],
      ['rollouts that had claimed a sandbox at the kill', claimedAtKill],
      ['left after the kill, before the reap', left(reap.before)],
      ['removed by one fleet.reapOrphans({ run })', reap.removed],
      ['reap errors', reap.errors.join('; ') || 'none'],
      ['left after the reap', left(reap.after)],
    ],
    checks: [
      {
        target: 'the rollout process was SIGKILLed mid-run',
        measured: String(exit.signal),
        ok: exit.signal === 'SIGKILL',
      },
      {
        target: '0 left after one reap',
        measured: String(reap.after.total),
        ok: reap.after.total === 0 && reap.errors.length === 0,
      },
    ],
  };
}

const bench: Bench = {
  name: 'fleet',
  description:
    'N concurrent coding-agent-shaped rollouts on a fleet vs one provider, and a SIGKILL mid-run then one reap',
  async run() {
    const f = flags();
    const n = Number(f.rollouts);
    const root = mkdtempSync(join(tmpdir(), 'vime-bench-fleet-'));
    // The sandbox uid must reach each backend's folder under it.
    chmodSync(root, 0o755);
    const base = [
      '--root',
      root,
      '--rollouts',
      f.rollouts,
      '--backends',
      f.backends,
      '--max-starting',
      f.maxStarting,
    ];
    const withDocker = f.docker ? ['--docker', f.docker] : [];
    try {
      const single = await drive([
        ...base,
        '--mode',
        'single',
        '--run',
        `bench-fleet-single-${randomBytes(4).toString('hex')}`,
      ]);
      const fleet = await drive([
        ...base,
        ...withDocker,
        '--mode',
        'fleet',
        '--run',
        `bench-fleet-${randomBytes(4).toString('hex')}`,
      ]);
      const table = comparison(n, single, fleet);
      table.notes?.unshift(
        `machine: ${cpus().length} cores, ${cpus()[0]?.model ?? 'unknown CPU'}; fleet: ${f.backends} bubblewrap backends (capacity ${Math.ceil(n / Number(f.backends))} each)${f.docker ? ` and a Docker engine's backend at ${f.docker}` : ', no Docker engine'}, maxStarting ${f.maxStarting}.`,
      );
      return [table, await killed([...base, ...withDocker], root, n, f.docker)];
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  },
};
export default bench;
