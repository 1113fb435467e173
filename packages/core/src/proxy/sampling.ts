/** Per-turn sampling: the session's settings override the harness's knobs, within the token budget. */
import type { Sampling } from '../engine/types.js';
import type { ChatRequest } from './dialects.js';

/** Sampling knob wire names → the `Sampling` field that replaces them. */
const KNOB_FIELDS: Record<string, keyof Sampling> = {
  temperature: 'temperature',
  top_p: 'topP',
  top_k: 'topK',
  min_p: 'minP',
  presence_penalty: 'presencePenalty',
  frequency_penalty: 'frequencyPenalty',
  repetition_penalty: 'repetitionPenalty',
  seed: 'seed',
  stop: 'stop',
  stop_sequences: 'stop',
};

/**
 * A turn's sampling: the session's, with the harness's knobs reported where they differ, and
 * `maxTokens` clamped by what the harness asked for and by what is left of the session's token budget.
 */
export function resolveSampling(
  state: { sampling: Sampling; maxContextTokens: number | undefined },
  req: ChatRequest,
  promptTokens: number,
  defaultMaxTokens: number | undefined,
): { sampling: Sampling; overridden: Record<string, { sent: unknown; used: unknown }> } {
  const sampling: Sampling = { ...state.sampling };
  const overridden: Record<string, { sent: unknown; used: unknown }> = {};
  for (const [knob, sent] of Object.entries(req.sampling)) {
    const field = KNOB_FIELDS[knob];
    if (!field) continue;
    const used = sampling[field];
    if (JSON.stringify(used) !== JSON.stringify(sent)) overridden[knob] = { sent, used };
  }
  let maxTokens = Math.min(
    sampling.maxTokens ?? defaultMaxTokens ?? 4096,
    req.maxTokens ?? Number.POSITIVE_INFINITY,
  );
  if (state.maxContextTokens !== undefined)
    maxTokens = Math.min(maxTokens, state.maxContextTokens - promptTokens);
  if (req.maxTokens !== undefined && req.maxTokens !== maxTokens) {
    overridden.max_tokens = { sent: req.maxTokens, used: maxTokens };
  }
  sampling.maxTokens = maxTokens;
  return { sampling, overridden };
}
