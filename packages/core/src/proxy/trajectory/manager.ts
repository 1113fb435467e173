import { EventEmitter } from 'eventemitter3';
import { ConfigError, ValidationError } from '../../errors.js';
import type { Trajectory, Turn } from '../../rollout.js';
import { createSample, type Sample, type SampleInit, type SampleStatus } from '../../sample.js';
import { type DriftCounts, type PackOptions, packTurns } from './pack.js';
import { keptRoutes } from './routing.js';
import { type RowTopK, topKFields } from './topk.js';

/** How a rollout's reward is given to its rows when the trajectory forked into several. */
export type RewardSplit = 'copy' | 'divide';

/** Options of the trajectory manager. */
export interface TrajectoryManagerOptions extends PackOptions {
  /** Default reward split (default `copy`: every row carries the rollout's reward). */
  rewardSplit?: RewardSplit | undefined;
  /** Decodes token ids to text, to fill `prompt` (when the base sample has none) and `response`. */
  decode?: ((ids: Int32Array) => string) | undefined;
}

/** How a session is finished: its reward, status and how the reward is split over rows. */
export interface FinishOptions {
  /** The rollout's reward. Required unless `status` is `failed` or `aborted`. */
  reward?: number | undefined;
  /** Fields copied into every row (`index`, `group_index`, `label`, `metadata`, `rollout_id`, …). */
  baseSample?: SampleInit | undefined;
  rewardSplit?: RewardSplit | undefined;
  /** Overrides the status derived from the last turn (`length` → truncated, `abort` → aborted). */
  status?: SampleStatus | undefined;
}

/** A finished session's drift: forks, realigns and re-tokenized tokens. */
export interface DriftReport extends DriftCounts {
  sessionId: string;
  turns: number;
  rows: number;
}

/** The events of the trajectory manager. */
export interface TrajectoryEvents {
  /** Emitted once per finished session: forks, realigns and re-tokenized tokens. */
  drift: (report: DriftReport) => void;
  /** A turn was recorded. */
  turn: (info: { sessionId: string; turn: Turn }) => void;
}

interface SessionState {
  turns: Turn[];
  openedAt: number;
}

/**
 * Keeps every session's turns and turns a finished session into slime-wire training rows
 * (`Sample[]`): packed while prompts extend exactly, realigned on short drift, forked otherwise.
 */
export class TrajectoryManager extends EventEmitter<TrajectoryEvents> {
  readonly #sessions = new Map<string, SessionState>();
  readonly #options: TrajectoryManagerOptions;
  #nextRolloutId = 0;

  constructor(options: TrajectoryManagerOptions = {}) {
    super();
    this.#options = options;
  }

  /** Start recording session `sessionId`. */
  open(sessionId: string): void {
    if (this.#sessions.has(sessionId)) {
      throw new ConfigError(
        `session ${JSON.stringify(sessionId)} is already open; session ids must be unique`,
      );
    }
    this.#sessions.set(sessionId, { turns: [], openedAt: performance.now() });
  }

  /** Whether session `sessionId` is being recorded. */
  has(sessionId: string): boolean {
    return this.#sessions.has(sessionId);
  }

  /** Record one model call of a session (opens the session when needed). */
  record(sessionId: string, turn: Omit<Turn, 'index'>): Turn {
    let state = this.#sessions.get(sessionId);
    if (!state) {
      state = { turns: [], openedAt: turn.startedAt };
      this.#sessions.set(sessionId, state);
    }
    const previous = state.turns[state.turns.length - 1];
    const full: Turn = { ...turn, index: state.turns.length };
    if (turn.routes) full.routes = keptRoutes(previous, turn);
    state.turns.push(full);
    this.emit('turn', { sessionId, turn: full });
    return full;
  }

