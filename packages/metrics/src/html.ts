import { esc, lineChart, PALETTE, stackedBarChart } from './charts.js';
import { byNumber, cell, figure, ms, note, PAGE_STYLE, section, table } from './html-parts.js';
import type { RunRecord } from './report.js';
import { STACKED_PHASES } from './run-sections.js';
import { tokenStalenessHtml } from './token-staleness.js';
import { TOOL_CALL_ALARM_RATE, toolCallAlarm } from './tool-health.js';
import { shapeSection, trainerSection } from './training-html.js';

function countsTable(title: string, counts: Record<string, number> | null): string {
  if (!counts || Object.keys(counts).length === 0) return '';
  const rows = Object.entries(counts).sort((a, b) => b[1] - a[1]);
  return `<h3>${esc(title)}</h3>${table(['kind', 'rollouts'], rows)}`;
}

function header(record: RunRecord): string {
  const r = record.run;
  const engine = record.engine;
  const banner = engine?.stand_in
    ? `<p class="standin" data-stand-in="true"><strong>Stand-in engine.</strong> ${esc(engine.label)}. Rewards, tokens and engine load come from a scripted policy, not a model.</p>`
    : '';
  const facts: Array<[string, unknown]> = [
    ['run id', r.id],
    ['started', r.started_at],
    ['ended', r.ended_at],
    ['duration (s)', r.duration_sec],
    ['mode', record.mode],
    ['engines', `${record.engines}${engine ? ` × ${engine.stand_in ? 'stand-in ' : ''}${engine.kind}` : ''}`],
    ['code version', r.code_version],
    [
      'rollouts',
      `${cell(record.rollouts_completed)} completed, ${cell(record.rollouts_failed)} failed, ${cell(record.rollouts_aborted)} aborted`,
    ],
  ];
  const config = r.settings
    ? `<h3>Run config</h3>${table(
        ['setting', 'value', 'from'],
        r.settings.map((x) => [
          x.key,
          typeof x.value === 'string' ? x.value : JSON.stringify(x.value),
          x.source,
        ]),
      )}`
    : r.config === null || r.config === undefined
      ? note('no run config in this record')
      : `<details><summary>config</summary><pre>${esc(JSON.stringify(r.config, null, 2))}</pre></details>`;
  return `<section id="run" data-section="run" data-empty="false">${banner}<dl class="facts">${facts
    .map(([k, v]) => `<dt>${esc(k)}</dt><dd>${cell(v)}</dd>`)
    .join('')}</dl>${config}</section>`;
}

