/**
 * Two or more runs on one page (`vime-metrics compare`): the settings that differ between them (from each
 * run's settings with their sources, else its config), and each per-step curve of the report drawn for
 * every run on one chart: one step axis for every chart, one value axis per chart, a legend naming the
 * runs. Pure: takes run records, returns a record and an HTML string.
 */
import { esc, type LineSeries, PALETTE } from './charts.js';
import { byNumber, cell, figure, note, PAGE_STYLE, section, table } from './html-parts.js';
import type { RunRecord } from './report.js';
import type { RunSetting } from './report-input.js';
import { TRAINER_METRICS } from './training.js';
import { smallChart } from './training-html.js';

/** One run of a comparison: its name on the page and its record. */
export interface CompareRun {
  label: string;
  /** Where it was read from (a run folder or a metrics file). */
  path?: string | undefined;
  record: RunRecord;
}

/** A setting whose value is not the same in every run; `null` where a run does not have it. */
export interface ConfigDifference {
  key: string;
  values: Array<{ value: unknown; source: string | null } | null>;
}

/** Every leaf of a config object under a dotted key (arrays are values). */
function flatten(value: unknown, prefix = ''): RunSetting[] {
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    return prefix ? [{ key: prefix, value, source: 'config' }] : [];
  return Object.entries(value as Record<string, unknown>).flatMap(([k, v]) =>
    flatten(v, prefix ? `${prefix}.${k}` : k),
  );
}

/** A run's settings: with their sources when the run kept them (`run-config.yaml`), else its config's leaves. */
function settingsOf(record: RunRecord): RunSetting[] {
  return record.run.settings ?? flatten(record.run.config);
}

/** The settings that differ between the runs (and how many are the same in all), in key order. */
export function configDifferences(runs: ReadonlyArray<CompareRun>): {
  differences: ConfigDifference[];
  same: number;
} {
  const maps = runs.map((r) => new Map(settingsOf(r.record).map((s) => [s.key, s])));
  const keys = [...new Set(maps.flatMap((m) => [...m.keys()]))].sort();
  const differences: ConfigDifference[] = [];
  for (const key of keys) {
    const values = maps.map((m) => {
      const s = m.get(key);
      return s ? { value: s.value, source: s.source } : null;
    });
    const texts = new Set(values.map((v) => (v ? JSON.stringify(v.value) : 'absent')));
    if (texts.size > 1) differences.push({ key, values });
  }
  return { differences, same: keys.length - differences.length };
}

/** A per-step curve of the report: its title, value label and how to read it from a record. */
interface Curve {
  title: string;
  yLabel: string;
  yMax?: number | undefined;
  at: (record: RunRecord) => Record<string, number | null>;
}

const perStep = <T>(
  rows: Record<string, T> | null | undefined,
  pick: (row: T) => number | null | undefined,
): Record<string, number | null> =>
  Object.fromEntries(Object.entries(rows ?? {}).map(([step, row]) => [step, pick(row) ?? null]));

const CURVES: Curve[] = [
  {
    title: 'mean reward',
    yLabel: 'mean reward',
    yMax: 1,
    at: (r) => perStep(r.quality, (q) => q.reward_mean),
  },
  { title: 'pass@1', yLabel: 'pass@1', yMax: 1, at: (r) => perStep(r.quality, (q) => q['pass@1']) },
  {
    title: 'truncation rate',
    yLabel: 'truncated / scored',
    yMax: 1,
    at: (r) => perStep(r.shape?.per_step, (s) => s.truncation_rate),
  },
  {
    title: 'turns per rollout (mean)',
    yLabel: 'turns',
    at: (r) => perStep(r.shape?.per_step, (s) => s.turns_mean),
  },
  {
    title: 'response length (mean tokens)',
    yLabel: 'tokens',
    at: (r) => perStep(r.shape?.per_step, (s) => s.response_tokens_mean),
  },
  {
    title: 'response length (max tokens)',
    yLabel: 'tokens',
    at: (r) => perStep(r.shape?.per_step, (s) => s.response_tokens_max),
  },
  {
    title: 'zero-variance groups (fraction)',
    yLabel: 'fraction of groups',
    yMax: 1,
    at: (r) => perStep(r.shape?.per_step, (s) => s.zero_variance_fraction),
  },
  {
    title: 'non-zero advantages (fraction of rollouts)',
    yLabel: 'fraction',
    yMax: 1,
    at: (r) =>
      perStep(r.shape?.per_step, (s) =>
        s.advantage ? (s.advantage.count - s.advantage.zero) / s.advantage.count : null,
      ),
  },
  { title: 'step time (s)', yLabel: 'seconds', at: (r) => perStep(r.steps, (s) => s.step_time_sec) },
  ...TRAINER_METRICS.map(
    (m): Curve => ({
      title: `trainer: ${m.label}`,
      yLabel: m.label,
      at: (r) => perStep(r.trainer?.per_step, (s) => s[m.name]),
    }),
  ),
];

