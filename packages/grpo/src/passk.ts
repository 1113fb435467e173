import { describeValue, ValidationError } from '@vime/core';

/**
 * Unbiased pass@k for `n` samples with `c` correct (Chen et al. 2021): `1 − C(n−c, k)/C(n, k)`,
 * computed as `1 − Π_{i=n−c+1..n} (1 − k/i)`; 1 when `n − c < k`.
 */
export function passAtK(n: number, c: number, k: number): number {
  if (
    !(
      Number.isInteger(n) &&
      Number.isInteger(c) &&
      Number.isInteger(k) &&
      n >= 1 &&
      c >= 0 &&
      c <= n &&
      k >= 1 &&
      k <= n
    )
  ) {
    throw new ValidationError(
      'passAtK',
      `needs integers 0 ≤ c ≤ n and 1 ≤ k ≤ n, found n=${n}, c=${c}, k=${k}`,
    );
  }
  if (n - c < k) return 1;
  let prod = 1;
  for (let i = n - c + 1; i <= n; i++) prod *= 1 - k / i;
  return 1 - prod;
}

/**
 * slime's `--log-passrate` report: rewards in positional groups of `groupSize`, a sample counts as
 * solved only when its reward is exactly 1, pass@k for k = 1, 2, 4, … ≤ groupSize, averaged over groups.
 * Use it on one reward per session (see `collapseSessions`), never on fan-out rows.
 */
export function slimePassRate(rewards: ArrayLike<number>, groupSize: number): Record<string, number> {
  if (
    !Number.isInteger(groupSize) ||
    groupSize < 1 ||
    rewards.length === 0 ||
    rewards.length % groupSize !== 0
  ) {
    throw new ValidationError(
      'groupSize',
      `${rewards.length} rewards do not split into groups of ${describeValue(groupSize)}`,
    );
  }
  const groups = rewards.length / groupSize;
  const out: Record<string, number> = {};
  for (let k = 1; k <= groupSize; k *= 2) {
    let sum = 0;
    for (let g = 0; g < groups; g++) {
      let c = 0;
      for (let j = 0; j < groupSize; j++) if (rewards[g * groupSize + j] === 1) c++;
      sum += passAtK(groupSize, c, k);
    }
    out[`pass@${k}`] = sum / groups;
  }
  return out;
}
