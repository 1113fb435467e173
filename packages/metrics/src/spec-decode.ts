/**
 * Speculative decoding of a step: verification passes, the draft tokens they accepted, and the acceptance
 * length (tokens per verification pass, 1 + accepted / passes), the evidence that speculation was on and
 * paid. Two sources:
 * - the rollouts' rows: the capture proxy sums SGLang's per-request `meta_info.spec_verify_ct` over a
 *   rollout's turns into `metadata.spec_decode` (accepted = output tokens − passes);
 * - the engines' `/metrics`, for an engine whose answers carry no per-request count: vLLM's counters
 *   `vllm:spec_decode_num_drafts_total`, `vllm:spec_decode_num_draft_tokens_total` and
 *   `vllm:spec_decode_num_accepted_tokens_total`, as the increase between two scrapes (acceptance length
 *   1 + accepted / drafts, acceptance rate accepted / draft tokens); SGLang's gauge
 *   `sglang:spec_accept_length` is read as it stands.
 */
import { isScored, type RolloutResult } from '@vime/core';
import type { PromParse, PromSample } from './prometheus.js';

/** Speculative decoding's counts: verification passes, and the draft tokens they accepted. */
export interface SpecDecodeCounts {
  verifyPasses: number;
  acceptedTokens: number;
}

/** A step's speculative decoding, summed, with where the figures came from. */
export interface StepSpecDecode extends SpecDecodeCounts {
  /** Tokens per verification pass: 1 + accepted / passes (0 with no pass). */
  acceptLength: number;
  /** `responses`: the rows' per-request counts; `engine metrics`: counter increases between two scrapes. */
  source: 'responses' | 'engine metrics' | 'responses and engine metrics';
  /** Scored rollouts whose rows carry counts (responses only). */
  rollouts?: number | undefined;
  /** Draft tokens proposed (engine metrics only: vLLM counts them; SGLang's answers do not). */
  draftTokens?: number | undefined;
  /** Accepted per proposed draft token (engine metrics only). */
  acceptRate?: number | undefined;
}

const acceptLength = (c: SpecDecodeCounts) =>
  c.verifyPasses > 0 ? 1 + c.acceptedTokens / c.verifyPasses : 0;

/** The counts a rollout's rows carry (`metadata.spec_decode`; every row of a rollout carries the same), if any. */
export function rolloutSpecDecode(result: RolloutResult): SpecDecodeCounts | undefined {
  if (!isScored(result)) return undefined;
  const value = result.samples[0]?.metadata.spec_decode as
    | { verify_passes?: unknown; accepted_tokens?: unknown }
    | undefined;
  if (!value || typeof value !== 'object') return undefined;
  const count = (n: unknown) => (typeof n === 'number' && Number.isInteger(n) && n >= 0 ? n : undefined);
  const verifyPasses = count(value.verify_passes);
  const acceptedTokens = count(value.accepted_tokens);
  if (verifyPasses === undefined || acceptedTokens === undefined) return undefined;
  return { verifyPasses, acceptedTokens };
}

/** A step's speculative decoding from its rollouts' rows; undefined when no rollout carries counts. */
export function stepSpecDecode(results: readonly RolloutResult[]): StepSpecDecode | undefined {
  const total: SpecDecodeCounts = { verifyPasses: 0, acceptedTokens: 0 };
  let rollouts = 0;
  for (const result of results) {
    const counts = rolloutSpecDecode(result);
    if (!counts) continue;
    rollouts++;
    total.verifyPasses += counts.verifyPasses;
    total.acceptedTokens += counts.acceptedTokens;
  }
  if (rollouts === 0) return undefined;
  return { ...total, acceptLength: acceptLength(total), source: 'responses', rollouts };
}

/** The vLLM counters of speculative decoding (`vllm/v1/spec_decode/metrics.py`). */
export const VLLM_SPEC_COUNTERS = {
  drafts: 'vllm:spec_decode_num_drafts_total',
  draftTokens: 'vllm:spec_decode_num_draft_tokens_total',
  acceptedTokens: 'vllm:spec_decode_num_accepted_tokens_total',
} as const;

/** A counter summed over its label sets (engines, models); undefined when the scrape has none. */
function counter(samples: readonly PromSample[], name: string): number | undefined {
  let sum: number | undefined;
  for (const s of samples) if (s.name === name && Number.isFinite(s.value)) sum = (sum ?? 0) + s.value;
  return sum;
}

/** A counter's increase; a lower reading means the engine restarted, so its counts began again at 0. */
const increase = (before: number | undefined, after: number) =>
  before === undefined || after < before ? after : after - before;

/**
 * Speculative decoding between two scrapes of one vLLM engine: drafts (verification passes that had
 * drafts), draft tokens proposed and accepted, from the increase of vLLM's counters. Undefined when the
 * later scrape has no such counter (speculation off, or not vLLM).
 */
