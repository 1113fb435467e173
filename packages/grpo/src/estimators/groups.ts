import { describeValue, ValidationError } from '@vime/core';

/** How samples are grouped: by explicit keys (any order, e.g. a prompt id) or by positional blocks. */
export interface GroupingOptions {
  /** One key per sample (`group_index`, prompt uid, …). Samples with equal keys form a group. */
  groups?: ArrayLike<number | string> | undefined;
  /** Consecutive blocks of this many samples form a group (slime's `--n-samples-per-prompt`). */
  groupSize?: number | undefined;
  /** Accept groups of different sizes. Off by default: uneven groups usually mean lost or fanned-out rows. */
  allowUnevenGroups?: boolean | undefined;
}

/** Samples arranged by group: group `g` holds `members[starts[g] .. starts[g+1])`. */
export interface Grouping {
  keys: Array<number | string>;
  starts: Int32Array;
  members: Int32Array;
  /** The group of each sample. */
  groupOf: Int32Array;
}

export function groupSizeOf(grouping: Grouping, g: number): number {
  return grouping.starts[g + 1]! - grouping.starts[g]!;
}

/** Validate rewards: a non-empty list of finite numbers. Returns them as a Float64Array. */
export function checkRewards(rewards: ArrayLike<number>, what = 'rewards'): Float64Array {
  if (rewards == null || typeof rewards.length !== 'number') {
    throw new ValidationError(what, `expected an array of numbers, found ${describeValue(rewards)}`);
  }
  if (rewards.length === 0) {
    throw new ValidationError(what, 'the batch is empty; pass at least one reward');
  }
  const out = new Float64Array(rewards.length);
  for (let i = 0; i < rewards.length; i++) {
    const r = rewards[i];
    if (typeof r !== 'number' || !Number.isFinite(r)) {
      throw new ValidationError(
        `${what}[${i}]`,
        `reward must be a finite number, found ${describeValue(r)}; drop or re-grade that sample (failed rollouts carry no reward)`,
      );
    }
    out[i] = r;
  }
  return out;
}

/** Resolve `groups` / `groupSize` into a `Grouping` for `n` samples, with errors that name the fix. */
export function resolveGroups(n: number, options: GroupingOptions, what = 'rewards'): Grouping {
  const { groups, groupSize, allowUnevenGroups = false } = options;
  if (groups !== undefined && groupSize !== undefined) {
    throw new ValidationError(
      'groupSize',
      'pass either `groups` (keys) or `groupSize` (positional blocks), not both',
    );
  }
  if (groups !== undefined) return groupsByKey(n, groups, allowUnevenGroups, what);
  if (groupSize === undefined) {
    throw new ValidationError(
      'groups',
      'no grouping given: pass `groups` (one key per sample, e.g. group_index) or `groupSize` (n_samples_per_prompt)',
    );
  }
  if (!Number.isInteger(groupSize) || groupSize < 1) {
    throw new ValidationError('groupSize', `must be a positive integer, found ${describeValue(groupSize)}`);
  }
  if (n % groupSize !== 0 && !allowUnevenGroups) {
    throw new ValidationError(
      'groupSize',
      `${n} ${what} do not split into groups of ${groupSize} (remainder ${n % groupSize}); pass \`groups\` keys (e.g. group_index) or set allowUnevenGroups to let the last group be short`,
    );
  }
  const count = Math.ceil(n / groupSize);
  const starts = new Int32Array(count + 1);
  const members = new Int32Array(n);
  const groupOf = new Int32Array(n);
  const keys = new Array<number>(count);
  for (let g = 0; g < count; g++) {
    keys[g] = g;
    const from = g * groupSize;
    const to = Math.min(from + groupSize, n);
    starts[g + 1] = to;
    for (let i = from; i < to; i++) {
      members[i] = i;
      groupOf[i] = g;
    }
  }
  return { keys, starts, members, groupOf };
}

function groupsByKey(
  n: number,
  groups: ArrayLike<number | string>,
  allowUneven: boolean,
  what: string,
): Grouping {
  if (groups == null || typeof groups.length !== 'number') {
    throw new ValidationError('groups', `expected one key per sample, found ${describeValue(groups)}`);
  }
  if (groups.length !== n) {
    throw new ValidationError(
      'groups',
      `has ${groups.length} keys but there are ${n} ${what}; pass exactly one group key per sample`,
    );
  }
  const index = new Map<number | string, number>();
  const keys: Array<number | string> = [];
  const groupOf = new Int32Array(n);
  const counts: number[] = [];
  for (let i = 0; i < n; i++) {
    const key = groups[i]!;
    if (!(typeof key === 'string' || (typeof key === 'number' && Number.isFinite(key)))) {
      throw new ValidationError(
        `groups[${i}]`,
        `group key must be a string or finite number, found ${describeValue(key)}`,
      );
    }
    let g = index.get(key);
    if (g === undefined) {
      g = keys.length;
      index.set(key, g);
      keys.push(key);
      counts.push(0);
    }
    groupOf[i] = g;
    counts[g]!++;
  }
  if (!allowUneven) {
    const first = counts[0]!;
    const odd = counts.findIndex((c) => c !== first);
    if (odd >= 0) {
      throw new ValidationError(
        'groups',
        `group sizes differ (group ${JSON.stringify(keys[0])} has ${first} samples, group ${JSON.stringify(keys[odd])} has ${counts[odd]}); set allowUnevenGroups: true if that is intended (e.g. after dynamic filtering), or collapse fan-out rows with collapseSessions first`,
      );
    }
  }
  const starts = new Int32Array(keys.length + 1);
  for (let g = 0; g < keys.length; g++) starts[g + 1] = starts[g]! + counts[g]!;
  const fill = starts.slice(0, keys.length);
  const members = new Int32Array(n);
  for (let i = 0; i < n; i++) members[fill[groupOf[i]!]!++] = i;
  return { keys, starts, members, groupOf };
}
