import { describeValue, type Sample, ValidationError } from '@vime/core';
import { type GrpoOptions, grpoAdvantages } from './advantages.js';
import type { FloatArray } from './f32.js';

/**
 * Session-level rewards: a multi-turn rollout that became several training rows (fan-out, compaction,
 * sub-agents) must count once in its group's mean and std. Collapse the rows to one reward per
 * session, normalize, then give every row its session's advantage.
 */

export interface FanoutRows {
  /** The session (rollout) each row belongs to: `session_id`, or `rollout_id`. */
  sessionIds: ArrayLike<string | number>;
  /** The session reward each row carries (all rows of a session carry the same one). */
  rewards: ArrayLike<number>;
  /** The group (prompt) of each row; rows of one session must share it. */
  groups: ArrayLike<string | number>;
}

/**
 * Rows collapsed to one entry per session: the sessions, their rewards and groups, and each row's session.
 */
export interface CollapsedSessions {
  sessions: Array<string | number>;
  /** One reward per session. */
  rewards: Float64Array;
  /** One group key per session. */
  groups: Array<string | number>;
  /** For each row, the index of its session. */
  rowToSession: Int32Array;
}

/** Collapse rows that share a session into one entry per session, checking that they agree. */
export function collapseSessions(rows: FanoutRows): CollapsedSessions {
  const n = rows.rewards.length;
  for (const key of ['sessionIds', 'groups'] as const) {
    if (rows[key]?.length !== n) {
      throw new ValidationError(
        key,
        `has ${describeValue(rows[key])} entries but there are ${n} rewards; pass one per row`,
      );
    }
  }
  if (n === 0) throw new ValidationError('rewards', 'the batch is empty');
  const index = new Map<string | number, number>();
  const sessions: Array<string | number> = [];
  const rewards: number[] = [];
  const groups: Array<string | number> = [];
  const rowToSession = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const id = rows.sessionIds[i]!;
    const reward = rows.rewards[i]!;
    if (!Number.isFinite(reward)) {
      throw new ValidationError(`rewards[${i}]`, `must be a finite number, found ${describeValue(reward)}`);
    }
    let s = index.get(id);
    if (s === undefined) {
      s = sessions.length;
      index.set(id, s);
      sessions.push(id);
      rewards.push(reward);
      groups.push(rows.groups[i]!);
    } else if (rewards[s] !== reward) {
      throw new ValidationError(
        `rewards[${i}]`,
        `row of session ${JSON.stringify(id)} carries reward ${reward} but an earlier row of it carries ${rewards[s]}; define one scalar per session before normalizing (do not split it across rows)`,
      );
    } else if (groups[s] !== rows.groups[i]) {
      throw new ValidationError(
        `groups[${i}]`,
        `row of session ${JSON.stringify(id)} is in group ${JSON.stringify(rows.groups[i])} but an earlier row of it is in ${JSON.stringify(groups[s])}`,
      );
    }
    rowToSession[i] = s;
  }
  return { sessions, rewards: Float64Array.from(rewards), groups, rowToSession };
}

/** GRPO advantages computed per session (each session counted once), one per row. */
export function sessionAdvantages(
  rows: FanoutRows,
  options: Omit<GrpoOptions, 'groups' | 'groupSize'>,
): FloatArray {
  const collapsed = collapseSessions(rows);
  const perSession = grpoAdvantages(collapsed.rewards, { ...options, groups: collapsed.groups });
  const out =
    perSession instanceof Float32Array
      ? new Float32Array(rows.rewards.length)
      : new Float64Array(rows.rewards.length);
  for (let i = 0; i < out.length; i++) out[i] = perSession[collapsed.rowToSession[i]!]!;
  return out;
}

/** The fan-out rows of Vime samples: session `session_id` (else `rollout_id`), group `group_index`. */
export function fanoutRowsOf(samples: ReadonlyArray<Sample>): FanoutRows {
  return {
    sessionIds: samples.map((s, i) => {
      const id = s.session_id ?? s.rollout_id;
      if (id === null)
        throw new ValidationError(
          `samples[${i}]`,
          'has neither session_id nor rollout_id; fan-out rows need one',
        );
      return id;
    }),
    rewards: samples.map((s, i) => {
      if (typeof s.reward !== 'number') {
        throw new ValidationError(
          `samples[${i}].reward`,
          `expected a number, found ${describeValue(s.reward)}`,
        );
      }
      return s.reward;
    }),
    groups: samples.map((s, i) => {
      if (s.group_index === null)
        throw new ValidationError(
          `samples[${i}].group_index`,
          'is null; fan-out rows need their prompt group',
        );
      return s.group_index;
    }),
  };
}
