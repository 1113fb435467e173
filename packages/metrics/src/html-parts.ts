/** The pieces every report page is made of: table cells, tables, figures, notes and sections. */
import { esc } from './charts.js';

/**
 * Table cells: numbers to at most 4 significant decimals (a pass@k of 0.708333… reads 0.7083); a value
 * under 0.001 keeps 3 significant digits (a loss of 2.36e-6 is not 0).
 */
export const cell = (v: unknown) =>
  v === null || v === undefined
    ? '—'
    : esc(
        typeof v === 'number' && !Number.isInteger(v)
          ? String(Math.abs(v) < 1e-3 ? Number(v.toPrecision(3)) : Number(v.toFixed(4)))
          : String(v),
      );

/** A table; `wrap`: every cell may break anywhere (paths and config values), else only the first column. */
export function table(
  headers: string[],
  rows: unknown[][],
  options: { wrap?: boolean | undefined } = {},
): string {
  return `<table${options.wrap ? ' class="wrap"' : ''}><thead><tr>${headers.map((h) => `<th>${esc(h)}</th>`).join('')}</tr></thead><tbody>${rows
    .map((r) => `<tr>${r.map((c) => `<td>${cell(c)}</td>`).join('')}</tr>`)
    .join('')}</tbody></table>`;
}

export const figure = (svgText: string, caption: string) =>
  `<figure>${svgText}<figcaption>${caption}</figcaption></figure>`;
export const note = (text: string) => `<p class="absent">${esc(text)}</p>`;
export const byNumber = (a: string, b: string) => Number(a) - Number(b);
export const ms = (v: number | null | undefined) => (v === null || v === undefined ? null : Math.round(v));

export function section(id: string, title: string, body: string, absent?: string): string {
  const content = body || note(absent ?? 'not in this run');
  return `<section id="${id}" data-section="${id}" data-empty="${body ? 'false' : 'true'}"><h2>${esc(title)}</h2>${content}</section>`;
}

/**
 * The pages' style: a column that fits a 1,280 px window; a cell too long for it (a path, a task id)
 * wraps anywhere rather than push the page wider; small charts sit side by side.
 */
export const PAGE_STYLE = `body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;padding:0 12px;color:#111827}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e5e7eb;padding-bottom:4px}h3{font-size:14px;margin:12px 0 4px}
figure{margin:12px 0}figcaption{color:#4b5563;font-size:12px}
svg{max-width:100%;height:auto;font-size:11px;fill:#374151}svg .axis{font-size:12px}
table{border-collapse:collapse;margin:8px 0;font-variant-numeric:tabular-nums;max-width:100%}th,td{border:1px solid #e5e7eb;padding:3px 8px;text-align:right}td:first-child,table.wrap td{overflow-wrap:anywhere}table.wrap td{text-align:left}
th{background:#f9fafb}td:first-child,th:first-child{text-align:left}.absent{color:#6b7280;font-style:italic}
.standin{background:#fef3c7;border:1px solid #f59e0b;padding:8px 12px;border-radius:4px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:8px 0}dt{color:#4b5563}dd{margin:0;overflow-wrap:anywhere}
details pre{background:#f9fafb;padding:8px;overflow:auto;font-size:12px}
.small-multiples{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:0 16px}`;
