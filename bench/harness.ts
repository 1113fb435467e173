/**
 * Benchmark harness. Each `bench/*.bench.ts` default-exports a `Bench`; `pnpm bench [name…]` runs them
 * and prints one table per measurement. Every table compares against a reference measured in the same
 * run (ratios, never absolute targets), and states the target it checks.
 */

export interface Table {
  title: string;
  columns: string[];
  rows: Array<Array<string | number>>;
  /** Target checks: what was required, the measured figure, and whether it holds. */
  checks?: Array<{ target: string; measured: string; ok: boolean }>;
  notes?: string[];
}

export interface Bench {
  name: string;
  /** One line saying what is measured. */
  description: string;
  run(): Promise<Table[]>;
}

export interface Timing {
  /** Median milliseconds per iteration. */
  median: number;
  p99: number;
  min: number;
  samples: number[];
}

/** Time `fn` after `warmup` runs; returns milliseconds per call. */
export async function time(
  fn: () => unknown,
  options: { iterations?: number; warmup?: number } = {},
): Promise<Timing> {
  const { iterations = 10, warmup = 2 } = options;
  for (let i = 0; i < warmup; i++) await fn();
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const t0 = performance.now();
    await fn();
    samples.push(performance.now() - t0);
  }
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
  return { median: at(0.5), p99: at(0.99), min: sorted[0]!, samples };
}

export const fmt = {
  ms: (v: number) =>
    v < 1 ? `${(v * 1000).toFixed(0)} µs` : v < 100 ? `${v.toFixed(2)} ms` : `${v.toFixed(0)} ms`,
  ratio: (v: number) => `${v.toFixed(2)}×`,
  bytes: (v: number) =>
    v < 1024 ? `${v} B` : v < 1 << 20 ? `${(v / 1024).toFixed(1)} KiB` : `${(v / (1 << 20)).toFixed(1)} MiB`,
  rate: (v: number, unit: string) =>
    v >= 1e6
      ? `${(v / 1e6).toFixed(2)} M${unit}/s`
      : v >= 1e3
        ? `${(v / 1e3).toFixed(1)} k${unit}/s`
        : `${v.toFixed(1)} ${unit}/s`,
};

export function renderTable(table: Table): string {
  const cells = [table.columns, ...table.rows.map((r) => r.map(String))];
  const widths = table.columns.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  const out = [
    `### ${table.title}`,
    '',
    line(table.columns),
    `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`,
  ];
  for (const r of cells.slice(1)) out.push(line(r));
  for (const c of table.checks ?? []) out.push(`${c.ok ? '✔' : '✘'} ${c.target}: ${c.measured}`);
  for (const n of table.notes ?? []) out.push(`  ${n}`);
  return out.join('\n');
}
