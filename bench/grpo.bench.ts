/**
 * @vime/grpo: group-normalized advantages and token broadcast against the same computation in numpy
 * and PyTorch (CPU), timed inside the Python process, and against a plain Float32Array copy of the
 * same bytes (the floor for writing the per-token array).
 */
import { spawnSync } from 'node:child_process';
import { broadcastToTokens, grpoAdvantages } from '@vime/grpo';
import { type Bench, fmt, type Table, time } from './harness.js';

interface Workload {
  name: string;
  groups: number;
  groupSize: number;
  tokens: number;
}

const WORKLOADS: Workload[] = [
  { name: '184 samples × 32,768 tokens', groups: 23, groupSize: 8, tokens: 32_768 },
  { name: '10,000 groups × 16 (32 tokens each)', groups: 10_000, groupSize: 16, tokens: 32 },
];

/** Loss mask with a 10-token tool observation every 97 tokens, the same pattern in every language. */
const maskAt = (t: number) => (t % 97 < 87 ? 1 : 0);

const PYTHON = `
import json, sys, time
spec = json.loads(sys.argv[1])
out = {}
def min_ms(fn, n):
    fn(); fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append((time.perf_counter() - t0) * 1000)
    return min(ts)
import numpy as np
B = spec["groups"] * spec["groupSize"]; T = spec["tokens"]; n = spec["groupSize"]; it = spec["iterations"]
rng = np.random.default_rng(0)
rewards = (rng.random(B) < 0.4).astype(np.float32)
lengths = np.full(B, T, dtype=np.int64)
mask = ((np.arange(B * T) % 97) < 87).astype(np.float32)
def np_adv():
    r = rewards.reshape(-1, n)
    c = r - r.mean(-1, keepdims=True)
    return (c / (r.std(-1, ddof=1, keepdims=True) + np.float32(1e-6))).reshape(-1)
adv = np_adv()
out["numpy"] = {
    "advantages": min_ms(np_adv, it),
    "allTokens": min_ms(lambda: np.repeat(adv, lengths), it),
    "maskedTokens": min_ms(lambda: np.repeat(adv, lengths) * mask, it),
    "version": np.__version__,
}
try:
    import torch
    tr = torch.from_numpy(rewards); tl = torch.from_numpy(lengths); tm = torch.from_numpy(mask)
    def t_adv():
        r = tr.reshape(-1, n)
        c = r - r.mean(-1, keepdim=True)
        return (c / (r.std(-1, keepdim=True) + 1e-6)).reshape(-1)
    ta = t_adv()
    out["torch"] = {
        "advantages": min_ms(t_adv, it),
        "allTokens": min_ms(lambda: torch.repeat_interleave(ta, tl), it),
        "maskedTokens": min_ms(lambda: torch.repeat_interleave(ta, tl) * tm, it),
        "version": torch.__version__, "threads": torch.get_num_threads(),
    }
except ImportError:
    pass
print(json.dumps(out))
`;

/** Alternate `reference` and `subject` runs: best time of each and the median per-pair ratio subject/reference. */
function paired(reference: () => unknown, subject: () => unknown, iterations: number) {
  for (let i = 0; i < 3; i++) {
    reference();
    subject();
  }
  const r: number[] = [];
  const s: number[] = [];
  const ratios: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const order = i % 2 === 0 ? [reference, subject] : [subject, reference];
    const took = order.map((fn) => {
      const t0 = performance.now();
      fn();
      return performance.now() - t0;
    });
    const [tr, ts] = i % 2 === 0 ? took : [took[1]!, took[0]!];
    r.push(tr!);
    s.push(ts!);
    ratios.push(ts! / tr!);
  }
  ratios.sort((a, b) => a - b);
  return { reference: Math.min(...r), subject: Math.min(...s), ratio: ratios[ratios.length >> 1]! };
}

interface PyTimes {
  advantages: number;
  allTokens: number;
  maskedTokens: number;
  version: string;
  threads?: number;
}

/** The first Python that has numpy, preferring one that also has torch. */
function findPython(): { exe: string; torch: boolean } | null {
  const candidates = [process.env.VIME_BENCH_PYTHON, 'python3', '/usr/bin/python3'].filter(
    Boolean,
  ) as string[];
  let numpyOnly: string | null = null;
  for (const exe of candidates) {
    const probe = spawnSync(
      exe,
      ['-c', 'import numpy\ntry:\n import torch; print("torch")\nexcept ImportError:\n print("numpy")'],
      {
        encoding: 'utf8',
      },
    );
    if (probe.status !== 0) continue;
    if (probe.stdout.trim() === 'torch') return { exe, torch: true };
    numpyOnly ??= exe;
  }
  return numpyOnly ? { exe: numpyOnly, torch: false } : null;
}

function runPython(exe: string, w: Workload, iterations: number): Record<string, PyTimes> {
  const result = spawnSync(exe, ['-c', PYTHON, JSON.stringify({ ...w, iterations })], {
    encoding: 'utf8',
    maxBuffer: 1 << 20,
  });
  if (result.status !== 0) throw new Error(`python failed: ${result.stderr}`);
  return JSON.parse(result.stdout) as Record<string, PyTimes>;
}

