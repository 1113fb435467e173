import type { RunRecord } from './report.js';
import { sparkline } from './sparkline.js';

const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#4b5563'];

const esc = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/** Round-number ticks across [lo, hi]; with `cover`, up to the first tick at or above `hi` (value axes). */
function niceTicks(lo: number, hi: number, count = 5, cover = false): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].find((m) => m * mag >= raw) ?? 10) * mag;
  const top = cover ? Math.ceil(hi / step - 1e-9) * step : hi;
  const ticks: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= top + step * 1e-9; v += step)
    ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

const fmtTick = (v: number) =>
  Math.abs(v) >= 1000 ? `${Number((v / 1000).toPrecision(3))}k` : String(Number(v.toPrecision(3)));

interface Frame {
  width: number;
  height: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
}

function axes(
  f: Frame,
  xTicks: Array<[number, string]>,
  yTicks: number[],
  y: (v: number) => number,
  labels: { x: string; y: string },
): string {
  const parts: string[] = [];
  for (const v of yTicks) {
    const py = y(v).toFixed(1);
    parts.push(
      `<line x1="${f.left}" x2="${f.width - f.right}" y1="${py}" y2="${py}" stroke="#e5e7eb"/>`,
      `<text x="${f.left - 6}" y="${py}" text-anchor="end" dominant-baseline="middle">${fmtTick(v)}</text>`,
    );
  }
  for (const [px, label] of xTicks) {
    parts.push(
      `<text x="${px.toFixed(1)}" y="${f.height - f.bottom + 16}" text-anchor="middle">${esc(label)}</text>`,
    );
  }
  parts.push(
    `<line x1="${f.left}" x2="${f.width - f.right}" y1="${f.height - f.bottom}" y2="${f.height - f.bottom}" stroke="#9ca3af"/>`,
    `<text x="${(f.left + f.width - f.right) / 2}" y="${f.height - 4}" text-anchor="middle" class="axis">${esc(labels.x)}</text>`,
    `<text x="12" y="${(f.top + f.height - f.bottom) / 2}" text-anchor="middle" class="axis" transform="rotate(-90 12 ${(f.top + f.height - f.bottom) / 2})">${esc(labels.y)}</text>`,
  );
  return parts.join('');
}

function legend(f: Frame, names: Array<[string, string]>): string {
  let x = f.left;
  return names
    .map(([name, color]) => {
      const out = `<rect x="${x}" y="6" width="10" height="10" fill="${color}"/><text x="${x + 14}" y="15">${esc(name)}</text>`;
      x += 24 + name.length * 7;
      return out;
    })
    .join('');
}

interface LineSeries {
  name: string;
  color?: string;
  points: Array<[number | null, number | null]>;
}

/** An SVG line chart; points with a `null` coordinate break the line. */
export function lineChart(options: {
  title: string;
  xLabel: string;
  yLabel: string;
  series: LineSeries[];
  yMax?: number;
  /** Only whole-number ticks on the x axis (steps). */
  integerX?: boolean;
  width?: number;
  height?: number;
}): string {
  const f: Frame = {
    width: options.width ?? 760,
    height: options.height ?? 260,
    left: 56,
    right: 16,
    top: 28,
    bottom: 40,
  };
  const xs = options.series.flatMap((s) => s.points.map((p) => p[0]).filter((v): v is number => v !== null));
  const ys = options.series.flatMap((s) => s.points.map((p) => p[1]).filter((v): v is number => v !== null));
  const xLo = xs.length ? Math.min(...xs) : 0;
  const xHi = xs.length ? Math.max(...xs) : 1;
  const yHi = options.yMax ?? Math.max(1e-9, ...ys);
  const yTicks = niceTicks(0, yHi, 5, true);
  const yTop = Math.max(yHi, yTicks[yTicks.length - 1] ?? yHi);
  const x = (v: number) =>
    f.left +
    (xHi > xLo ? ((v - xLo) / (xHi - xLo)) * (f.width - f.left - f.right) : (f.width - f.left - f.right) / 2);
  const y = (v: number) => f.height - f.bottom - (v / yTop) * (f.height - f.top - f.bottom);
  const xTicks = niceTicks(xLo, xHi, 6)
    .filter((v) => !options.integerX || Number.isInteger(v))
    .map((v): [number, string] => [x(v), fmtTick(v)]);
  const paths = options.series.map((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length]!;
    let d = '';
    let pen = false;
    for (const [px, py] of s.points) {
      if (px === null || py === null) {
        pen = false;
        continue;
      }
      d += `${pen ? 'L' : 'M'}${x(px).toFixed(1)},${y(py).toFixed(1)}`;
      pen = true;
    }
    const dots =
      s.points.length <= 40
        ? s.points
            .filter((p) => p[0] !== null && p[1] !== null)
            .map(
              (p) =>
                `<circle cx="${x(p[0]!).toFixed(1)}" cy="${y(p[1]!).toFixed(1)}" r="3" fill="${color}"/>`,
            )
            .join('')
        : '';
    return `<path d="${d}" fill="none" stroke="${color}" stroke-width="2"/>${dots}`;
  });
  return svg(f, options.title, [
    axes(f, xTicks, yTicks, y, { x: options.xLabel, y: options.yLabel }),
    ...paths,
    legend(
      f,
      options.series.map((s, i) => [s.name, s.color ?? PALETTE[i % PALETTE.length]!]),
    ),
  ]);
}

