/**
 * Tool-call health of a step: the tool calls its rollouts' models emitted, how many parsed, and why the
 * rest did not (malformed, unknown tool, arguments not an object), from the rows' `metadata.tool_calls`
 * that the capture proxy stamps; rollouts in which no tool call ever parsed; and the alarm line when the
 * failure rate passes a threshold. A harness that cannot parse its model's calls ends rollouts as
 * ordinary reward 0: these numbers tell that apart from a model that tried and failed.
 */
import { isScored, type RolloutResult } from '@vime/core';
import type { ToolCallHealth } from '@vime/core/engine';

/** A step's tool-call health: the sum over its rollouts, and the rollouts where no call fired. */
export interface StepToolCallHealth extends ToolCallHealth {
  /** Scored rollouts whose rows carry tool-call counts. */
  rollouts: number;
  /** Of them, rollouts in which no tool call ever parsed. */
  noToolRollouts: number;
  /** Calls that failed (malformed, unknown tool or bad arguments) per call emitted; 0 with none emitted. */
  failureRate: number;
}

/** The counts a rollout's rows carry (every row of a rollout carries the same), if any. */
export function rolloutToolCalls(result: RolloutResult): ToolCallHealth | undefined {
  if (!isScored(result)) return undefined;
  const value = result.samples[0]?.metadata.tool_calls as Partial<ToolCallHealth> | undefined;
  if (!value || typeof value !== 'object') return undefined;
  const count = (n: unknown) => (typeof n === 'number' && Number.isFinite(n) && n >= 0 ? n : 0);
  return {
    emitted: count(value.emitted),
    parsed: count(value.parsed),
    malformed: count(value.malformed),
    unknownTool: count(value.unknownTool),
    badArguments: count(value.badArguments),
  };
}

/** The tool-call health of a step's results (failed rollouts have no rows and count nowhere). */
export function stepToolCallHealth(results: readonly RolloutResult[]): StepToolCallHealth {
  const total: ToolCallHealth = { emitted: 0, parsed: 0, malformed: 0, unknownTool: 0, badArguments: 0 };
  let rollouts = 0;
  let noToolRollouts = 0;
  for (const result of results) {
    const counts = rolloutToolCalls(result);
    if (!counts) continue;
    rollouts++;
    if (counts.parsed === 0) noToolRollouts++;
    for (const key of Object.keys(total) as Array<keyof ToolCallHealth>) total[key] += counts[key];
  }
  const failed = total.malformed + total.unknownTool + total.badArguments;
  return { ...total, rollouts, noToolRollouts, failureRate: total.emitted > 0 ? failed / total.emitted : 0 };
}

/** The run's tool-call health for the report: each step's, and the whole run's. */
export interface ToolCallRecord {
  steps: Array<StepToolCallHealth & { step: number }>;
  total: StepToolCallHealth;
}

/** The tool-call health of every step of a run; `null` when no rollout carries tool-call counts. */
export function toolCallRecord(
  byStep: ReadonlyArray<{ step: number; results: ReadonlyArray<RolloutResult> }>,
): ToolCallRecord | null {
  const steps = byStep
    .map(({ step, results }) => ({ step, ...stepToolCallHealth(results) }))
    .filter((s) => s.rollouts > 0);
  if (steps.length === 0) return null;
  return { steps, total: stepToolCallHealth(byStep.flatMap((s) => s.results)) };
}

/** One line for a step's log: `tool calls: 40 emitted, 36 parsed, 3 malformed, 1 unknown tool, ...`. */
export function toolCallLine(health: StepToolCallHealth): string {
  return `tool calls: ${health.emitted} emitted, ${health.parsed} parsed, ${health.malformed} malformed, ${health.unknownTool} unknown tool, ${health.badArguments} bad arguments; ${health.noToolRollouts}/${health.rollouts} rollouts without a tool call`;
}

/** Default alarm threshold: more than 10% of a step's emitted calls failed. */
export const TOOL_CALL_ALARM_RATE = 0.1;

/** The alarm line when a step's tool-call failure rate passes `threshold`, else undefined. */
export function toolCallAlarm(
  step: number,
  health: StepToolCallHealth,
  threshold: number = TOOL_CALL_ALARM_RATE,
): string | undefined {
  if (health.emitted === 0 || health.failureRate <= threshold) return undefined;
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  return `ALARM step ${step}: ${pct(health.failureRate)} of ${health.emitted} tool calls failed to parse or name a declared tool (threshold ${pct(threshold)}): ${health.malformed} malformed, ${health.unknownTool} unknown tool, ${health.badArguments} bad arguments. Check that the harness and the proxy use the same tool-call format.`;
}
