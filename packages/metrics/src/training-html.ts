/** The report page's training sections: the trainer's curves and the rollouts' shape per step. */
import { esc, type LineSeries, lineChart, PALETTE, stackedBarChart } from './charts.js';
import { byNumber, figure, table } from './html-parts.js';
import type { RunRecord } from './report.js';
import { type StepShape, TRAINER_METRICS } from './training.js';

/** A small chart of the two-to-a-row grid: one metric over the steps. */
export function smallChart(options: {
  title: string;
  yLabel: string;
  series: LineSeries[];
  xRange: [number, number];
  yMax?: number | undefined;
}): string {
  return lineChart({
    title: options.title,
    xLabel: 'step',
    yLabel: options.yLabel,
    series: options.series,
    xRange: options.xRange,
    yMax: options.yMax,
    integerX: true,
    width: 400,
    height: 220,
  });
}

/** Three significant digits: trainer numbers span 1e-7 (a KL) to 1e1 (a grad norm). */
const sig = (v: number | null | undefined) =>
  v === null || v === undefined ? null : Number(v.toPrecision(3));

const stepRange = (ids: string[]): [number, number] => [Number(ids[0]), Number(ids.at(-1))];

/** The trainer's metrics, one small chart each (own value axis, one step axis), and a table. */
export function trainerSection(record: RunRecord): string {
  const t = record.trainer;
  if (!t) return '';
  const ids = Object.keys(t.per_step).sort(byNumber);
  const drawn = TRAINER_METRICS.filter((m) => t.keys[m.name] !== undefined);
  const charts = drawn.map((m, i) =>
    figure(
      smallChart({
        title: m.label,
        yLabel: m.label,
        xRange: stepRange(ids),
        series: [
          {
            name: t.keys[m.name]!,
            color: PALETTE[i % PALETTE.length]!,
            points: ids.map((id) => [Number(id), t.per_step[id]![m.name] ?? null]),
          },
        ],
      }),
      `${esc(m.label)}, read from <code>${esc(t.keys[m.name]!)}</code>`,
    ),
  );
  const missing = TRAINER_METRICS.filter((m) => t.missing[m.name] !== undefined);
  const missingNote = missing.length
    ? `<p class="absent" data-missing-trainer-metrics="${missing.map((m) => m.name).join(' ')}">Not reported by this trainer: ${missing
        .map((m) => `${esc(m.label)} (looked for ${esc(t.missing[m.name]!)})`)
        .join('; ')}.</p>`
    : '';
  return (
    `<p>From the ${esc(t.source)}.</p><div class="small-multiples">${charts.join('')}</div>${missingNote}` +
    table(
      ['step', ...drawn.map((m) => m.label)],
      ids.map((id) => [id, ...drawn.map((m) => sig(t.per_step[id]![m.name]))]),
    )
  );
}

type ShapeField = keyof Omit<StepShape, 'advantage'>;

/** The rollouts per step: response length, truncation, turns, zero-variance groups, advantages. */
export function shapeSection(record: RunRecord): string {
  const s = record.shape;
  if (!s) return '';
  const ids = Object.keys(s.per_step).sort(byNumber);
  const xRange = stepRange(ids);
  const line = (name: string, field: ShapeField, color: string, dash?: string): LineSeries => ({
    name,
    color,
    dash,
    points: ids.map((id) => [Number(id), s.per_step[id]![field] as number | null]),
  });
  const has = (field: ShapeField) => ids.some((id) => s.per_step[id]![field] !== null);
  const charts: Array<[string | false | '', string]> = [
    [
      has('response_tokens_mean') &&
        smallChart({
          title: 'response length (tokens)',
          yLabel: 'tokens',
          xRange,
          series: [
            line('mean', 'response_tokens_mean', PALETTE[0]!),
            line('max', 'response_tokens_max', PALETTE[0]!, '5 3'),
            line('trained (mean)', 'trained_tokens_mean', PALETTE[2]!),
          ],
        }),
      'Response length per rollout: tokens after the prompt over its rows (tool output included), the longest, and the tokens the model generated (loss mask 1).',
    ],
    [
      has('truncation_rate') &&
        smallChart({
          title: 'truncation rate',
          yLabel: 'truncated / scored',
          xRange,
          yMax: 1,
          series: [line('truncated', 'truncation_rate', PALETTE[1]!)],
        }),
      'Truncation rate: truncated over scored rollouts (turn or context limit reached).',
    ],
    [
      has('turns_mean') &&
        smallChart({
          title: 'turns per rollout',
          yLabel: 'turns',
          xRange,
          series: [line('mean', 'turns_mean', PALETTE[3]!), line('max', 'turns_max', PALETTE[3]!, '5 3')],
        }),
      'Turns per rollout: mean and most.',
    ],
    [
      has('zero_variance_fraction') &&
        smallChart({
          title: 'zero-variance groups',
          yLabel: 'fraction of groups',
          xRange,
          yMax: 1,
          series: [line('all rewards equal', 'zero_variance_fraction', PALETTE[4]!)],
        }),
      'Zero-variance groups: prompt groups whose scored rollouts all got the same reward (no learning signal).',
    ],
    [advantageChart(record, ids, xRange), 'Advantages trained on: median, p25–p75 shaded, min–max bars.'],
  ];
  const drawn = charts.filter((c): c is [string, string] => typeof c[0] === 'string' && c[0] !== '');
  const notes = s.notes.length
    ? `<ul class="notes">${s.notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul>`
    : '';
  return (
    `<div class="small-multiples">${drawn.map(([svg, caption]) => figure(svg, esc(caption))).join('')}</div>` +
    notes +
    advantageHistogram(record) +
    shapeTables(record, ids)
  );
}