/** An SVG stacked bar chart, one bar per category. */
export function stackedBarChart(options: {
  title: string;
  xLabel: string;
  yLabel: string;
  categories: string[];
  stacks: Array<{ name: string; color?: string; values: Array<number | null> }>;
  width?: number;
  height?: number;
}): string {
  const f: Frame = {
    width: options.width ?? 760,
    height: options.height ?? 260,
    left: 56,
    right: 16,
    top: 28,
    bottom: 40,
  };
  const totals = options.categories.map((_, i) =>
    options.stacks.reduce((s, st) => s + (st.values[i] ?? 0), 0),
  );
  const yTicks = niceTicks(0, Math.max(1e-9, ...totals), 5, true);
  const yTop = Math.max(...totals, yTicks[yTicks.length - 1] ?? 1);
  const y = (v: number) => f.height - f.bottom - (v / yTop) * (f.height - f.top - f.bottom);
  const slot = (f.width - f.left - f.right) / Math.max(1, options.categories.length);
  const barW = Math.min(80, slot * 0.6);
  const bars: string[] = [];
  const xTicks: Array<[number, string]> = [];
  options.categories.forEach((cat, i) => {
    const cx = f.left + slot * (i + 0.5);
    xTicks.push([cx, cat]);
    let acc = 0;
    options.stacks.forEach((st, j) => {
      const v = st.values[i] ?? 0;
      if (v <= 0) return;
      const top = y(acc + v);
      bars.push(
        `<rect x="${(cx - barW / 2).toFixed(1)}" y="${top.toFixed(1)}" width="${barW.toFixed(1)}" height="${(y(acc) - top).toFixed(1)}" fill="${st.color ?? PALETTE[j % PALETTE.length]}"><title>${esc(`${st.name}: ${v}`)}</title></rect>`,
      );
      acc += v;
    });
  });
  return svg(f, options.title, [
    axes(f, xTicks, yTicks, y, { x: options.xLabel, y: options.yLabel }),
    ...bars,
    legend(
      f,
      options.stacks.map((s, j) => [s.name, s.color ?? PALETTE[j % PALETTE.length]!]),
    ),
  ]);
}

function svg(f: Frame, title: string, body: string[]): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${f.width} ${f.height}" width="${f.width}" height="${f.height}" role="img" aria-label="${esc(title)}"><title>${esc(title)}</title>${body.join('')}</svg>`;
}

/** Table cells: numbers to at most 4 significant decimals (a pass@k of 0.708333… reads 0.7083). */
const cell = (v: unknown) =>
  v === null || v === undefined
    ? '—'
    : esc(typeof v === 'number' && !Number.isInteger(v) ? String(Number(v.toFixed(4))) : String(v));

function table(headers: string[], rows: unknown[][]): string {
  return `<table><thead><tr>${headers.map((h) => `<th>${esc(h)}</th>`).join('')}</tr></thead><tbody>${rows
    .map((r) => `<tr>${r.map((c) => `<td>${cell(c)}</td>`).join('')}</tr>`)
    .join('')}</tbody></table>`;
}

/**
 * A self-contained HTML page for a run (no scripts, no external resources): per-engine queue depth and
 * running requests over time, step time breakdown, reward and pass@k per step, and the record as JSON.
 */
