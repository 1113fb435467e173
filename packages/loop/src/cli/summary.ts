/** The run's summary as the terminal shows it after the last step. */
import type { RunSummary } from '../loop.js';

function pct(v: number | null | undefined): string {
  return v === null || v === undefined ? '-' : `${(v * 100).toFixed(1)}%`;
}

/** The summary lines of a finished run. */
export function summaryText(s: RunSummary): string {
  const o = s.overall;
  const lines = [
    '',
    s.standIn
      ? `Engine: ${s.engines.length} stand-in engine(s) — a scripted policy behind SGLang's wire (vLLM's under --engine-kind vllm), not a model.`
      : `Engines: ${s.engines.join(', ')}`,
    '',
    'step  rollouts  mean reward  pass@1   zero-var groups  non-zero adv  rollout s',
    ...s.steps.map(
      (st) =>
        `${String(st.step).padEnd(4)}  ${String(st.rollouts).padEnd(8)}  ${(st.metrics.reward.mean ?? 0).toFixed(3).padEnd(11)}  ${pct(st.metrics.passAtK.find((p) => p.k === 1)?.value).padEnd(7)}  ${String(st.zeroVarianceGroups).padEnd(15)}  ${`${st.advantages.nonZero}/${st.advantages.rows}`.padEnd(12)}  ${st.rolloutSeconds.toFixed(1)}`,
    ),
    '',
    `pass@k: ${o.passAtK.map((p) => `pass@${p.k} ${pct(p.value)}`).join(', ')}`,
    ...(s.reapedSandboxes > 0
      ? [`reaped: ${s.reapedSandboxes} sandboxes left behind by the killed run`]
      : []),
    ...(s.resumedRollouts > 0
      ? [`resumed: ${s.resumedRollouts} completed rollouts taken from the queue, not run again`]
      : []),
    `dataset: ${s.dataset}${s.excluded.length > 0 ? ` (${s.excluded.length} rows failed the baseline check and were left out)` : ''}`,
    `grades: ${counts(s.gradeOutcomes) || 'none'}; hacks detected: ${counts(s.hacksByKind) || 'none'}`,
    `mean reward: ${(o.reward.mean ?? 0).toFixed(3)}; rollouts: ${o.rollouts.completed} completed, ${o.rollouts.truncated} truncated, ${o.rollouts.failed} failed, ${o.rollouts.aborted} aborted`,
    ...(Object.keys(s.failuresByCause).length > 0
      ? [
          `failed/aborted by cause: ${Object.entries(s.failuresByCause)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')}`,
        ]
      : []),
    ...(s.router.length > 0 || s.sessionMoves > 0
      ? [
          `engines: ${s.router.filter((e) => e.event === 'engine:down').length} taken down, ${s.router.filter((e) => e.event === 'engine:up').length} readmitted; ${s.sessionMoves} sessions moved, ${s.turnRetries} turns retried on another engine`,
        ]
      : []),
    ...(s.turnInterruptions > 0 || s.staleness.mixedRows > 0
      ? [
          `weight updates: ${s.turnInterruptions} turns continued across an update; rows spanning versions ${s.staleness.mixedRows}, max lag ${s.staleness.maxLag}`,
        ]
      : []),
    `sandbox claims: ${s.pool.warmHits} warm, ${s.pool.fallbacks} on demand; claim p50/p99 ${ms(o.timing.phases.claim?.p50)}/${ms(o.timing.phases.claim?.p99)}; exec per command p50/p99 ${ms(s.execPerCall.p50)}/${ms(s.execPerCall.p99)}`,
    `turns per rollout: mean ${o.shape.turns?.mean.toFixed(1) ?? '-'}, max ${o.shape.turns?.max ?? '-'}; output tokens/s: ${s.tokensPerSecond.toFixed(0)}`,
    '',
    `batches: ${s.steps.map((st) => st.batchPath).join(', ')}`,
    `report:  ${s.reportHtml}`,
    `         ${s.reportJson}`,
  ];
  return lines.join('\n');
}

function counts(map: Record<string, number>): string {
  return Object.entries(map)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
}

function ms(v: number | null | undefined): string {
  return v === undefined || v === null ? '-' : `${v.toFixed(0)} ms`;
}
