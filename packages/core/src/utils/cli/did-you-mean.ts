// "Did you mean" hints for misspelled flags, subcommands, config keys and values.

/** Levenshtein distance: the fewest single-character insertions, deletions and substitutions from a to b. */
export function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return row[b.length]!;
}

/**
 * The known name closest to `name` (case ignored), if it is within 2 edits or a third of its length:
 * close enough to be a typo, far enough that an unrelated name gets no hint.
 */
export function closest(name: string, known: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestScore = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const d = editDistance(name.toLowerCase(), candidate.toLowerCase());
    if (d < bestScore) {
      best = candidate;
      bestScore = d;
    }
  }
  return best !== undefined && bestScore <= Math.max(2, Math.floor(best.length / 3)) ? best : undefined;
}

/** ` (did you mean "x"?)` for the closest known name, or `''` when none is close. */
export function didYouMean(name: string, known: Iterable<string>): string {
  const hint = closest(name, known);
  return hint ? ` (did you mean ${JSON.stringify(hint)}?)` : '';
}
