/**
 * The report's training sections. `trainerRecord`: the trainer's own numbers per step (policy loss, KL,
 * entropy, clip fraction, grad norm, learning rate, the train-vs-rollout log-prob gap), each under one
 * name whatever trainer reported it and with the key it was read from. `shapeRecord`: what the rollouts of
 * each step looked like to the trainer (response length, truncation, turns, prompt groups whose rewards
 * were all equal, the advantages trained on).
 */
import { isScored, type RolloutResult, type Sample } from '@vime/core';
import { percentileOfSorted, sortedCopy } from './percentile.js';

/**
 * The trainer metrics the report draws, each with the keys it is read from, first found first: slime's
 * (`pg_loss`, `ppo_kl`, `entropy_loss`, `pg_clipfrac`, `grad_norm`, `lr-pg_0`,
 * `train_rollout_logprob_abs_diff`), the closed-loop trainer's (`loss`, `logprob_abs_diff_mean`) and
 * plain names. A key may carry slime's `train/` prefix.
 */
export const TRAINER_METRICS = [
  { name: 'policy_loss', label: 'policy loss', keys: ['pg_loss', 'policy_loss', 'loss'] },
  { name: 'kl', label: 'KL', keys: ['ppo_kl', 'kl', 'approx_kl', 'kl_loss'] },
  { name: 'entropy', label: 'entropy', keys: ['entropy', 'entropy_loss'] },
  { name: 'clip_fraction', label: 'clip fraction', keys: ['pg_clipfrac', 'clipfrac', 'clip_fraction'] },
  { name: 'grad_norm', label: 'grad norm', keys: ['grad_norm'] },
  { name: 'lr', label: 'learning rate', keys: ['lr', 'lr-pg_0', 'learning_rate'] },
  {
    name: 'logprob_gap',
    label: 'train − rollout log-prob gap',
    keys: ['train_rollout_logprob_abs_diff', 'logprob_abs_diff_mean', 'logprob_gap'],
  },
] as const;

/** A trainer metric's name in the record. */
export type TrainerMetric = (typeof TRAINER_METRICS)[number]['name'];

/** One step of a trainer's scalars as it reported them (`pg_loss`, `train/ppo_kl`, …). */
export interface TrainerStepInput {
  step: number;
  metrics: Readonly<Record<string, unknown>>;
}

/** The report's trainer section. */
export interface TrainerRecord {
  /** Where the numbers came from (`trainer hook`, `slime log`, `metrics file`). */
  source: string;
  /** The key each drawn metric was read from, e.g. `train/pg_loss`. */
  keys: Partial<Record<TrainerMetric, string>>;
  /** Per step: each drawn metric's value, `null` where that step did not report it. */
  per_step: Record<string, Partial<Record<TrainerMetric, number | null>>>;
  /** The metrics no step reported, with the keys looked for. */
  missing: Partial<Record<TrainerMetric, string>>;
}

const finite = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** The value of `key` in a step's metrics, with or without slime's `train/` prefix. */
function lookup(metrics: Readonly<Record<string, unknown>>, key: string): [string, number] | undefined {
  for (const k of [key, `train/${key}`]) if (finite(metrics[k])) return [k, metrics[k] as number];
  return undefined;
}

/** The trainer's metrics by their report names; `null` when no step reported any of them. */
export function trainerRecord(steps: ReadonlyArray<TrainerStepInput>, source: string): TrainerRecord | null {
  const record: TrainerRecord = { source, keys: {}, per_step: {}, missing: {} };
  const sorted = [...steps].sort((a, b) => a.step - b.step);
  for (const metric of TRAINER_METRICS) {
    // One key per metric for the whole run: a trainer that reports both `loss` and `pg_loss` is drawn
    // from `pg_loss` at every step, never a mix (with or without the `train/` prefix, which a run read
    // back from its metrics file has on some steps).
    const base = metric.keys.find((k) => sorted.some((s) => lookup(s.metrics, k)));
    if (!base) {
      record.missing[metric.name] = metric.keys.join(', ');
      continue;
    }
    record.keys[metric.name] = sorted.map((s) => lookup(s.metrics, base)?.[0]).find((k) => k !== undefined)!;
    for (const s of sorted) {
      const row = record.per_step[String(s.step)] ?? {};
      row[metric.name] = lookup(s.metrics, base)?.[1] ?? null;
      record.per_step[String(s.step)] = row;
    }
  }
  return Object.keys(record.keys).length ? record : null;
}