async function measure(w: Workload, python: { exe: string } | null): Promise<Table> {
  const B = w.groups * w.groupSize;
  const iterations = 25;
  let seed = 1;
  const random = () => {
    seed = (seed * 1103515245 + 12345) >>> 0;
    return seed / 2 ** 32;
  };
  const rewards = Float32Array.from({ length: B }, () => (random() < 0.4 ? 1 : 0));
  const lengths = new Int32Array(B).fill(w.tokens);
  const mask = Uint8Array.from({ length: B * w.tokens }, (_, t) => maskAt(t));
  const adv = grpoAdvantages(rewards, { groupSize: w.groupSize });
  const source = new Float32Array(B * w.tokens).fill(0.5);
  const target = new Float32Array(B * w.tokens);

  const best = async (fn: () => unknown) => (await time(fn, { iterations })).min;
  const newCopy = () => new Float32Array(source);
  const copyIntoTarget = () => target.set(source);
  const broadcast = (mode: 'allTokens' | 'maskedTokens', out?: Float32Array) => () =>
    broadcastToTokens(adv, lengths, mask, out ? { mode, out } : { mode });
  const ts = {
    advantages: await best(() => grpoAdvantages(rewards, { groupSize: w.groupSize })),
    allTokens: paired(newCopy, broadcast('allTokens'), iterations),
    maskedTokens: paired(newCopy, broadcast('maskedTokens'), iterations),
  };
  // The same broadcast written into a reused array (`out`), as a training loop would.
  const reused = {
    allTokens: paired(copyIntoTarget, broadcast('allTokens', target), iterations),
    maskedTokens: paired(copyIntoTarget, broadcast('maskedTokens', target), iterations),
  };
  // Writing the same number of bytes: what any broadcast must at least pay.
  const copy = Math.min(ts.allTokens.reference, ts.maskedTokens.reference);
  const copyInto = Math.min(reused.allTokens.reference, reused.maskedTokens.reference);
  const py = python ? runPython(python.exe, w, iterations) : {};
  const np = py.numpy;
  const torch = py.torch;

  const rows: Table['rows'] = [
    [
      'Vime (TypeScript, float32 torch-order sums)',
      fmt.ms(ts.advantages),
      fmt.ms(ts.allTokens.subject),
      fmt.ms(ts.maskedTokens.subject),
    ],
    [
      'Vime, into a reused array (`out`)',
      '—',
      fmt.ms(reused.allTokens.subject),
      fmt.ms(reused.maskedTokens.subject),
    ],
  ];
  if (np)
    rows.push([`numpy ${np.version}`, fmt.ms(np.advantages), fmt.ms(np.allTokens), fmt.ms(np.maskedTokens)]);
  if (torch) {
    rows.push([
      `PyTorch ${torch.version} CPU (${torch.threads} threads)`,
      fmt.ms(torch.advantages),
      fmt.ms(torch.allTokens),
      fmt.ms(torch.maskedTokens),
    ]);
  }
  rows.push(['Float32Array copy of the same bytes (new array)', '—', fmt.ms(copy), fmt.ms(copy)]);
  rows.push(['Float32Array copy of the same bytes (into existing)', '—', fmt.ms(copyInto), fmt.ms(copyInto)]);
  if (np) {
    rows.push([
      'speed-up of Vime vs numpy',
      fmt.ratio(np.advantages / ts.advantages),
      fmt.ratio(np.allTokens / ts.allTokens.subject),
      fmt.ratio(np.maskedTokens / ts.maskedTokens.subject),
    ]);
  }
  const checks: NonNullable<Table['checks']> = [];
  for (const mode of ['allTokens', 'maskedTokens'] as const) {
    if (np) {
      checks.push({
        target: `${mode} broadcast at least as fast as numpy`,
        measured: `${fmt.ms(ts[mode].subject)} vs ${fmt.ms(np[mode])} (${fmt.ratio(np[mode] / ts[mode].subject)})`,
        ok: ts[mode].subject <= np[mode],
      });
    }
    checks.push({
      target: `${mode} broadcast within 2× of a Float32Array copy (new array)`,
      measured: `${fmt.ratio(ts[mode].ratio)} (median of paired runs)`,
      ok: ts[mode].ratio <= 2,
    });
    checks.push({
      target: `${mode} broadcast into a reused array within 2× of a copy into an existing array`,
      measured: `${fmt.ratio(reused[mode].ratio)} (median of paired runs)`,
      ok: reused[mode].ratio <= 2,
    });
  }
  const notes = [
    `${B.toLocaleString('en')} samples in groups of ${w.groupSize}, ${(B * w.tokens).toLocaleString('en')} tokens (${fmt.bytes(B * w.tokens * 4)} of float32); times are the best of ${iterations} runs; the copy ratios are medians over runs that alternate the broadcast and the copy, so load from other processes hits both alike.`,
  ];
  if (!np)
    notes.push('numpy not found (install python3-numpy or set VIME_BENCH_PYTHON): no numpy comparison');
  if (np && !torch) notes.push('PyTorch not installed for this Python: no torch row');
  return {
    title: `advantages + token broadcast: ${w.name}`,
    columns: ['implementation', 'advantages', 'broadcast allTokens', 'broadcast maskedTokens'],
    rows,
    checks,
    notes,
  };
}

const bench: Bench = {
  name: 'grpo',
  description:
    'GRPO advantages and token broadcast vs numpy / PyTorch CPU (timed in-process) and a Float32Array copy',
  async run() {
    const python = findPython();
    const tables: Table[] = [];
    for (const w of WORKLOADS) tables.push(await measure(w, python));
    return tables;
  },
};

export default bench;