export function renderHtmlReport(record: RunRecord, options: { title?: string } = {}): string {
  const title = options.title ?? `Run ${record.name}`;
  const sections: string[] = [];
  const sat = record.saturation;

  const engineFigures = record.timeline.map((tl, i) =>
    figure(
      lineChart({
        title: `${tl.engine}: requests over time`,
        xLabel: tl.x === 'seconds' ? 'seconds from start' : 'reading',
        yLabel: 'requests',
        series: [
          {
            name: '#running-req',
            color: PALETTE[0]!,
            points: tl.t.map((t, j) => [t, tl.running[j] ?? null]),
          },
          { name: '#queue-req', color: PALETTE[1]!, points: tl.t.map((t, j) => [t, tl.queued[j] ?? null]) },
        ],
      }),
      `${tl.engine}: running peak ${cell(sat.running_req_peak_per_eng[i])}, median ${cell(sat.running_req_median_per_eng[i])}; queued peak ${cell(sat.queue_req_peak_per_eng[i])}, median ${cell(sat.queue_req_median_per_eng[i])}; KV peak ${cell(sat.kv_cache_frac_peak_per_eng[i])}`,
    ),
  );
  sections.push(
    `<section><h2>Engine saturation</h2>${
      engineFigures.length ? engineFigures.join('') : '<p class="empty">No engine readings.</p>'
    }${table(
      ['engine', 'readings', 'running peak', 'running median', 'queued peak', 'queued median', 'KV peak'],
      sat.engine_names.map((name, i) => [
        name,
        sat.samples_per_eng[i],
        sat.running_req_peak_per_eng[i],
        sat.running_req_median_per_eng[i],
        sat.queue_req_peak_per_eng[i],
        sat.queue_req_median_per_eng[i],
        sat.kv_cache_frac_peak_per_eng[i],
      ]),
    )}${scrapeTable(record)}</section>`,
  );

  const stepIds = Object.keys(record.steps).sort((a, b) => Number(a) - Number(b));
  const steps = stepIds.map((id) => record.steps[id]!);
  sections.push(
    `<section><h2>Step time</h2>${
      stepIds.length
        ? figure(
            stackedBarChart({
              title: 'step time breakdown (s)',
              xLabel: 'step',
              yLabel: 'seconds',
              categories: stepIds,
              stacks: [
                { name: 'train wait (rollout)', values: steps.map((s) => s.train_wait_time_sec) },
                { name: 'train', values: steps.map((s) => s.train_time_sec) },
                { name: 'update weights', values: steps.map((s) => s.update_weights_time_sec) },
              ],
            }),
            'step time = train wait + train; the weight update is shown on top',
          ) +
          table(
            [
              'step',
              'step (s)',
              'rollout (s)',
              'train (s)',
              'train wait (s)',
              'update weights (s)',
              'wait ratio',
            ],
            stepIds.map((id, i) => {
              const s = steps[i]!;
              return [
                id,
                s.step_time_sec,
                s.rollout_time_sec,
                s.train_time_sec,
                s.train_wait_time_sec,
                s.update_weights_time_sec,
                s.wait_time_ratio,
              ];
            }),
          )
        : '<p class="empty">No perf lines.</p>'
    }</section>`,
  );

  const qIds = Object.keys(record.quality).sort((a, b) => Number(a) - Number(b));
  const keys = [...new Set(qIds.flatMap((id) => Object.keys(record.quality[id]!)))].sort((a, b) =>
    a === 'reward_mean' ? -1 : b === 'reward_mean' ? 1 : Number(a.slice(5)) - Number(b.slice(5)),
  );
  sections.push(
    `<section><h2>Reward and pass@k</h2>${
      qIds.length
        ? figure(
            lineChart({
              title: 'reward and pass@k per step',
              xLabel: 'step',
              yLabel: 'value',
              yMax: 1,
              integerX: true,
              series: keys.map((key) => ({
                name: key === 'reward_mean' ? 'mean reward' : key,
                points: qIds.map((id): [number, number | null] => [
                  Number(id),
                  (record.quality[id] as Record<string, number | null>)[key] ?? null,
                ]),
              })),
            }),
            'pass@k: unbiased estimator over problems; mean reward over scored rollouts',
          ) +
          table(
            ['step', ...keys],
            qIds.map((id) => [
              id,
              ...keys.map((k) => (record.quality[id] as Record<string, number | null>)[k]),
            ]),
          )
        : '<p class="empty">No reward data.</p>'
    }</section>`,
  );

  const json = JSON.stringify(record, null, 2).replace(/</g, '\\u003c');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)}</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:820px;color:#111827}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e5e7eb;padding-bottom:4px}