function qualitySection(record: RunRecord): string {
  const ids = Object.keys(record.quality).sort(byNumber);
  if (!ids.length) return '';
  const keys = [...new Set(ids.flatMap((id) => Object.keys(record.quality[id]!)))]
    .filter((k) => k.startsWith('pass@'))
    .sort((a, b) => Number(a.slice(5)) - Number(b.slice(5)));
  const value = (id: string, k: string) =>
    (record.quality[id] as unknown as Record<string, number | null>)[k] ?? null;
  const ci = (id: string, k: string) => record.quality[id]!.ci?.[k] ?? null;
  const intervals = (k: string) =>
    ids.flatMap((id): Array<[number, number, number]> => {
      const c = ci(id, k);
      return c ? [[Number(id), c[0], c[1]]] : [];
    });
  const reward = lineChart({
    title: 'mean reward per step (95% bootstrap interval)',
    xLabel: 'step',
    yLabel: 'mean reward',
    yMax: 1,
    integerX: true,
    series: [
      {
        name: 'mean reward',
        color: PALETTE[0]!,
        points: ids.map((id) => [Number(id), value(id, 'reward_mean')]),
        band: intervals('reward_mean'),
      },
    ],
  });
  const pass = keys.length
    ? lineChart({
        title: 'pass@k per step (95% bootstrap intervals)',
        xLabel: 'step',
        yLabel: 'pass@k',
        yMax: 1,
        integerX: true,
        series: keys.map((k, i) => ({
          name: k,
          color: PALETTE[(i + 1) % PALETTE.length]!,
          dash: i === 0 ? '6 3' : undefined,
          points: ids.map((id): [number, number | null] => [Number(id), value(id, k)]),
          errorBars: intervals(k),
        })),
      })
    : '';
  const anyCi = ids.some((id) => Object.values(record.quality[id]!.ci ?? {}).some((c) => c !== null));
  const scored = ids.map((id) => record.quality[id]!.scored).filter((n) => n !== undefined);
  return (
    figure(
      reward,
      anyCi
        ? `Shaded: the 95% interval of a seeded bootstrap over problems${scored.length ? ` (${scored.join(', ')} scored rollouts per step)` : ''}; a change inside it is noise.`
        : "No intervals: the source reports only each step's means.",
    ) +
    (pass
      ? figure(
          pass,
          'Unbiased pass@k over problems, bars: 95% bootstrap intervals. With 0/1 rewards pass@1 equals the mean reward, so it is drawn on its own chart (dashed).',
        )
      : '') +
    table(
      ['step', 'mean reward', 'interval', ...keys.flatMap((k) => [k, `${k} interval`])],
      ids.map((id) => {
        const fmt = (c: [number, number] | null) =>
          c ? `${Number(c[0].toFixed(3))} – ${Number(c[1].toFixed(3))}` : null;
        return [
          id,
          value(id, 'reward_mean'),
          fmt(ci(id, 'reward_mean')),
          ...keys.flatMap((k) => [value(id, k), fmt(ci(id, k))]),
        ];
      }),
    )
  );
}

function histogramSection(record: RunRecord): string {
  const h = record.reward_histogram;
  if (!h) return '';
  const labels = h.bins.map((b) => `${Number(b.lo.toFixed(2))}–${Number(b.hi.toFixed(2))}`);
  return figure(
    stackedBarChart({
      title: 'reward distribution',
      xLabel: 'reward',
      yLabel: 'rollouts',
      categories: labels,
      stacks: [{ name: 'scored rollouts', values: h.bins.map((b) => b.count) }],
    }),
    `${h.scored} scored rollouts; failed and aborted rollouts have no reward and are not counted here.`,
  );
}

function tasksSection(record: RunRecord): string {
  const rows = record.tasks;
  if (!rows?.length) return '';
  const ks = [...new Set(rows.flatMap((r) => Object.keys(r.pass_at_k)))].sort(
    (a, b) => Number(a.slice(5)) - Number(b.slice(5)),
  );
  return table(
    ['task', 'attempts', 'scored', 'solved', 'failed', 'aborted', 'mean reward', ...ks],
    rows.map((r) => [
      r.task,
      r.attempts,
      r.scored,
      r.solved,
      r.failed,
      r.aborted,
      r.mean_reward,
      ...ks.map((k) => r.pass_at_k[k] ?? null),
    ]),
  );
}

function failuresSection(record: RunRecord): string {
  if (record.failures_by_cause === null) return '';
  const failures = Object.keys(record.failures_by_cause).length
    ? countsTable(
        'Failed and aborted rollouts by cause (no reward: never counted as 0)',
        record.failures_by_cause,
      )
    : '<p>No rollout failed or was aborted.</p>';
  const hacks =
    record.hacks_by_kind && Object.keys(record.hacks_by_kind).length
      ? countsTable('Detected hacks by kind', record.hacks_by_kind)
      : '<p>No hack detected.</p>';
  return failures + hacks + countsTable('Grade outcomes', record.grade_outcomes);
}

