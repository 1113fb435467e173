/** How the token audit names where a sample first differs from the captured turns. */

/** Where a sample first differs from what was captured. */
export interface AuditDifference {
  /** Response token (0 = the first token after the prompt). */
  token: number;
  /** The same token's index in `tokens`. */
  position: number;
  field:
    | 'tokens'
    | 'loss_mask'
    | 'response_length'
    | 'rollout_log_probs'
    | 'rollout_top_p_token_ids'
    | 'rollout_top_p_token_offsets'
    | 'rollout_top_p_log_probs'
    | 'rollout_topk_token_ids'
    | 'rollout_topk_log_probs'
    | 'rollout_routed_experts'
    | 'weight_versions'
    | 'weight_version_spans'
    | 'turn';
  expected: string;
  found: string;
  message: string;
}

/** Builds the differences of a sample whose response starts at position `p` of its tokens. */
export function differenceAt(p: number) {
  return (
    token: number,
    field: AuditDifference['field'],
    expected: string,
    found: string,
    message: string,
  ): AuditDifference => ({ token, position: p + token, field, expected, found, message });
}

/**
 * A captured turn as the audit reads it: a turn-log record (`CapturedTurn`), or the same fields as typed
 * arrays, as a run keeps its captured turns in memory until hand-off.
 */
export interface AuditTurn {
  session_id: string;
  turn: number;
  prompt_ids: ArrayLike<number>;
  output_ids: ArrayLike<number>;
  /** One per output token. */
  output_log_probs: ArrayLike<number>;
  policy_version?: string | undefined;
  version_runs?: ReadonlyArray<{ version: string; tokens: number }> | undefined;
  /**
   * The engines that produced the output, as the router recorded them: set on turns captured in this
   * process (`auditTurnOf`), which the weight-update log check covers; absent on turns read back from a file.
   */
  engines?: readonly string[] | undefined;
  top_p_token_ids?: ArrayLike<number> | undefined;
  top_p_token_offsets?: ArrayLike<number> | undefined;
  top_p_log_probs?: ArrayLike<number> | undefined;
  /** Top-k log probs (score centering): output token i's head is `[i * k, (i + 1) * k)` of both. */
  topk_k?: number | undefined;
  topk_token_ids?: ArrayLike<number> | undefined;
  topk_log_probs?: ArrayLike<number> | undefined;
  /**
   * Routing replay (R3): the experts of positions `[start, start + rows)` of the turn's sequence (at
   * least those whose forward pass sampled an output token: `prompt − 1 ..`), `layers × top_k` each.
   */
  routed_experts?: { layers: number; top_k: number; start: number; experts: ArrayLike<number> } | undefined;
}

/** Turns whose prompt was found, when they were recorded, to start with the previous turn's prompt and output. */
const extensions = new WeakMap<AuditTurn, AuditTurn>();

/**
 * Record that `turn`'s prompt starts with `previous`'s prompt and output, where it does (checked here, in
 * full). The audit then compares only the rest of `turn`'s prompt once it has matched `previous` in a
 * sample: exact by transitivity, and it keeps the audit linear in a session's tokens. Only this call
 * makes the link, so no turn read from a file can claim one.
 */
export function linkTurn(previous: AuditTurn | undefined, turn: AuditTurn): void {
  if (!previous) return;
  const a = previous.prompt_ids;
  const b = previous.output_ids;
  const p = turn.prompt_ids;
  if (p.length < a.length + b.length) return;
  for (let k = 0; k < a.length; k++) if (p[k] !== a[k]) return;
  for (let k = 0; k < b.length; k++) if (p[a.length + k] !== b[k]) return;
  extensions.set(turn, previous);
}

/** The turn whose prompt and output `turn`'s prompt was found to start with (`linkTurn`). */
export function extendedTurn(turn: AuditTurn): AuditTurn | undefined {
  return extensions.get(turn);
}