  /** The turns recorded so far, with drift as packing would count it now. */
  trajectory(sessionId: string): Trajectory {
    const state = this.#require(sessionId);
    return { sessionId, turns: [...state.turns], drift: packTurns(state.turns, this.#options).drift };
  }

  /** Forget a session without producing samples. */
  discard(sessionId: string): boolean {
    return this.#sessions.delete(sessionId);
  }

  /**
   * Close a session and return its training rows. Every row shares `rollout_id` and `session_id`;
   * `metadata.rollout_reward` holds the authoritative per-rollout reward whatever the split.
   */
  finish(sessionId: string, options: FinishOptions = {}): Sample[] {
    const state = this.#require(sessionId);
    const base = options.baseSample ?? {};
    const { status, reward, split } = this.#settle(sessionId, state, options);
    const { rows, drift } = packTurns(state.turns, this.#options);
    const broken = rows.find((r) => r.replay?.error);
    if (broken) throw new ValidationError('turns.topP', broken.replay!.error!);
    const brokenTopK = rows.find((r) => r.topK?.error);
    if (brokenTopK) throw new ValidationError('turns.topK', brokenTopK.topK!.error!);
    const unrouted = rows.find((r) => r.routes?.error);
    if (unrouted) throw new ValidationError('turns.routes', unrouted.routes!.error!);
    this.#sessions.delete(sessionId);
    this.emit('drift', { sessionId, turns: state.turns.length, rows: rows.length, ...drift });

    const rolloutId = base.rollout_id ?? this.#nextRolloutId++;
    const modelMs = state.turns.reduce((s, t) => s + (t.endedAt - t.startedAt), 0);
    const nonGeneration = Math.max(0, (performance.now() - state.openedAt - modelMs) / 1000);
    const decode = this.#options.decode;
    return rows.map((row, i) => {
      const tokens = new Int32Array(row.promptIds.length + row.responseIds.length);
      tokens.set(row.promptIds);
      tokens.set(row.responseIds, row.promptIds.length);
      const rowReward = reward === undefined ? null : split === 'divide' ? reward / rows.length : reward;
      return createSample({
        ...base,
        prompt: base.prompt ?? (decode ? decode(row.promptIds) : ''),
        tokens,
        response: decode ? decode(row.responseIds) : '',
        response_length: row.responseIds.length,
        loss_mask: row.lossMask,
        rollout_log_probs: row.logprobs,
        rollout_top_p_token_ids: row.replay?.ids ?? null,
        rollout_top_p_token_offsets: row.replay?.offsets ?? null,
        rollout_routed_experts: row.routes?.experts ?? null,
        ...topKExtra(replayExtra(base.extra, row.replay?.logprobs), row.topK),
        reward: rowReward,
        rollout_id: rolloutId,
        session_id: sessionId,
        status,
        weight_versions: row.weightVersions,
        non_generation_time: nonGeneration,
        metadata: {
          ...base.metadata,
          rollout_reward: reward ?? null,
          reward_split: split,
          trajectory_row: i,
          trajectory_rows: rows.length,
          trajectory_turns: row.turns,
          drift: { ...drift },
          // The weight version of every sampled token, as [start, end, version] over the response.
          ...(row.versionSpans.length > 0 ? { weight_version_spans: row.versionSpans } : {}),
          ...engineMetadata(state.turns, row.turns),
        },
      });
    });
  }

  /**
   * Throw what `finish` would throw for these options (a missing or non-finite reward, an unknown
   * split), changing nothing: a caller finishing several sessions as one checks them all first.
   */
  check(sessionId: string, options: FinishOptions = {}): void {
    this.#settle(sessionId, this.#require(sessionId), options);
  }

  #settle(sessionId: string, state: SessionState, options: FinishOptions) {
    const base = options.baseSample ?? {};
    const last = state.turns[state.turns.length - 1];
    const status: SampleStatus =
      options.status ??
      (base.status && base.status !== 'pending' ? base.status : undefined) ??
      (last?.finishReason === 'length'
        ? 'truncated'
        : last?.finishReason === 'abort'
          ? 'aborted'
          : 'completed');
    const reward = options.reward;
    if (reward === undefined && status !== 'failed' && status !== 'aborted') {
      throw new ValidationError(
        'reward',
        `finishSession(${JSON.stringify(sessionId)}) needs a numeric reward for a ${status} rollout; pass { reward } or { status: 'failed' }`,
      );
    }
    if (reward !== undefined && !Number.isFinite(reward)) {
      throw new ValidationError('reward', `expected a finite number, found ${reward}`);
    }
    const split = options.rewardSplit ?? this.#options.rewardSplit ?? 'copy';
    if (split !== 'copy' && split !== 'divide') {
      throw new ValidationError('rewardSplit', `expected 'copy' or 'divide', found ${JSON.stringify(split)}`);
    }
    return { status, reward, split };
  }

  #require(sessionId: string): SessionState {
    const state = this.#sessions.get(sessionId);
    if (!state) {
      throw new ConfigError(
        `no open session ${JSON.stringify(sessionId)}; open it first (openSession) or check the id the harness sent`,
      );
    }
    return state;
  }
}

/** The kept ids' log probs travel as `rollout_top_p_log_probs`, a key slime's `Sample.from_dict` sets as an attribute. */
function replayExtra(
  extra: Record<string, unknown> | undefined,
  logprobs: Float32Array | undefined,
): { extra?: Record<string, unknown> | undefined } {
  if (!logprobs) return extra ? { extra } : {};
  return { extra: { ...extra, rollout_top_p_log_probs: Array.from(logprobs) } };
}

/**
 * The row's top-k log probs travel as `rollout_topk_token_ids` / `rollout_topk_log_probs` (one list of k
 * per response token), the reference framework's `Sample` fields; slime's `Sample.from_dict` sets them as
 * attributes.
 */
function topKExtra(
  current: { extra?: Record<string, unknown> | undefined },
  topK: RowTopK | undefined,
): { extra?: Record<string, unknown> | undefined } {
  if (!topK) return current;
  return { extra: { ...current.extra, ...topKFields(topK) } };
}

/** The engines that served a row's turns, per turn and in order of first use (when the proxy recorded them). */
function engineMetadata(turns: readonly Turn[], indices: readonly number[]): Record<string, unknown> {
  const perTurn = indices.map((i) => turns[i]?.engines ?? []);
  if (perTurn.every((e) => e.length === 0)) return {};
  const used: string[] = [];
  for (const list of perTurn) for (const url of list) if (!used.includes(url)) used.push(url);
  return { engines: used, turn_engines: perTurn };
}
