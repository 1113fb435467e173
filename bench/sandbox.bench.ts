/**
 * Sandbox costs, each against a reference measured in the same run: exec overhead of every backend vs a
 * plain child-process spawn, warm claims vs cold creates, and a burst of 200 claims on a pool of 184.
 * Docker rows need an engine (scripts/docker-up.sh); without one they are reported as skipped.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  bubblewrapProvider,
  DEFAULT_DOCKER_IMAGE,
  defaultDockerSocket,
  dockerProvider,
  localProvider,
  type Sandbox,
  type SandboxProvider,
  WarmPool,
} from '@vime/sandbox';
import { type Bench, fmt, type Table, type Timing, time } from './harness.js';

const plainSpawn = () =>
  new Promise<void>((resolve, reject) => {
    const child = spawn('true', [], { stdio: ['pipe', 'pipe', 'pipe'] });
    child.once('error', reject);
    child.once('close', () => resolve());
  });

function percentile(samples: number[], q: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}

const dockerUp = existsSync(defaultDockerSocket());

async function execOverhead(rootDir: string): Promise<Table> {
  const iterations = 60;
  const reference = await time(plainSpawn, { iterations, warmup: 5 });
  const rows: Array<[string, Timing | undefined]> = [['plain spawn `true` (reference)', reference]];
  const backends: Array<[string, () => SandboxProvider, string | undefined]> = [
    ['local exec', () => localProvider({ rootDir }), undefined],
    ['bubblewrap exec (session)', () => bubblewrapProvider({ rootDir }), undefined],
    ['bubblewrap exec (per-exec)', () => bubblewrapProvider({ rootDir, execMode: 'per-exec' }), undefined],
  ];
  if (dockerUp) backends.push(['docker exec', () => dockerProvider(), DEFAULT_DOCKER_IMAGE]);
  const measured = new Map<string, Timing>();
  for (const [label, make, image] of backends) {
    const sbx = await make().create({ workdir: '/testbed', ...(image ? { image } : {}) });
    try {
      const t = await time(() => sbx.exec(['true']), {
        iterations: label.startsWith('docker') ? 30 : iterations,
      });
      measured.set(label, t);
      rows.push([label, t]);
    } finally {
      await sbx.terminate();
    }
  }
  if (!dockerUp) rows.push(['docker exec (no engine: run scripts/docker-up.sh)', undefined]);
  const session = measured.get('bubblewrap exec (session)')!;
  const ratio = session.median / reference.median;
  return {
    title: 'Exec overhead: `exec(["true"])` vs a plain child-process spawn',
    columns: ['variant', 'median', 'p99', 'vs plain spawn'],
    rows: rows.map(([label, t]) =>
      t
        ? [label, fmt.ms(t.median), fmt.ms(t.p99), fmt.ratio(t.median / reference.median)]
        : [label, '—', '—', '—'],
    ),
    checks: [
      { target: 'bubblewrap exec ≤ 2× plain spawn (median)', measured: fmt.ratio(ratio), ok: ratio <= 2 },
    ],
    notes: [
      'session: one bwrap per sandbox, each command forked inside it; per-exec: a fresh bwrap per command.',
      'docker exec = create + attached start + inspect over the Engine API socket.',
    ],
  };
}

async function warmVsCold(rootDir: string): Promise<Table> {
  const rows: Array<Array<string | number>> = [];
  const checks: NonNullable<Table['checks']> = [];
  const cases: Array<[string, () => SandboxProvider, string | undefined, number]> = [
    ['bubblewrap', () => bubblewrapProvider({ rootDir }), undefined, 20],
  ];
  if (dockerUp) cases.push(['docker', () => dockerProvider(), DEFAULT_DOCKER_IMAGE, 8]);
  for (const [name, make, image, n] of cases) {
    const provider = make();
    const spec = { workdir: '/testbed', ...(image ? { image } : {}) };
    const cold: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      const sbx = await provider.create(spec);
      cold.push(performance.now() - t0);
      await sbx.terminate();
    }
    const pool = new WarmPool(provider, { spec, size: n, maxLive: n * 2 });
    await pool.ready();
    const warm: number[] = [];
    const claimed: Sandbox[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      claimed.push(await pool.claim());
      warm.push(performance.now() - t0);
    }
    await pool.close();
    const [c50, c99, w50, w99] = [
      percentile(cold, 0.5),
      percentile(cold, 0.99),
      percentile(warm, 0.5),
      percentile(warm, 0.99),
    ];
    rows.push([`${name} cold create (reference)`, fmt.ms(c50), fmt.ms(c99), '1.00×']);
    rows.push([`${name} warm claim`, fmt.ms(w50), fmt.ms(w99), fmt.ratio(w50 / c50)]);
    checks.push({
      target: `${name}: warm claim p50 < cold create p50`,
      measured: `${fmt.ms(w50)} vs ${fmt.ms(c50)}`,
      ok: w50 < c50,
    });
  }
  if (!dockerUp) rows.push(['docker (no engine: run scripts/docker-up.sh)', '—', '—', '—']);
  return {
    title: 'Warm claim vs cold create latency',
    columns: ['path', 'p50', 'p99', 'vs cold p50'],
    rows,
    checks,
    notes: [
      'warm claim includes the isAlive check; cold create includes session start (bubblewrap) or container create + start (docker).',
    ],
  };
}

async function burst(rootDir: string): Promise<Table> {
  const provider = bubblewrapProvider({ rootDir });
  let maxLive = 0;
  let live = 0;
  provider.events.on('create', () => {
    live++;
    maxLive = Math.max(maxLive, live);
  });
  provider.events.on('terminate', () => {
    live--;
  });
  const pool = new WarmPool(provider, { spec: { workdir: '/testbed' }, size: 184, maxLive: 256 });
  const t0 = performance.now();
  await pool.ready();
  const warmupMs = performance.now() - t0;
  const latencies: Array<{ warm: boolean; ms: number }> = [];
  provider.events.on('claim', (e) => latencies.push({ warm: e.warm, ms: e.latencyMs }));
  const t1 = performance.now();
  const claimed = await Promise.all(Array.from({ length: 200 }, () => pool.claim()));
  const burstMs = performance.now() - t1;
  const stats = pool.stats();
  await Promise.all(claimed.map((s) => pool.release(s)));
  await pool.close();
  const warm = latencies.filter((l) => l.warm).map((l) => l.ms);
  const cold = latencies.filter((l) => !l.warm).map((l) => l.ms);
  const hitRate = stats.warmHits / 200;
  return {
    title: '200 concurrent claims on a bubblewrap pool of 184 (maxLive 256)',
    columns: ['measure', 'value'],
    rows: [
      ['pre-warm 184 sandboxes', fmt.ms(warmupMs)],
      ['all 200 claims served in', fmt.ms(burstMs)],
      ['warm hits / on-demand fallbacks', `${stats.warmHits} / ${stats.fallbacks}`],
      ['warm-hit rate', `${(hitRate * 100).toFixed(1)}%`],
      ['warm claim p50 / p99', `${fmt.ms(percentile(warm, 0.5))} / ${fmt.ms(percentile(warm, 0.99))}`],
      [
        'fallback claim p50 / p99 (reference)',
        cold.length ? `${fmt.ms(percentile(cold, 0.5))} / ${fmt.ms(percentile(cold, 0.99))}` : '—',
      ],
      ['most sandboxes alive at once', maxLive],
    ],
    checks: [
      {
        target: 'every claim served; warm-hit rate = 184/200',
        measured: `${claimed.length} claims, ${(hitRate * 100).toFixed(1)}%`,
        ok: claimed.length === 200 && stats.warmHits === 184,
      },
      { target: 'live sandboxes stay within maxLive (256)', measured: String(maxLive), ok: maxLive <= 256 },
    ],
  };
}

const bench: Bench = {
  name: 'sandbox',
  description:
    'exec overhead per backend vs plain spawn, warm vs cold claims, a 200-claim burst on a pool of 184',
  async run() {
    const rootDir = mkdtempSync(join(tmpdir(), 'vime-bench-sandbox-'));
    try {
      return [await execOverhead(rootDir), await warmVsCold(rootDir), await burst(rootDir)];
    } finally {
      rmSync(rootDir, { recursive: true, force: true });
    }
  },
};
export default bench;
