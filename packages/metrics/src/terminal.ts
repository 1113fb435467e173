/** The run report as plain text with sparklines, for CLIs. */
import type { RunRecord } from './report.js';
import { sparkline } from './sparkline.js';
import { TRAINER_METRICS } from './training.js';

/** A plain-text summary with sparklines, for CLIs. */
export function renderTerminalReport(
  record: RunRecord,
  options: { width?: number | undefined } = {},
): string {
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
    const parts = Object.entries(last)
      .filter(([k]) => k === 'reward_mean' || k.startsWith('pass@'))
      .map(([k, v]) => `${k}=${typeof v === 'number' ? Number(v.toFixed(4)) : '—'}`);
    out.push(`quality (step ${qIds[qIds.length - 1]}): ${parts.join(' ')}`);
    out.push(
      `mean reward ${sparkline(
        qIds.map((id) => record.quality[id]!.reward_mean),
        { min: 0, max: 1 },
      )}`,
    );
  }
  const t = record.trainer;
  if (t) {
    const ids = Object.keys(t.per_step).sort((a, b) => Number(a) - Number(b));
    for (const m of TRAINER_METRICS) {
      const key = t.keys[m.name];
      if (!key) continue;
      const values = ids.map((id) => t.per_step[id]![m.name] ?? null);
      const last = values.at(-1);
      out.push(
        `${m.label.padEnd(28)} ${sparkline(values)}  (${key}, step ${ids.at(-1)}: ${last === null || last === undefined ? '—' : Number(last.toPrecision(3))})`,
      );
    }
  }
  return out.join('\n');
}