function stalenessSection(record: RunRecord): string {
  const s = record.staleness;
  if (!s) return '';
  return (
    table(
      ['versions behind the newest of the step', 'rollouts'],
      Object.entries(s.lag).sort(([a], [b]) => byNumber(a, b)),
    ) +
    `<p>${s.rollouts_with_versions} rollouts carry weight versions; ${s.mixed_versions} spanned more than one; most behind: ${s.max_lag}.</p>` +
    tokenStalenessHtml(s.tokens)
  );
}

function tokenAuditSection(record: RunRecord): string {
  const a = record.token_audit;
  if (!a) return '';
  const share =
    a.share_of_handoff === null ? '' : `; ${(a.share_of_handoff * 100).toFixed(2)}% of hand-off time`;
  return (
    `<p>${a.samples} samples (${a.tokens} trained tokens) of ${a.rollouts} rollouts checked against the captured turns; ${a.failed_rollouts} rollouts made infrastructure failures (${a.failed_samples} samples)${share}.</p>` +
    (Object.keys(a.causes).length ? countsTable('Failed rollouts by cause', a.causes) : '')
  );
}

function toolCallsSection(record: RunRecord): string {
  const t = record.tool_calls;
  if (!t) return '';
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const rows = [...t.steps, { ...t.total, step: 'all' }].map((s) => [
    s.step,
    s.emitted,
    s.parsed,
    s.malformed,
    s.unknownTool,
    s.badArguments,
    pct(s.failureRate),
    `${s.noToolRollouts}/${s.rollouts}`,
  ]);
  const alarms = t.steps.filter((s) => toolCallAlarm(s.step, s) !== undefined).map((s) => s.step);
  const alarm = alarms.length
    ? `<p><strong>Alarm:</strong> more than ${pct(TOOL_CALL_ALARM_RATE)} of the tool calls failed in step ${alarms.join(', ')}: check that the harness and the proxy use the same tool-call format.</p>`
    : '';
  return (
    alarm +
    table(
      [
        'step',
        'emitted',
        'parsed',
        'malformed',
        'unknown tool',
        'bad arguments',
        'failed',
        'rollouts without a tool call',
      ],
      rows,
    )
  );
}

function phasesSection(record: RunRecord): string {
  const p = record.phases;
  if (!p) return '';
  const ids = Object.keys(p.per_step).sort(byNumber);
  const names: Record<string, string> = {
    claim: 'claim',
    setup: 'setup',
    model: 'agent turns (model)',
    exec: 'exec (commands)',
    agent_other: 'agent (harness)',
    eval: 'grading',
  };
  const chart = stackedBarChart({
    title: 'mean time per rollout by phase (s)',
    xLabel: 'step',
    yLabel: 'seconds',
    categories: ids,
    stacks: STACKED_PHASES.map((ph) => ({
      name: names[ph]!,
      values: ids.map((id) => (p.per_step[id]![ph] ?? 0) / 1000),
    })),
  });
  const rows = Object.entries(p.summary).map(([ph, s]) => [
    ph === 'eval' ? 'eval (grading)' : ph,
    s.count,
    ms(s.p50),
    ms(s.p95),
    ms(s.p99),
    ms(s.max),
  ]);
  rows.push([
    'exec, per command',
    p.exec_call.count,
    ms(p.exec_call.p50),
    ms(p.exec_call.p95),
    ms(p.exec_call.p99),
    ms(p.exec_call.max),
  ]);
  const handoff = Object.entries(record.steps).filter(([, s]) => s.train_time_sec !== null);
  return (
    figure(
      chart,
      'Phases do not overlap: agent turns are the model calls, exec the sandbox commands, harness the rest of the agent loop.',
    ) +
    table(['phase', 'count', 'p50 (ms)', 'p95 (ms)', 'p99 (ms)', 'max (ms)'], rows) +
    (handoff.length
      ? `<p>Hand-off per step (s): ${handoff.map(([id, s]) => `step ${id}: ${s.train_time_sec}`).join(', ')} (the step-time chart's train bar).</p>`
      : '')
  );
}