.meta{color:#4b5563}figure{margin:12px 0}figcaption{color:#4b5563;font-size:12px}
svg{max-width:100%;height:auto;font-size:11px;fill:#374151}svg .axis{font-size:12px}
table{border-collapse:collapse;margin:8px 0;font-variant-numeric:tabular-nums}th,td{border:1px solid #e5e7eb;padding:3px 8px;text-align:right}
th{background:#f9fafb}td:first-child,th:first-child{text-align:left}.empty{color:#9ca3af}
details pre{background:#f9fafb;padding:8px;overflow:auto;font-size:12px}
</style></head><body>
<h1>${esc(title)}</h1>
<p class="meta">mode ${cell(record.mode)} · ${record.engines} engine${record.engines === 1 ? '' : 's'} · rollouts ${cell(record.rollouts_completed)} completed, ${cell(record.rollouts_aborted)} aborted${record.rollouts_failed !== null ? `, ${record.rollouts_failed} failed` : ''}</p>
${sections.join('\n')}
<details><summary>Run record (JSON)</summary><pre>${esc(JSON.stringify(record, null, 2))}</pre></details>
<script type="application/json" id="run-record">${json}</script>
</body></html>
`;
}

function scrapeTable(record: RunRecord): string {
  const windows = record.saturation.scrape_window_per_eng;
  if (!windows) return '';
  const ms = (v: number | null | undefined) =>
    v === null || v === undefined ? null : Number((v * 1000).toPrecision(3));
  return table(
    [
      'engine',
      'window (s)',
      'gen tok/s',
      'prefix hit',
      'TTFT p50 (ms)',
      'TTFT p99 (ms)',
      'ITL p50 (ms)',
      'ITL p99 (ms)',
      'preemptions',
    ],
    windows.map((w, i) => {
      const name = record.saturation.engine_names[i];
      if (!w) return [name, null, null, null, null, null, null, null, null];
      return [
        name,
        Number(w.seconds.toFixed(1)),
        w.seconds > 0 ? Math.round(w.generationTokens / w.seconds) : null,
        w.prefixCacheHitRate === null ? null : Number(w.prefixCacheHitRate.toFixed(3)),
        ms(w.ttft?.p50),
        ms(w.ttft?.p99),
        ms(w.itl?.p50),
        ms(w.itl?.p99),
        w.preemptions,
      ];
    }),
  );
}

function figure(svgText: string, caption: string): string {
  return `<figure>${svgText}<figcaption>${caption}</figcaption></figure>`;
}

/** A plain-text summary with sparklines, for CLIs. */
export function renderTerminalReport(record: RunRecord, options: { width?: number } = {}): string {
  const width = options.width ?? 40;
  const out: string[] = [];
  out.push(
    `run ${record.name}: mode ${record.mode ?? '?'}, ${record.engines} engine(s), rollouts ${record.rollouts_completed ?? '?'} completed / ${record.rollouts_aborted ?? '?'} aborted`,
  );
  const stepIds = Object.keys(record.steps).sort((a, b) => Number(a) - Number(b));
  if (stepIds.length) {
    out.push('step  step s  rollout s  train s  wait s  update s  wait ratio');
    for (const id of stepIds) {
      const s = record.steps[id]!;
      const c = (v: number | null, w: number) => (v === null ? '—' : String(v)).padStart(w);
      out.push(
        `${id.padEnd(4)}${c(s.step_time_sec, 8)}${c(s.rollout_time_sec, 11)}${c(s.train_time_sec, 9)}${c(s.train_wait_time_sec, 8)}${c(s.update_weights_time_sec, 10)}${c(s.wait_time_ratio, 12)}`,
      );
    }
    const series = stepIds.map((id) => record.steps[id]!.step_time_sec);
    out.push(`step time  ${sparkline(series)}`);
  }
  record.timeline.forEach((tl, i) => {
    const sat = record.saturation;
    out.push(
      `${tl.engine} #queue-req   (peak ${sat.queue_req_peak_per_eng[i] ?? '—'} / median ${sat.queue_req_median_per_eng[i] ?? '—'}): ${sparkline(tl.queued, { width })}`,
      `${tl.engine} #running-req (peak ${sat.running_req_peak_per_eng[i] ?? '—'} / median ${sat.running_req_median_per_eng[i] ?? '—'}): ${sparkline(tl.running, { width })}`,
    );
  });
  const qIds = Object.keys(record.quality).sort((a, b) => Number(a) - Number(b));
  if (qIds.length) {
    const last = record.quality[qIds[qIds.length - 1]!]!;
    const parts = Object.entries(last).map(([k, v]) => `${k}=${v === null ? '—' : Number(v.toFixed(4))}`);
    out.push(`quality (step ${qIds[qIds.length - 1]}): ${parts.join(' ')}`);
    out.push(
      `mean reward ${sparkline(
        qIds.map((id) => record.quality[id]!.reward_mean),
        { min: 0, max: 1 },
      )}`,
    );
  }
  return out.join('\n');
}