/** Advantages per step: the median, the middle half as a band, the extremes as bars. */
function advantageChart(record: RunRecord, ids: string[], xRange: [number, number]): string {
  const s = record.shape!;
  const steps = ids.filter((id) => s.per_step[id]!.advantage !== null);
  if (steps.length === 0) return '';
  const a = (id: string) => s.per_step[id]!.advantage!;
  return smallChart({
    title: 'advantages (median, p25–p75 band, min–max bars)',
    yLabel: 'advantage',
    xRange,
    series: [
      {
        name: 'median advantage',
        color: PALETTE[5]!,
        points: steps.map((id) => [Number(id), a(id).p50]),
        band: steps.map((id): [number, number, number] => [Number(id), a(id).p25, a(id).p75]),
        errorBars: steps.map((id): [number, number, number] => [Number(id), a(id).min, a(id).max]),
      },
    ],
  });
}

/** Every advantage of the run in ten bins, one bar segment per step. */
function advantageHistogram(record: RunRecord): string {
  const h = record.shape!.advantage_histogram;
  if (!h) return '';
  const steps = Object.keys(h.counts).sort(byNumber);
  const labels = h.edges.slice(0, -1).map((lo) => String(sig(lo)));
  const chart = stackedBarChart({
    title: 'advantage distribution',
    xLabel: 'advantage',
    yLabel: 'rollouts',
    categories: labels,
    stacks: steps.map((id) => ({ name: `step ${id}`, values: h.counts[id]! })),
  });
  return figure(
    chart,
    `Each bar runs from its label to the next (the last to ${sig(h.edges.at(-1)!)}); each rollout counts once (its rows share one advantage); one colour per step.`,
  );
}

function shapeTables(record: RunRecord, ids: string[]): string {
  const s = record.shape!;
  const rollouts = table(
    [
      'step',
      'rollouts',
      'scored',
      'truncated',
      'trunc. rate',
      'turns mean',
      'turns max',
      'with rows',
      'resp. tokens mean',
      'resp. tokens max',
      'trained tokens mean',
    ],
    ids.map((id) => {
      const x = s.per_step[id]!;
      return [
        id,
        x.rollouts,
        x.scored,
        x.truncated,
        x.truncation_rate,
        x.turns_mean,
        x.turns_max,
        x.with_rows,
        sig(x.response_tokens_mean),
        x.response_tokens_max,
        sig(x.trained_tokens_mean),
      ];
    }),
  );
  const groups = table(
    [
      'step',
      'groups',
      'zero-var.',
      'fraction',
      'advantages',
      'zero',
      'mean',
      'min',
      'p25',
      'median',
      'p75',
      'max',
    ],
    ids.map((id) => {
      const x = s.per_step[id]!;
      const a = x.advantage;
      return [
        id,
        x.groups,
        x.zero_variance_groups,
        x.zero_variance_fraction,
        a?.count ?? 0,
        a?.zero ?? null,
        sig(a?.mean),
        sig(a?.min),
        sig(a?.p25),
        sig(a?.p50),
        sig(a?.p75),
        sig(a?.max),
      ];
    }),
  );
  return `<h3>Rollouts</h3>${rollouts}<h3>Groups and advantages</h3>${groups}`;
}