function sandboxSection(record: RunRecord): string {
  const s = record.sandbox;
  if (!s) return '';
  const row = (
    name: string,
    x: { count: number; p50: number | null; p99: number | null; max: number | null } | null,
  ) => (x ? [name, x.count, ms(x.p50), ms(x.p99), ms(x.max)] : [name, 0, null, null, null]);
  return (
    `<p>${s.claims} claims: ${s.warm === null ? 'warm/cold not recorded' : `${s.warm} warm, ${s.cold} cold (created on demand)`}.</p>` +
    table(
      ['claims', 'count', 'p50 (ms)', 'p99 (ms)', 'max (ms)'],
      [row('all', s.latency_ms.all), row('warm', s.latency_ms.warm), row('cold', s.latency_ms.cold)],
    )
  );
}

function saturationSection(record: RunRecord): string {
  const sat = record.saturation;
  if (!record.timeline.length) return '';
  const figures = record.timeline.map((tl, i) => {
    const at = (vs: Array<number | null>) =>
      tl.t.map((t, j): [number | null, number | null] => [t, vs[j] ?? null]);
    const markers = [
      tl.peaks.running && tl.peaks.running.t !== null
        ? {
            x: tl.peaks.running.t,
            y: tl.peaks.running.value,
            label: `running peak ${tl.peaks.running.value}`,
            color: PALETTE[0]!,
          }
        : null,
      tl.peaks.queued && tl.peaks.queued.t !== null && tl.peaks.queued.value > 0
        ? {
            x: tl.peaks.queued.t,
            y: tl.peaks.queued.value,
            label: `queue peak ${tl.peaks.queued.value}`,
            color: PALETTE[1]!,
          }
        : null,
    ].filter((m) => m !== null);
    const downsampled = tl.running.some((v, j) => v !== null && v !== tl.running_max[j]);
    return figure(
      lineChart({
        title: `${tl.engine}: requests over time`,
        xLabel: tl.x === 'seconds' ? 'seconds from start' : 'reading',
        yLabel: 'requests',
        markers,
        series: [
          {
            name: '#running-req',
            color: PALETTE[0]!,
            points: at(tl.running),
            dots: false,
            ...(downsampled ? { envelope: at(tl.running_max) } : {}),
          },
          {
            name: '#queue-req',
            color: PALETTE[1]!,
            points: at(tl.queued),
            dots: false,
            ...(downsampled ? { envelope: at(tl.queued_max) } : {}),
          },
        ],
      }),
      `${esc(tl.engine)}: ${sat.samples_per_eng[i]} readings${tl.interval_ms !== null ? `, one every ${Math.round(tl.interval_ms)} ms (median)` : ''}; running peak ${cell(sat.running_req_peak_per_eng[i])}, median ${cell(sat.running_req_median_per_eng[i])}; queued peak ${cell(sat.queue_req_peak_per_eng[i])}, median ${cell(sat.queue_req_median_per_eng[i])}; KV peak ${cell(sat.kv_cache_frac_peak_per_eng[i])}.${downsampled ? ' Thin lines: the most of each slice.' : ''}${tl.gaps ? ` ${tl.gaps} gap(s): no readings there.` : ''}`,
    );
  });
  const tokens = record.tokens
    ? `<p>Tokens: ${Math.round(record.tokens.per_second)} output tokens/s${record.tokens.output ? ` (${record.tokens.output} over ${Number(record.tokens.seconds.toFixed(1))} s)` : ''}, from ${esc(record.tokens.source)}.</p>`
    : '';
  return (
    figures.join('') +
    tokens +
    table(
      [
        'engine',
        'readings',
        'interval (ms)',
        'running peak',
        'running median',
        'queued peak',
        'queued median',
        'KV peak',
      ],
      sat.engine_names.map((name, i) => [
        name,
        sat.samples_per_eng[i],
        ms(sat.sample_interval_ms_per_eng[i]),
        sat.running_req_peak_per_eng[i],
        sat.running_req_median_per_eng[i],
        sat.queue_req_peak_per_eng[i],
        sat.queue_req_median_per_eng[i],
        sat.kv_cache_frac_peak_per_eng[i],
      ]),
    ) +
    scrapeTable(record)
  );
}

