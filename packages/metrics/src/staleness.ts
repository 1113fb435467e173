/**
 * Off-policy staleness of a batch: how many weight versions each training row spans (a turn continued
 * across a weight update spans two) and how far its oldest tokens lag behind the newest version in the
 * batch. Versions are ordered numerically when every one is a number, else in order of first appearance.
 */

/** What staleness reads of a row: slime's `weight_versions` (the versions of its turns, in order). */
export interface VersionedRow {
  weight_versions: readonly string[];
}

/** How stale a batch's rows are: their weight versions and their lag. */
export interface WeightStaleness {
  rows: number;
  /** Rows with any version recorded. */
  versionedRows: number;
  /** Rows whose tokens come from more than one version. */
  mixedRows: number;
  /** Most versions one row spans. */
  maxVersionsPerRow: number;
  meanVersionsPerRow: number;
  /** Versions between a row's oldest token and the newest version of the batch: the largest and the mean. */
  maxLag: number;
  meanLag: number;
  /** Every version seen, oldest first. */
  versions: string[];
}

/** How stale a batch's rows are, from each row's weight versions. */
export function weightStaleness(rows: readonly VersionedRow[]): WeightStaleness {
  const seen: string[] = [];
  for (const r of rows) for (const v of r.weight_versions) if (!seen.includes(v)) seen.push(v);
  const numeric = seen.length > 0 && seen.every((v) => v.trim() !== '' && Number.isFinite(Number(v)));
  const order = numeric ? [...seen].sort((a, b) => Number(a) - Number(b)) : seen;
  const rank = new Map(order.map((v, i) => [v, i]));
  const newest = order.length - 1;
  let versionedRows = 0;
  let mixedRows = 0;
  let maxVersions = 0;
  let sumVersions = 0;
  let maxLag = 0;
  let sumLag = 0;
  for (const r of rows) {
    const versions = new Set(r.weight_versions);
    if (versions.size === 0) continue;
    versionedRows++;
    if (versions.size > 1) mixedRows++;
    maxVersions = Math.max(maxVersions, versions.size);
    sumVersions += versions.size;
    const oldest = Math.min(...[...versions].map((v) => rank.get(v)!));
    maxLag = Math.max(maxLag, newest - oldest);
    sumLag += newest - oldest;
  }
  return {
    rows: rows.length,
    versionedRows,
    mixedRows,
    maxVersionsPerRow: maxVersions,
    meanVersionsPerRow: versionedRows ? sumVersions / versionedRows : 0,
    maxLag,
    meanLag: versionedRows ? sumLag / versionedRows : 0,
    versions: order,
  };
}
