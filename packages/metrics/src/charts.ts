/** SVG charts for the self-contained report page: lines (with interval bands, error bars and marked peaks) and bars. */

export const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#4b5563'];

export const esc = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/**
 * Round-number ticks across [lo, hi]; with `cover` (value axes), from the last tick at or below `lo` to
 * the first at or above `hi`.
 */
function niceTicks(lo: number, hi: number, count = 5, cover = false): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].find((m) => m * mag >= raw) ?? 10) * mag;
  const top = cover ? Math.ceil(hi / step - 1e-9) * step : hi;
  const ticks: number[] = [];
  const first = cover ? Math.floor(lo / step + 1e-9) * step : Math.ceil(lo / step) * step;
  for (let v = first; v <= top + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

/** 1.5k for thousands; 2e-5 for the tiny values of losses, KL and learning rates. */
const fmtTick = (v: number) =>
  Math.abs(v) >= 1000
    ? `${Number((v / 1000).toPrecision(3))}k`
    : v !== 0 && Math.abs(v) < 1e-3
      ? v.toExponential(1).replace(/\.0e/, 'e')
      : String(Number(v.toPrecision(3)));

interface Frame {
  width: number;
  height: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
}

const frame = (width = 760, height = 260): Frame => ({
  width,
  height,
  left: 56,
  right: 16,
  top: 28,
  bottom: 40,
});

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
  for (const [px, label] of xTicks)
    parts.push(
      `<text x="${px.toFixed(1)}" y="${f.height - f.bottom + 16}" text-anchor="middle">${esc(label)}</text>`,
    );
  const midY = (f.top + f.height - f.bottom) / 2;
  parts.push(
    `<line x1="${f.left}" x2="${f.width - f.right}" y1="${f.height - f.bottom}" y2="${f.height - f.bottom}" stroke="#9ca3af"/>`,
    `<text x="${(f.left + f.width - f.right) / 2}" y="${f.height - 4}" text-anchor="middle" class="axis">${esc(labels.x)}</text>`,
    `<text x="12" y="${midY}" text-anchor="middle" class="axis" transform="rotate(-90 12 ${midY})">${esc(labels.y)}</text>`,
  );
  return parts.join('');
}

function legend(f: Frame, names: Array<[string, string, string | undefined]>): string {
  let x = f.left;
  return names
    .map(([name, color, dash]) => {
      const out = `<line x1="${x}" x2="${x + 14}" y1="11" y2="11" stroke="${color}" stroke-width="3"${dash ? ` stroke-dasharray="${dash}"` : ''}/><text x="${x + 18}" y="15">${esc(name)}</text>`;
      x += 28 + name.length * 7;
      return out;
    })
    .join('');
}

function svg(f: Frame, title: string, body: string[]): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${f.width} ${f.height}" width="${f.width}" height="${f.height}" role="img" aria-label="${esc(title)}"><title>${esc(title)}</title>${body.join('')}</svg>`;
}

export interface LineSeries {
  name: string;
  color?: string | undefined;
  /** SVG dash pattern: tells two series apart where they overlap. */
  dash?: string | undefined;
  /** Points with a `null` coordinate break the line. */
  points: Array<[number | null, number | null]>;
  /** A shaded interval under the line: `[x, lo, hi]`. */
  band?: Array<[number, number, number]> | undefined;
  /** Vertical interval bars: `[x, lo, hi]`. */
  errorBars?: Array<[number, number, number]> | undefined;
  /** Dot marker per point (default: when there are at most 40 points). */
  dots?: boolean | undefined;
  /** Thin line under the main one (e.g. the most of each downsampled slice). */
  envelope?: Array<[number | null, number | null]> | undefined;
}

export interface Marker {
  x: number;
  y: number;
  label: string;
  color?: string | undefined;
}

