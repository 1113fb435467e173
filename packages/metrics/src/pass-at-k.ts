import { ValidationError } from '@vime/core';

/** One problem's tally: `n` scored attempts, `c` of them correct. */
export interface PassCount {
  n: number;
  c: number;
}

/** One problem's attempts, correct ones and k. */
export interface PassAtKInput extends PassCount {
  k: number;
}

function checkCount({ n, c, k }: PassAtKInput, what: string): void {
  const fields = { n, c, k } as const;
  for (const [name, value] of Object.entries(fields)) {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new ValidationError(
        name,
        `${what}: expected a non-negative integer, found ${String(value)}; pass whole counts of attempts`,
      );
    }
  }
  if (n < 1) throw new ValidationError('n', `${what}: expected n ≥ 1 attempts, found ${n}`);
  if (c > n) {
    throw new ValidationError(
      'c',
      `${what}: c = ${c} correct exceeds n = ${n} attempts; count each attempt once`,
    );
  }
  if (k < 1 || k > n) {
    throw new ValidationError(
      'k',
      `${what}: k = ${k} is outside 1..n (n = ${n}); the unbiased estimator needs at least k attempts per problem`,
    );
  }
}

/**
 * Unbiased pass@k (Chen et al. 2021): the probability that at least one of k attempts drawn without
 * replacement from n (c correct) is correct, `1 − C(n−c, k) / C(n, k)`. Computed as the stable product
 * `1 − Π_{i=n−c+1..n} (1 − k/i)`, which never forms a binomial coefficient. `c = 0` gives exactly 0 and
 * `n − c < k` exactly 1. Throws `ValidationError` unless `0 ≤ c ≤ n` and `1 ≤ k ≤ n`.
 */
export function passAtK(input: PassAtKInput): number {
  checkCount(input, 'passAtK');
  const { n, c, k } = input;
  if (c === 0) return 0;
  if (n - c < k) return 1;
  let allWrong = 1;
  for (let i = n - c + 1; i <= n; i++) allWrong *= 1 - k / i;
  return 1 - allWrong;
}

/**
 * Unbiased pass^k (all k attempts correct): `C(c, k) / C(n, k)`, computed as the product
 * `Π_{i=0..k−1} (c − i) / (n − i)`. 0 when `c < k`, 1 when `c = n`.
 */
export function passHatK(input: PassAtKInput): number {
  checkCount(input, 'passHatK');
  const { n, c, k } = input;
  if (c < k) return 0;
  let all = 1;
  for (let i = 0; i < k; i++) all *= (c - i) / (n - i);
  return all;
}

/** slime's default ladder: `k = 1, 2, 4, …` up to `n`. */
export function powersOfTwoUpTo(n: number): number[] {
  const ks: number[] = [];
  for (let k = 1; k <= n; k *= 2) ks.push(k);
  return ks;
}

/** pass@k of a batch at one k. */
export interface BatchPassAtK {
  k: number;
  /** Mean over the problems that had at least k attempts; `null` when none had. */
  value: number | null;
  /** Problems averaged. */
  problems: number;
  /** Problems left out because they had fewer than k attempts. */
  skipped: number;
}

function meanOver(
  counts: ReadonlyArray<PassCount>,
  ks: ReadonlyArray<number>,
  estimator: (input: PassAtKInput) => number,
): BatchPassAtK[] {
  return ks.map((k) => {
    let sum = 0;
    let problems = 0;
    for (const { n, c } of counts) {
      if (n < k) continue;
      sum += estimator({ n, c, k });
      problems++;
    }
    return { k, value: problems === 0 ? null : sum / problems, problems, skipped: counts.length - problems };
  });
}

/**
 * pass@k averaged over many problems, one entry per k. A problem with fewer than k attempts is not
 * silently treated as a failure: it is left out of that k and counted in `skipped`.
 */
export function passAtKBatch(counts: ReadonlyArray<PassCount>, ks: ReadonlyArray<number>): BatchPassAtK[] {
  return meanOver(counts, ks, passAtK);
}

/** pass^k averaged over many problems (see `passAtKBatch` for the skipping rule). */
export function passHatKBatch(counts: ReadonlyArray<PassCount>, ks: ReadonlyArray<number>): BatchPassAtK[] {
  return meanOver(counts, ks, passHatK);
}

/**
 * Tally equal-size groups of a flat reward list (slime's `--log-passrate` layout: `[num_groups · n]`)
 * with an explicit correctness predicate. Throws when the length is not a multiple of `groupSize`.
 */
export function countCorrect(
  flatRewards: ReadonlyArray<number>,
  groupSize: number,
  correct: (reward: number) => boolean,
): PassCount[] {
  if (!Number.isSafeInteger(groupSize) || groupSize < 1) {
    throw new ValidationError('groupSize', `expected a positive integer, found ${String(groupSize)}`);
  }
  if (flatRewards.length % groupSize !== 0) {
    throw new ValidationError(
      'flatRewards',
      `length ${flatRewards.length} is not a multiple of groupSize ${groupSize}; group rollouts by problem (rolloutMetrics does) instead of reshaping`,
    );
  }
  const counts: PassCount[] = [];
  for (let g = 0; g < flatRewards.length; g += groupSize) {
    let c = 0;
    for (let i = g; i < g + groupSize; i++) if (correct(flatRewards[i]!)) c++;
    counts.push({ n: groupSize, c });
  }
  return counts;
}