const DASHES = [undefined, '6 3', '2 3', '8 3 2 3'];

/** Every curve some run has, each with every run's line on one chart; the curves no run has, by title. */
function curvesSection(runs: ReadonlyArray<CompareRun>): string {
  const data = CURVES.map((c) => ({ curve: c, byRun: runs.map((r) => c.at(r.record)) }));
  const steps = data.flatMap((d) => d.byRun.flatMap((m) => Object.keys(m).map(Number)));
  const xRange: [number, number] = steps.length ? [Math.min(...steps), Math.max(...steps)] : [0, 1];
  const hasValue = (m: Record<string, number | null>) => Object.values(m).some((v) => v !== null);
  const drawn = data.filter((d) => d.byRun.some(hasValue));
  const figures = drawn.map(({ curve, byRun }) => {
    const series: LineSeries[] = runs.map((r, i) => ({
      name: r.label,
      color: PALETTE[i % PALETTE.length]!,
      dash: DASHES[i % DASHES.length],
      points: Object.keys(byRun[i]!)
        .sort(byNumber)
        .map((step): [number, number | null] => [Number(step), byRun[i]![step]!]),
    }));
    const lacking = runs.filter((_, i) => !hasValue(byRun[i]!)).map((r) => r.label);
    return figure(
      smallChart({ title: curve.title, yLabel: curve.yLabel, yMax: curve.yMax, xRange, series }),
      `${esc(curve.title)}${lacking.length ? ` (not in ${esc(lacking.join(', '))})` : ''}`,
    );
  });
  const missing = data.filter((d) => !d.byRun.some(hasValue)).map((d) => d.curve.title);
  return (
    `<div class="small-multiples">${figures.join('')}</div>` +
    (missing.length ? note(`In no run: ${missing.join('; ')}.`) : '')
  );
}

function runsTable(runs: ReadonlyArray<CompareRun>): string {
  return table(
    [
      'run',
      'run id',
      'started',
      'mode',
      'engine',
      'steps',
      'rollouts (completed / failed / aborted)',
      'from',
    ],
    runs.map(({ label, record: r, path }) => [
      label,
      r.run.id,
      r.run.started_at,
      r.mode,
      r.engine ? `${r.engine.stand_in ? 'stand-in ' : ''}${r.engine.kind}` : null,
      Object.keys(r.quality).length || Object.keys(r.steps).length,
      `${cell(r.rollouts_completed)} / ${cell(r.rollouts_failed)} / ${cell(r.rollouts_aborted)}`,
      path ?? null,
    ]),
    { wrap: true },
  );
}

function configTable(runs: ReadonlyArray<CompareRun>): string {
  const { differences, same } = configDifferences(runs);
  const shown = (v: ConfigDifference['values'][number]) =>
    v === null
      ? 'absent'
      : `${typeof v.value === 'string' ? v.value : JSON.stringify(v.value)}${v.source ? ` (${v.source})` : ''}`;
  const withoutSettings = runs.filter((r) => !r.record.run.settings).map((r) => r.label);
  return (
    (differences.length
      ? table(
          ['setting', ...runs.map((r) => r.label)],
          differences.map((d) => [d.key, ...d.values.map(shown)]),
          { wrap: true },
        )
      : '<p>Every setting is the same in every run.</p>') +
    `<p>${differences.length} setting(s) differ, ${same} are the same.${withoutSettings.length ? ` ${esc(withoutSettings.join(', '))}: no run-config.yaml, compared on the config of the metrics file's run line.` : ''}</p>`
  );
}

/** The compare page: runs, the settings that differ, every per-step curve with a line per run. */
export function renderCompareHtml(
  runs: ReadonlyArray<CompareRun>,
  options: { title?: string | undefined } = {},
): string {
  const title = options.title ?? `Compare: ${runs.map((r) => r.label).join(' vs ')}`;
  const standIns = runs.filter((r) => r.record.engine?.stand_in);
  const banner = standIns.length
    ? `<p class="standin" data-stand-in="true"><strong>Stand-in engine</strong> in ${esc(standIns.map((r) => r.label).join(', '))} (${esc(standIns[0]!.record.engine!.label)}): rewards, tokens and turns there come from a scripted policy, not a model.</p>`
    : '';
  const json = JSON.stringify({
    runs: runs.map((r) => ({ label: r.label, path: r.path ?? null })),
    ...configDifferences(runs),
  }).replace(/</g, '\\u003c');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)}</title>
<style>
${PAGE_STYLE}
</style></head><body>
<h1>${esc(title)}</h1>
${banner}
${section('runs', 'Runs', runsTable(runs))}
${section('config', 'Config differences', configTable(runs))}
${section('curves', 'Per step, every run on one chart', curvesSection(runs))}
<script type="application/json" id="compare-record">${json}</script>
</body></html>
`;
}