/** An SVG line chart. */
export function lineChart(options: {
  title: string;
  xLabel: string;
  yLabel: string;
  series: LineSeries[];
  yMax?: number | undefined;
  /** The bottom of the value axis (default: 0, or the lowest value when one is negative). */
  yMin?: number | undefined;
  /** The x axis' extent (default: the points'); charts meant to be read side by side share one. */
  xRange?: [number, number] | undefined;
  /** Only whole-number ticks on the x axis (steps). */
  integerX?: boolean | undefined;
  markers?: Marker[] | undefined;
  width?: number | undefined;
  height?: number | undefined;
}): string {
  const f = frame(options.width, options.height);
  const xs = options.series.flatMap((s) => s.points.map((p) => p[0]).filter((v): v is number => v !== null));
  const ys = options.series
    .flatMap((s) => [
      ...s.points.map((p) => p[1]),
      ...(s.band ?? []).map((b) => b[2]),
      ...(s.errorBars ?? []).map((b) => b[2]),
      ...(s.envelope ?? []).map((p) => p[1]),
    ])
    .filter((v): v is number => v !== null);
  const xLo = options.xRange?.[0] ?? (xs.length ? Math.min(...xs) : 0);
  const xHi = options.xRange?.[1] ?? (xs.length ? Math.max(...xs) : 1);
  const lows = options.series.flatMap((s) => [
    ...(s.band ?? []).map((b) => b[1]),
    ...(s.errorBars ?? []).map((b) => b[1]),
  ]);
  // The axis starts at 0 unless a value is negative (a loss, a KL estimate, an advantage).
  const yLo = options.yMin ?? Math.min(0, ...ys, ...lows);
  const yHi = options.yMax ?? Math.max(yLo + 1e-9, ...ys, ...(options.markers ?? []).map((m) => m.y));
  const yTicks = niceTicks(yLo, yHi, 5, true);
  const yBottom = Math.min(yLo, yTicks[0] ?? yLo);
  const yTop = Math.max(yHi, yTicks.at(-1) ?? yHi);
  const innerW = f.width - f.left - f.right;
  const x = (v: number) => f.left + (xHi > xLo ? ((v - xLo) / (xHi - xLo)) * innerW : innerW / 2);
  const y = (v: number) =>
    f.height - f.bottom - ((v - yBottom) / (yTop - yBottom)) * (f.height - f.top - f.bottom);
  const xTicks = niceTicks(xLo, xHi, 6)
    .filter((v) => !options.integerX || Number.isInteger(v))
    .map((v): [number, string] => [x(v), fmtTick(v)]);
  const pathOf = (points: Array<[number | null, number | null]>) => {
    let d = '';
    let pen = false;
    for (const [px, py] of points) {
      if (px === null || py === null) {
        pen = false;
        continue;
      }
      d += `${pen ? 'L' : 'M'}${x(px).toFixed(1)},${y(py).toFixed(1)}`;
      pen = true;
    }
    return d;
  };
  const body: string[] = [axes(f, xTicks, yTicks, y, { x: options.xLabel, y: options.yLabel })];
  if (yBottom < 0)
    body.push(
      `<line class="zero" x1="${f.left}" x2="${f.width - f.right}" y1="${y(0).toFixed(1)}" y2="${y(0).toFixed(1)}" stroke="#6b7280"/>`,
    );
  options.series.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length]!;
    if (s.band?.length) {
      const upper = s.band.map(([bx, , hi]) => `${x(bx).toFixed(1)},${y(hi).toFixed(1)}`);
      const lower = [...s.band].reverse().map(([bx, lo]) => `${x(bx).toFixed(1)},${y(lo).toFixed(1)}`);
      // A single step has no width: draw its interval as a bar instead.
      if (s.band.length === 1) s.errorBars = [...(s.errorBars ?? []), s.band[0]!];
      else
        body.push(
          `<polygon class="ci" data-series="${esc(s.name)}" points="${[...upper, ...lower].join(' ')}" fill="${color}" fill-opacity="0.15" stroke="none"/>`,
        );
    }
    if (s.envelope?.length)
      body.push(
        `<path class="envelope" data-series="${esc(s.name)}" d="${pathOf(s.envelope)}" fill="none" stroke="${color}" stroke-width="1" stroke-opacity="0.45"/>`,
      );
    body.push(
      `<path class="series" data-series="${esc(s.name)}" d="${pathOf(s.points)}" fill="none" stroke="${color}" stroke-width="2"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''}/>`,
    );
    for (const [bx, lo, hi] of s.errorBars ?? []) {
      const px = x(bx).toFixed(1);
      body.push(
        `<path class="ci" data-series="${esc(s.name)}" d="M${px},${y(lo).toFixed(1)}L${px},${y(hi).toFixed(1)}M${(x(bx) - 4).toFixed(1)},${y(lo).toFixed(1)}h8M${(x(bx) - 4).toFixed(1)},${y(hi).toFixed(1)}h8" stroke="${color}" stroke-width="1.5" fill="none"/>`,
      );
    }
    if (s.dots ?? s.points.length <= 40) {
      for (const [px, py] of s.points) {
        if (px !== null && py !== null)
          body.push(`<circle cx="${x(px).toFixed(1)}" cy="${y(py).toFixed(1)}" r="3" fill="${color}"/>`);
      }
    }
  });
  for (const m of options.markers ?? []) {
    const color = m.color ?? '#111827';
    const [px, py] = [x(m.x), y(m.y)];
    const anchor = px > f.width - 120 ? 'end' : 'start';
    body.push(
      `<g class="marker"><circle cx="${px.toFixed(1)}" cy="${py.toFixed(1)}" r="5" fill="none" stroke="${color}" stroke-width="2"/><text x="${(px + (anchor === 'end' ? -8 : 8)).toFixed(1)}" y="${Math.max(f.top + 10, py - 8).toFixed(1)}" text-anchor="${anchor}" fill="${color}">${esc(m.label)}</text></g>`,
    );
  }
  body.push(
    legend(
      f,
      options.series.map((s, i) => [s.name, s.color ?? PALETTE[i % PALETTE.length]!, s.dash]),
    ),
  );
  return svg(f, options.title, body);
}