/** One rollout as the shape section reads it. */
export interface RolloutShape {
  step: number;
  /** Its prompt group; `null` when the source does not say (slime's `[agent]` lines). */
  group: number | null;
  status: RolloutResult['status'];
  /** Completed and truncated rollouts only: a failure has no reward. */
  reward: number | null;
  turns: number;
  /**
   * Tokens after the prompt, summed over the rollout's training rows (tool output included: slime's
   * `response_length`); `null` when its rows are not in the inputs.
   */
  responseTokens: number | null;
  /** Of those, the tokens the model generated (loss mask 1). */
  trainedTokens: number | null;
  /** The advantage its rows were trained with; `null` when not handed off or its rows are not in the inputs. */
  advantage: number | null;
}

/** A rollout's token counts and advantage from its training rows (all rows of a rollout share one advantage). */
export function rowFigures(
  rows: ReadonlyArray<Pick<Sample, 'response_length' | 'loss_mask' | 'metadata'>>,
): Pick<RolloutShape, 'responseTokens' | 'trainedTokens' | 'advantage'> {
  if (rows.length === 0) return { responseTokens: null, trainedTokens: null, advantage: null };
  let response = 0;
  let trained = 0;
  for (const row of rows) {
    response += row.response_length;
    if (row.loss_mask) for (const m of row.loss_mask) trained += m;
    else trained += row.response_length;
  }
  const advantage = rows.map((r) => r.metadata?.advantage).find(finite) ?? null;
  return { responseTokens: response, trainedTokens: trained, advantage };
}

/** A rollout result's shape; its rows (when it carries them) give the token counts and the advantage. */
export function rolloutShapeOf(
  step: number,
  r: RolloutResult,
  group: number | null = r.groupIndex,
): RolloutShape {
  return {
    step,
    group,
    status: r.status,
    reward: isScored(r) ? r.reward : null,
    turns: r.turns,
    ...rowFigures(r.samples),
  };
}

/** Spread of the advantages of one step's rollouts. */
export interface AdvantageSpread {
  count: number;
  /** Rollouts whose advantage is exactly 0 (no learning signal). */
  zero: number;
  mean: number;
  min: number;
  p25: number;
  p50: number;
  p75: number;
  max: number;
}

/** One step of the shape section. */
export interface StepShape {
  rollouts: number;
  /** Completed and truncated. */
  scored: number;
  truncated: number;
  /** Truncated over scored rollouts (a failed rollout was never graded). */
  truncation_rate: number | null;
  turns_mean: number | null;
  turns_max: number | null;
  /** Rollouts whose rows were read (the token and advantage figures are over these). */
  with_rows: number;
  response_tokens_mean: number | null;
  response_tokens_max: number | null;
  trained_tokens_mean: number | null;
  /** Prompt groups with a scored rollout; `null` when the source has no groups. */
  groups: number | null;
  /** Of those, groups whose scored rewards are all equal: GRPO gives them zero advantage. */
  zero_variance_groups: number | null;
  zero_variance_fraction: number | null;
  advantage: AdvantageSpread | null;
}

