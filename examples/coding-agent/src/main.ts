/**
 * `pnpm coding-agent -- [flags]`: the coding-agent RL loop as a CLI. See `--help`.
 */
import { setMaxListeners } from 'node:events';
import { existsSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { join, resolve } from 'node:path';
import { VimeError } from '@vime/core';
import { runEntry } from './cli.js';
import { parseConfig, usage } from './config.js';
import { defaultRunFolder, type RunSummary, readConfigOf, runCodingAgent } from './loop.js';

function pct(v: number | null | undefined): string {
  return v === null || v === undefined ? '-' : `${(v * 100).toFixed(1)}%`;
}

function printSummary(s: RunSummary): void {
  const o = s.overall;
  const lines = [
    '',
    s.standIn
      ? `Engine: ${s.engines.length} stand-in engine(s) — a scripted policy behind SGLang's wire, not a model.`
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
  console.log(lines.join('\n'));
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

async function main(): Promise<number> {
  let config = parseConfig(process.argv.slice(2), process.env);
  if (config === 'help') {
    console.log(usage);
    return 0;
  }
  if (config.resume)
    config = {
      ...(await readConfigOf(config.resume)),
      resume: config.resume,
      out: config.resume,
      quiet: config.quiet,
    };
  // The run folder is named here, so a stop by signal can say where its finished steps are.
  config = { ...config, out: resolve(config.out ?? defaultRunFolder()) };
  const out = config.out!;
  const controller = new AbortController();
  // Every rollout and queue read listens to this one signal.
  setMaxListeners(0, controller.signal);
  const stopped = new Map<AbortSignal['reason'], NodeJS.Signals>();
  for (const name of ['SIGINT', 'SIGTERM'] as const) {
    // A handler that stays: the sandboxes' own handler then leaves the exit to this program. A second
    // signal ends the process at once.
    process.on(name, () => {
      if (controller.signal.aborted) process.exit(128 + osConstants.signals[name]);
      const reason = new Error(`stopped by ${name}`);
      stopped.set(reason, name);
      controller.abort(reason);
    });
  }
  let summary: RunSummary;
  try {
    summary = await runCodingAgent(config, { log: (l) => console.log(l), signal: controller.signal });
  } catch (error) {
    const signal = controller.signal.aborted ? stopped.get(controller.signal.reason) : undefined;
    if (!signal) throw error;
    // A stop is no crash: one line, where the finished work is, and the shell's exit code for the signal.
    const kept = existsSync(join(out, 'config.json'))
      ? `; its finished steps and rollouts are kept in ${out}: \`--resume ${out}\` goes on from there`
      : '; the run had not started, and left nothing behind';
    throw new VimeError('aborted', `stopped by ${signal}${kept}`, {
      data: { exitCode: 128 + osConstants.signals[signal] },
    });
  }
  printSummary(summary);
  const scored = summary.overall.rollouts.completed + summary.overall.rollouts.truncated;
  if (scored === 0 && summary.overall.rollouts.total > 0) {
    console.error(
      '\nno rollout completed: every rollout failed (see the causes above); the batches carry no rows',
    );
    return 1;
  }
  return 0;
}

await runEntry('coding-agent', main);