function stepSection(record: RunRecord): string {
  const ids = Object.keys(record.steps).sort(byNumber);
  if (!ids.length) return '';
  const steps = ids.map((id) => record.steps[id]!);
  const notes = record.step_notes;
  const noteList = (['rollout', 'train_wait', 'train', 'update_weights'] as const)
    .filter((p) => notes[p])
    .map((p) => `<li><strong>${p.replace('_', ' ')}</strong>: ${esc(notes[p]!)}</li>`)
    .join('');
  const chart = stackedBarChart({
    title: 'step time: rollout (train wait), train, weight update (s)',
    xLabel: 'step',
    yLabel: 'seconds',
    categories: ids,
    notes: steps.map((s) => (s.resumed ? 'resumed: not timed here' : null)),
    stacks: [
      { name: 'train wait (rollout)', values: steps.map((s) => s.train_wait_time_sec) },
      { name: 'train', values: steps.map((s) => s.train_time_sec) },
      { name: 'update weights', values: steps.map((s) => s.update_weights_time_sec) },
    ],
  });
  return (
    figure(chart, 'step time = train wait + train; the weight update is drawn on top.') +
    (noteList ? `<ul class="notes">${noteList}</ul>` : '') +
    table(
      ['step', 'step (s)', 'rollout (s)', 'train wait (s)', 'train (s)', 'update weights (s)', 'wait ratio'],
      ids.map((id, i) => {
        const s = steps[i]!;
        return s.resumed
          ? [id, 'resumed', null, null, null, null, null]
          : [
              id,
              s.step_time_sec,
              s.rollout_time_sec,
              s.train_wait_time_sec,
              s.train_time_sec,
              s.update_weights_time_sec,
              s.wait_time_ratio,
            ];
      }),
    )
  );
}

function capacitySection(record: RunRecord): string {
  const c = record.capacity;
  if (!c?.points.length) return '';
  const here = c.points.find((p) => p.engines === record.engines);
  const chart = lineChart({
    title: 'predicted step time by engine count',
    xLabel: 'engines',
    yLabel: 'step time (s)',
    integerX: true,
    markers: here
      ? [
          {
            x: here.engines,
            y: here.step_time_sec,
            label: `this run's engines: ${Math.round(here.step_time_sec)} s`,
          },
        ]
      : [],
    series: [
      {
        name: `step time (${c.mode})`,
        color: PALETTE[2]!,
        points: c.points.map((p) => [p.engines, p.step_time_sec]),
      },
    ],
  });
  return (
    figure(chart, `A discrete-event model of the step (${esc(c.source)}).`) +
    table(
      ['engines', 'step (s)', 'rollout (s)', 'queue peak'],
      c.points.map((p) => [p.engines, p.step_time_sec, p.rollout_time_sec ?? null, p.queue_req_peak ?? null]),
    )
  );
}

function scrapeTable(record: RunRecord): string {
  const windows = record.saturation.scrape_window_per_eng;
  if (!windows) return '';
  const toMs = (v: number | null | undefined) =>
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
        toMs(w.ttft?.p50),
        toMs(w.ttft?.p99),
        toMs(w.itl?.p50),
        toMs(w.itl?.p99),
        w.preemptions,
      ];
    }),
  );
}