/** The report's shape section. */
export interface ShapeRecord {
  per_step: Record<string, StepShape>;
  /** Every rollout's advantage in `edges.length − 1` bins, per step. */
  advantage_histogram: { edges: number[]; counts: Record<string, number[]> } | null;
  /** What a figure stands for in this run, or why some steps lack it. */
  notes: string[];
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
const max = (xs: number[]) => (xs.length ? Math.max(...xs) : null);

function spread(values: number[]): AdvantageSpread | null {
  if (values.length === 0) return null;
  const s = sortedCopy(values, 'advantages');
  const q = (p: number) => percentileOfSorted(s, p);
  return {
    count: s.length,
    zero: values.filter((v) => v === 0).length,
    mean: mean(values)!,
    min: s[0]!,
    p25: q(25),
    p50: q(50),
    p75: q(75),
    max: s[s.length - 1]!,
  };
}

function zeroVariance(
  shapes: RolloutShape[],
): Pick<StepShape, 'groups' | 'zero_variance_groups' | 'zero_variance_fraction'> {
  if (shapes.some((s) => s.group === null))
    return { groups: null, zero_variance_groups: null, zero_variance_fraction: null };
  const rewards = new Map<number, Set<number>>();
  for (const s of shapes) {
    if (s.reward === null) continue;
    const set = rewards.get(s.group!) ?? new Set<number>();
    set.add(s.reward);
    rewards.set(s.group!, set);
  }
  const zero = [...rewards.values()].filter((set) => set.size === 1).length;
  return {
    groups: rewards.size,
    zero_variance_groups: zero,
    zero_variance_fraction: rewards.size ? zero / rewards.size : null,
  };
}

function stepShape(shapes: RolloutShape[]): StepShape {
  const scored = shapes.filter((s) => s.reward !== null);
  const truncated = shapes.filter((s) => s.status === 'truncated').length;
  const turns = scored.map((s) => s.turns);
  const withRows = shapes.filter((s) => s.responseTokens !== null);
  const response = withRows.map((s) => s.responseTokens!);
  return {
    rollouts: shapes.length,
    scored: scored.length,
    truncated,
    truncation_rate: scored.length ? truncated / scored.length : null,
    turns_mean: mean(turns),
    turns_max: max(turns),
    with_rows: withRows.length,
    response_tokens_mean: mean(response),
    response_tokens_max: max(response),
    trained_tokens_mean: mean(withRows.map((s) => s.trainedTokens!)),
    ...zeroVariance(shapes),
    advantage: spread(shapes.map((s) => s.advantage).filter(finite)),
  };
}

/** About ten equal bins with round edges over every advantage of the run. */
function advantageHistogram(byStep: Map<number, RolloutShape[]>): ShapeRecord['advantage_histogram'] {
  const all = [...byStep.values()]
    .flat()
    .map((s) => s.advantage)
    .filter(finite);
  if (all.length === 0) return null;
  const lo = Math.min(...all);
  const hi = Math.max(...all);
  // Round bin edges (0.5, 0.25, 0.2, …) about ten bins wide; one bin around the value when all are equal.
  const raw = (hi - lo) / 10;
  const mag = raw > 0 ? 10 ** Math.floor(Math.log10(raw)) : 1;
  const width = raw > 0 ? ([1, 2, 2.5, 5, 10].find((m) => m * mag >= raw) ?? 10) * mag : 1;
  const start = raw > 0 ? Math.floor(lo / width) * width : lo - 0.5;
  const bins = raw > 0 ? Math.max(1, Math.ceil((hi - start) / width - 1e-9)) : 1;
  const edges = Array.from({ length: bins + 1 }, (_, i) => Number((start + i * width).toPrecision(12)));
  const counts: Record<string, number[]> = {};
  for (const [step, shapes] of byStep) {
    const values = shapes.map((s) => s.advantage).filter(finite);
    if (values.length === 0) continue;
    const row = new Array<number>(bins).fill(0);
    for (const a of values) row[Math.min(bins - 1, Math.floor((a - start) / width))]!++;
    counts[String(step)] = row;
  }
  return { edges, counts };
}

/** The rollouts' shape per step; `null` without rollouts. */
export function shapeRecord(shapes: ReadonlyArray<RolloutShape>): ShapeRecord | null {
  if (shapes.length === 0) return null;
  const byStep = new Map<number, RolloutShape[]>();
  for (const s of [...shapes].sort((a, b) => a.step - b.step))
    byStep.set(s.step, [...(byStep.get(s.step) ?? []), s]);
  const per_step: ShapeRecord['per_step'] = {};
  for (const [step, list] of byStep) per_step[String(step)] = stepShape(list);
  const notes: string[] = [];
  const rowless = [...byStep.keys()].filter((step) => per_step[String(step)]!.with_rows === 0);
  if (rowless.length === byStep.size)
    notes.push("response length and advantages: no training rows in this run's inputs");
  else if (rowless.length)
    notes.push(
      `response length and advantages: no training rows for step${rowless.length > 1 ? 's' : ''} ${rowless.join(', ')} in this run's inputs`,
    );
  if (shapes.some((s) => s.group === null))
    notes.push('zero-variance groups: the source does not say which prompt group a rollout belongs to');
  return { per_step, advantage_histogram: advantageHistogram(byStep), notes };
}
