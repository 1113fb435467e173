/**
 * The captured-turn log: one JSON line per model call the proxy answered, exactly as the engine saw
 * and produced it (prompt ids, output ids, log probs, sampler replay data, weight versions). It is what a token audit
 * checks a training batch against (`vime-grpo audit`).
 */
import { z } from 'zod';
import type { Turn } from '../../rollout.js';

const int = z.number().int();

/** Schema of one recorded turn in the turn log. */
export const CapturedTurnSchema = z.looseObject({
  session_id: z.string(),
  /** The turn's index within its session. */
  turn: int.nonnegative(),
  prompt_ids: z.array(int),
  output_ids: z.array(int),
  /** One per output token. */
  output_log_probs: z.array(z.number()),
  finish_reason: z.string(),
  policy_version: z.string().optional(),
  /** The weight version of every output token, as runs in order (when an update landed inside the turn). */
  version_runs: z.array(z.object({ version: z.string(), tokens: int.nonnegative() })).optional(),
  /** Sampler replay (top-p < 1): kept ids of output token i are `ids[offsets[i]:offsets[i + 1]]`. */
  top_p_token_ids: z.array(int).optional(),
  top_p_token_offsets: z.array(int).optional(),
  top_p_log_probs: z.array(z.number()).optional(),
  /** Top-k log probs (score centering): output token i's k ids and log probs are `[i * k, (i + 1) * k)`. */
  topk_k: int.positive().optional(),
  topk_token_ids: z.array(int).optional(),
  topk_log_probs: z.array(z.number()).optional(),
  /**
   * Routing replay (R3): the experts of the positions whose forward pass sampled an output token
   * (`start` = the prompt's last position), `layers × top_k` per position, flat.
   */
  routed_experts: z
    .object({
      layers: int.positive(),
      top_k: int.positive(),
      start: int.nonnegative(),
      experts: z.array(int.nonnegative()),
    })
    .optional(),
  /** Speculative decoding: verification passes (SGLang's `spec_verify_ct`) and the draft tokens accepted. */
  spec_verify_passes: int.nonnegative().optional(),
  spec_accepted_tokens: int.nonnegative().optional(),
});
/** One recorded turn in the turn log. */
export type CapturedTurn = z.infer<typeof CapturedTurnSchema>;

/** The log record of one recorded turn (the proxy's `turn` event gives both). */
export function capturedTurnRecord(sessionId: string, turn: Turn): CapturedTurn {
  return {
    session_id: sessionId,
    turn: turn.index,
    prompt_ids: Array.from(turn.promptIds),
    output_ids: Array.from(turn.outputIds),
    output_log_probs: Array.from(turn.logprobs),
    finish_reason: turn.finishReason,
    ...(turn.policyVersion !== undefined ? { policy_version: turn.policyVersion } : {}),
    ...(turn.versionRuns ? { version_runs: turn.versionRuns.map((r) => ({ ...r })) } : {}),
    ...(turn.topP
      ? {
          top_p_token_ids: Array.from(turn.topP.ids),
          top_p_token_offsets: Array.from(turn.topP.offsets),
          ...(turn.topP.logprobs ? { top_p_log_probs: Array.from(turn.topP.logprobs) } : {}),
        }
      : {}),
    ...(turn.topK
      ? {
          topk_k: turn.topK.k,
          topk_token_ids: Array.from(turn.topK.ids),
          topk_log_probs: Array.from(turn.topK.logprobs),
        }
      : {}),
    ...(turn.routes ? { routed_experts: outputRouting(turn, (e) => Array.from(e)) } : {}),
    ...(turn.spec
      ? { spec_verify_passes: turn.spec.verifyPasses, spec_accepted_tokens: turn.spec.acceptedTokens }
      : {}),
  };
}

/**
 * The routing of the positions whose forward pass sampled the turn's output (its last prompt token
 * on): what the token audit compares. `copy` turns the shared subarray into the wanted array.
 */
export function outputRouting<T>(
  turn: Pick<Turn, 'promptIds' | 'routes'>,
  copy: (experts: Int32Array) => T,
): { layers: number; top_k: number; start: number; experts: T } | undefined {
  const r = turn.routes;
  if (!r) return undefined;
  const start = Math.max(r.start, turn.promptIds.length - 1);
  const experts = r.experts.subarray((start - r.start) * r.layers * r.topK);
  return { layers: r.layers, top_k: r.topK, start, experts: copy(experts) };
}