function specDecodeSection(record: RunRecord): string {
  const d = record.spec_decode;
  if (!d) return '';
  const rate = (x: number | undefined) => (x === undefined ? '' : `${(100 * x).toFixed(1)}%`);
  const rows = [...d.steps, { ...d.total, step: 'all' }].map((s) => [
    s.step,
    s.acceptedTokens,
    s.verifyPasses,
    s.acceptLength.toFixed(2),
    s.draftTokens ?? '',
    rate(s.acceptRate),
    s.source,
  ]);
  const accepted = d.total.acceptedTokens > 0;
  const standIn = record.engine?.stand_in
    ? ' <strong>Stand-in engine: these are its scripted figures; nothing was drafted or verified.</strong>'
    : '';
  return (
    `<p>${accepted ? `Speculation was on: ${d.total.acceptedTokens} draft tokens accepted over ${d.total.verifyPasses} verification passes.` : '<strong>No draft token was accepted</strong> over the run.'} Acceptance length is tokens per verification pass (1 + accepted / passes).${standIn}</p>` +
    table(
      [
        'step',
        'accepted draft tokens',
        'verify passes',
        'acceptance length',
        'draft tokens',
        'accepted of drafts',
        'source',
      ],
      rows,
    )
  );
}

/** The report's sections in page order: id, heading, and the record key whose `absent` note explains an empty one. */
export const REPORT_SECTIONS = [
  ['quality', 'Reward and pass@k', 'quality'],
  ['trainer', 'Trainer: loss, KL, entropy, clipping, gradients, learning rate, log-prob gap', 'trainer'],
  ['shape', 'Rollouts per step: length, truncation, turns, groups, advantages', 'shape'],
  ['reward-histogram', 'Reward distribution', 'reward_histogram'],
  ['tasks', 'Per-task results', 'tasks'],
  ['failures', 'Failures, aborts and hacks', 'tasks'],
  ['staleness', 'Staleness (weight versions)', 'staleness'],
  ['phases', 'Per-phase timing', 'phases'],
  ['sandbox', 'Sandbox claims', 'sandbox'],
  ['saturation', 'Engine saturation', 'saturation'],
  ['steps', 'Step time', 'steps'],
  ['capacity', 'Capacity: engines vs step time', 'capacity'],
  ['work-units', 'Work units', 'work_units'],
  ['token-audit', 'Token audit at hand-off', 'token_audit'],
  ['tool-calls', 'Tool-call health', 'tool_calls'],
  ['spec-decode', 'Speculative decoding', 'spec_decode'],
] as const;

/**
 * A self-contained HTML page for a run (no scripts, no external resources): the run's header (a
 * stand-in engine labelled as such), every section of the record with charts and tables, a note where
 * a section has no data in this run, and the record as JSON.
 */
export function renderHtmlReport(record: RunRecord, options: { title?: string | undefined } = {}): string {
  const title = options.title ?? `Run ${record.name}`;
  const bodies: Record<(typeof REPORT_SECTIONS)[number][0], string> = {
    quality: qualitySection(record),
    trainer: trainerSection(record),
    shape: shapeSection(record),
    'reward-histogram': histogramSection(record),
    tasks: tasksSection(record),
    failures: failuresSection(record),
    staleness: stalenessSection(record),
    phases: phasesSection(record),
    sandbox: sandboxSection(record),
    saturation: saturationSection(record),
    steps: stepSection(record),
    capacity: capacitySection(record),
    'work-units': record.work_units ? table(['unit', 'count'], Object.entries(record.work_units)) : '',
    'token-audit': tokenAuditSection(record),
    'tool-calls': toolCallsSection(record),
    'spec-decode': specDecodeSection(record),
  };
  const sections = REPORT_SECTIONS.map(([id, heading, key]) =>
    section(id, heading, bodies[id], record.absent[key]),
  );
  const json = JSON.stringify(record, null, 2).replace(/</g, '\\u003c');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)}</title>
<style>
${PAGE_STYLE}
</style></head><body>
<h1>${esc(title)}</h1>
${header(record)}
${sections.join('\n')}
<details><summary>Run record (JSON)</summary><pre>${esc(JSON.stringify(record, null, 2))}</pre></details>
<script type="application/json" id="run-record">${json}</script>
</body></html>
`;
}