export function vllmSpecDecodeDelta(
  before: Pick<PromParse, 'samples'> | undefined,
  after: Pick<PromParse, 'samples'>,
): StepSpecDecode | undefined {
  const read = (parse: Pick<PromParse, 'samples'> | undefined, key: keyof typeof VLLM_SPEC_COUNTERS) =>
    parse ? counter(parse.samples, VLLM_SPEC_COUNTERS[key]) : undefined;
  const drafts = read(after, 'drafts');
  const accepted = read(after, 'acceptedTokens');
  if (drafts === undefined || accepted === undefined) return undefined;
  const counts = {
    verifyPasses: increase(read(before, 'drafts'), drafts),
    acceptedTokens: increase(read(before, 'acceptedTokens'), accepted),
  };
  const proposed = read(after, 'draftTokens');
  const draftTokens = proposed === undefined ? undefined : increase(read(before, 'draftTokens'), proposed);
  return {
    ...counts,
    acceptLength: acceptLength(counts),
    source: 'engine metrics',
    draftTokens,
    acceptRate: draftTokens ? counts.acceptedTokens / draftTokens : undefined,
  };
}

/** Several engines' figures of one step, summed (undefined when none had any). */
export function sumSpecDecode(parts: ReadonlyArray<StepSpecDecode | undefined>): StepSpecDecode | undefined {
  const present = parts.filter((p): p is StepSpecDecode => p !== undefined);
  if (present.length === 0) return undefined;
  const counts = {
    verifyPasses: present.reduce((s, p) => s + p.verifyPasses, 0),
    acceptedTokens: present.reduce((s, p) => s + p.acceptedTokens, 0),
  };
  const known = present.every((p) => p.draftTokens !== undefined);
  const draftTokens = known ? present.reduce((s, p) => s + p.draftTokens!, 0) : undefined;
  return {
    ...counts,
    acceptLength: acceptLength(counts),
    source: present[0]!.source,
    draftTokens,
    acceptRate: draftTokens ? counts.acceptedTokens / draftTokens : undefined,
  };
}

/** SGLang's gauge `sglang:spec_accept_length` (the mean over its label sets); undefined when absent. */
export function sglangSpecAcceptLength(parse: Pick<PromParse, 'samples'>): number | undefined {
  const values = parse.samples
    .filter((s) => s.name === 'sglang:spec_accept_length' && Number.isFinite(s.value))
    .map((s) => s.value);
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : undefined;
}

/** A step's speculative decoding as metric scalars: `spec/*` (none when the step has no figures). */
export function specDecodeScalars(spec: StepSpecDecode | undefined): Record<string, number> {
  if (!spec) return {};
  return {
    'spec/accepted_tokens': spec.acceptedTokens,
    'spec/verify_passes': spec.verifyPasses,
    'spec/accept_length': spec.acceptLength,
    ...(spec.draftTokens !== undefined ? { 'spec/draft_tokens': spec.draftTokens } : {}),
    ...(spec.acceptRate !== undefined ? { 'spec/accept_rate': spec.acceptRate } : {}),
  };
}

/** The run's speculative decoding for the report: each step's, and the whole run's. */
export interface SpecDecodeRecord {
  steps: Array<StepSpecDecode & { step: number }>;
  total: StepSpecDecode;
}

/**
 * The speculative decoding of every step of a run: from its rows, or, for a step whose rows carry no
 * counts, the engines' counter increases the loop recorded (`engineSteps`); `null` when no step has any.
 */
export function specDecodeRecord(
  byStep: ReadonlyArray<{ step: number; results: ReadonlyArray<RolloutResult> }>,
  engineSteps: ReadonlyArray<StepSpecDecode & { step: number }> = [],
): SpecDecodeRecord | null {
  const numbers = [...new Set([...byStep.map((s) => s.step), ...engineSteps.map((s) => s.step)])].sort(
    (a, b) => a - b,
  );
  const steps = numbers.flatMap((step) => {
    const rows = stepSpecDecode(byStep.find((s) => s.step === step)?.results ?? []);
    const spec = rows ?? engineSteps.find((s) => s.step === step);
    return spec ? [{ ...spec, step }] : [];
  });
  if (steps.length === 0) return null;
  const total = sumSpecDecode(steps)!;
  // A run whose steps came from both sources says so, and has no run-wide draft count (SGLang's answers give none).
  if (new Set(steps.map((s) => s.source)).size === 1) return { steps, total };
  const mixed = { ...total, source: 'responses and engine metrics' as const };
  return { steps, total: { ...mixed, draftTokens: undefined, acceptRate: undefined } };
}

/** One line for a step's log: `speculative decoding: 1200 accepted draft tokens over 600 verify passes (...)`. */
export function specDecodeLine(spec: StepSpecDecode): string {
  const rate =
    spec.acceptRate === undefined ? '' : `, ${(100 * spec.acceptRate).toFixed(1)}% of drafts accepted`;
  return `speculative decoding: ${spec.acceptedTokens} accepted draft tokens over ${spec.verifyPasses} verify passes, acceptance length ${spec.acceptLength.toFixed(2)}${rate} (${spec.source})`;
}