/** An SVG stacked bar chart, one bar per category; a category can carry a label instead of a bar. */
export function stackedBarChart(options: {
  title: string;
  xLabel: string;
  yLabel: string;
  categories: string[];
  stacks: Array<{ name: string; color?: string | undefined; values: Array<number | null> }>;
  /** Text drawn in place of an empty bar (e.g. "resumed: not timed"). */
  notes?: Array<string | null> | undefined;
  width?: number | undefined;
  height?: number | undefined;
}): string {
  const f = frame(options.width, options.height);
  const totals = options.categories.map((_, i) =>
    options.stacks.reduce((s, st) => s + (st.values[i] ?? 0), 0),
  );
  const yTicks = niceTicks(0, Math.max(1e-9, ...totals), 5, true);
  const yTop = Math.max(...totals, yTicks.at(-1) ?? 1);
  const y = (v: number) => f.height - f.bottom - (v / yTop) * (f.height - f.top - f.bottom);
  const slot = (f.width - f.left - f.right) / Math.max(1, options.categories.length);
  const barW = Math.min(80, slot * 0.6);
  const bars: string[] = [];
  const xTicks: Array<[number, string]> = [];
  options.categories.forEach((cat, i) => {
    const cx = f.left + slot * (i + 0.5);
    xTicks.push([cx, cat]);
    const note = options.notes?.[i];
    if (note) {
      bars.push(
        `<text class="bar-note" x="${cx.toFixed(1)}" y="${(f.height - f.bottom - 10).toFixed(1)}" text-anchor="middle">${esc(note)}</text>`,
      );
      return;
    }
    let acc = 0;
    options.stacks.forEach((st, j) => {
      const v = st.values[i] ?? 0;
      if (v <= 0) return;
      const top = y(acc + v);
      bars.push(
        `<rect x="${(cx - barW / 2).toFixed(1)}" y="${top.toFixed(1)}" width="${barW.toFixed(1)}" height="${(y(acc) - top).toFixed(1)}" fill="${st.color ?? PALETTE[j % PALETTE.length]}"><title>${esc(`${st.name}: ${Number(v.toPrecision(4))}`)}</title></rect>`,
      );
      acc += v;
    });
  });
  return svg(f, options.title, [
    axes(f, xTicks, yTicks, y, { x: options.xLabel, y: options.yLabel }),
    ...bars,
    legend(
      f,
      options.stacks.map((s, j) => [s.name, s.color ?? PALETTE[j % PALETTE.length]!, undefined]),
    ),
  ]);
}
