/**
 * The token audit at hand-off: before a rollout's rows go to training, they are checked against the turns
 * the capture proxy recorded for its sessions. A rollout with one sample that differs (or that cannot be
 * checked: no session id, no captured turn) becomes an infrastructure failure, never trained and never
 * reward 0, and the step counts why.
 */
import { outputRouting, type ScoredRollout, type Turn, type UnscoredRollout } from '@vime/core';
import { auditTokens } from './audit.js';
import { type AuditTurn, linkTurn } from './difference.js';
import { type WeightLogView, weightLogProblem } from './weight-log.js';

/** What the audit of one step's hand-off found. */
export interface HandoffAudit {
  /** Samples audited, and of those the ones that differ from their captured turns. */
  samples: number;
  failedSamples: number;
  /** Rollouts audited, and of those the ones made infrastructure failures. */
  rollouts: number;
  failedRollouts: number;
  /** Trained tokens checked (loss mask 1). */
  tokens: number;
  /**
   * Failed rollouts by cause: the field that differs, `untrained_turn`, `token_count`, `no_session`,
   * `no_turns`, `weight_version_log` (a version the weight-update log never had for the turn's engine).
   */
  causes: Record<string, number>;
}

/** The error code of a rollout that failed the hand-off audit. */
export const TOKEN_AUDIT_FAILED = 'token_audit_failed';

/** The rollouts that passed, those made failures (with the cause in their error), and the counts. */
export interface HandoffAuditResult<R extends ScoredRollout> {
  passed: R[];
  failed: Array<{ rollout: R; failure: UnscoredRollout }>;
  audit: HandoffAudit;
}

/**
 * A recorded turn as the audit reads it, sharing the turn's typed arrays (no copy): what a run keeps in
 * memory until the turn's rows are handed off. With the session's `previous` turn, whether its prompt
 * extends that turn is checked now (`linkTurn`), off the hand-off's path.
 */
export function auditTurnOf(sessionId: string, turn: Turn, previous?: AuditTurn | undefined): AuditTurn {
  const t: AuditTurn = {
    session_id: sessionId,
    turn: turn.index,
    prompt_ids: turn.promptIds,
    output_ids: turn.outputIds,
    output_log_probs: turn.logprobs,
    policy_version: turn.policyVersion,
    version_runs: turn.versionRuns,
    engines: turn.engines ?? [],
    top_p_token_ids: turn.topP?.ids,
    top_p_token_offsets: turn.topP?.offsets,
    top_p_log_probs: turn.topP?.logprobs,
    topk_k: turn.topK?.k,
    topk_token_ids: turn.topK?.ids,
    topk_log_probs: turn.topK?.logprobs,
    routed_experts: outputRouting(turn, (experts) => experts),
  };
  // Checked now, while the rollout runs, so the hand-off compares each prompt's new tokens only.
  linkTurn(previous, t);
  return t;
}

/** An empty step's audit counts. */
export function emptyHandoffAudit(): HandoffAudit {
  return { samples: 0, failedSamples: 0, rollouts: 0, failedRollouts: 0, tokens: 0, causes: {} };
}

/** Options of the hand-off audit. */
export interface HandoffAuditOptions {
  /**
   * The router's weight-update log (`proxy.router.weightLog`): with it, spans must cover each sample's
   * trained tokens exactly and every version of a turn captured in this process must have been logged
   * for an engine that produced it.
   */
  weightLog?: WeightLogView | undefined;
}

/**
 * Audit every rollout of a hand-off against the captured turns of its sessions (`turnsOf`). Each rollout
 * is audited on its own, so a rollout's turns must all be trained by its own rows.
 */
export function auditHandoff<R extends ScoredRollout>(
  rollouts: readonly R[],
  turnsOf: (sessionIds: readonly string[]) => AuditTurn[],
  options: HandoffAuditOptions = {},
): HandoffAuditResult<R> {
  const audit = emptyHandoffAudit();
  const passed: R[] = [];
  const failed: HandoffAuditResult<R>['failed'] = [];
  for (const rollout of rollouts) {
    audit.rollouts++;
    audit.samples += rollout.samples.length;
    const verdict = auditRollout(rollout, turnsOf, options.weightLog);
    audit.tokens += verdict.tokens;
    if (!verdict.cause) {
      passed.push(rollout);
      continue;
    }
    audit.failedRollouts++;
    audit.failedSamples += verdict.failedSamples;
    audit.causes[verdict.cause] = (audit.causes[verdict.cause] ?? 0) + 1;
    const { reward: _reward, status: _status, ...rest } = rollout;
    failed.push({
      rollout,
      failure: {
        ...rest,
        samples: [],
        status: 'failed',
        error: { code: TOKEN_AUDIT_FAILED, message: verdict.message, cause: { field: verdict.cause } },
      },
    });
  }
  return { passed, failed, audit };
}

interface RolloutVerdict {
  tokens: number;
  failedSamples: number;
  cause?: string | undefined;
  message: string;
}

/** One rollout's audit: the cause and a message naming the sample and token, or no cause. */
function auditRollout(
  rollout: ScoredRollout,
  turnsOf: (sessionIds: readonly string[]) => AuditTurn[],
  weightLog: WeightLogView | undefined,
): RolloutVerdict {
  const n = rollout.samples.length;
  const where = `rollout ${rollout.rolloutId} (task ${JSON.stringify(rollout.taskId)})`;
  if (rollout.samples.some((s) => s.session_id === null)) {
    const message = `${where}: a sample has no session_id, so its captured turns cannot be found`;
    return { tokens: 0, failedSamples: n, cause: 'no_session', message };
  }
  // The rollout's own session too: a rollout whose rows were lost still has turns that must be trained.
  const own = rollout.sessionId === undefined ? [] : [rollout.sessionId];
  const sessions = [...new Set([...own, ...rollout.samples.map((s) => s.session_id!)])];
  const turns = turnsOf(sessions);
  if (n > 0 && turns.every((t) => t.output_ids.length === 0)) {
    const message = `${where}: no captured turn of session(s) ${sessions.map((s) => JSON.stringify(s)).join(', ')}`;
    return { tokens: 0, failedSamples: n, cause: 'no_turns', message };
  }
  const report = auditTokens(rollout.samples, turns);
  const tokens = report.totals.trainedTokens;
  if (report.verdict === 'pass') {
    const problem = weightLog && weightLogProblem(rollout.samples, turns, weightLog);
    if (!problem) return { tokens, failedSamples: 0, message: '' };
    return { tokens, failedSamples: n, cause: problem.cause, message: `${where}: ${problem.message}` };
  }
  const bad = report.samples.filter((s) => !s.ok);
  const first = bad[0];
  if (first?.firstDifference) {
    const d = first.firstDifference;
    return {
      tokens,
      failedSamples: bad.length,
      cause: d.field,
      message: `${where}, sample ${first.position} (session ${JSON.stringify(first.sessionId)}): ${d.message}; expected ${d.expected}, found ${d.found}`,
    };
  }
  const untrained = report.turns.untrained.length > 0;
  return {
    tokens,
    failedSamples: n,
    cause: untrained ? 'untrained_turn' : 'token_count',
    message: `${where}: ${report.problems[0] ?? 'the audit failed'}`,
  };
}
