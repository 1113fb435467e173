/**
 * Token-level staleness: per step, how many weight versions each trained token (loss mask 1) lags behind
 * the trainer that took it, read from the rows' `metadata.weight_version_spans` (`[start, end, version]`
 * over the response, as the capture proxy records them) and the trainer's version when it took the
 * batch (`metadata.staleness.trainer_version`, as the loop stamps every trained row).
 */
import { isScored, type RolloutResult, type Sample } from '@vime/core';
import { byNumber, table } from './html-parts.js';

/** One step's trained tokens by lag. */
export interface TokenStalenessStep {
  step: number;
  /** The trainer's version the lags are measured from. */
  trainer_version: number;
  /** Where it came from: the rows' `staleness.trainer_version`, or (rows without it) the step's newest token version. */
  trainer_version_from: 'rows' | 'newest_token';
  /** Trained tokens with a numbered version. */
  tokens: number;
  /** Trained tokens by lag (trainer version − token version). */
  lag: Record<string, number>;
  /** The share of the step's versioned tokens at each lag (sums to 1). */
  share: Record<string, number>;
  mean_lag: number;
  max_lag: number;
  /** Trained tokens no span covers, or whose version is not a number: no lag for them. */
  unversioned: number;
}

/** Token-level staleness, per step and over the run. */
export interface TokenStaleness {
  per_step: TokenStalenessStep[];
  tokens: number;
  lag: Record<string, number>;
  share: Record<string, number>;
  mean_lag: number;
  max_lag: number;
  unversioned: number;
}

const numbered = (v: unknown): number | undefined => {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (typeof v !== 'string' || v.trim() === '') return undefined;
  const n = Number(v);
  return Number.isFinite(n) ? n : undefined;
};

/** The numbered version of each trained token of a row (undefined: no span, or not a number), and its trainer version. */
function rowTokens(row: Sample): { versions: Array<number | undefined>; trainer: number | undefined } {
  const n = row.response_length;
  const byToken = new Array<number | undefined>(n).fill(undefined);
  const spans = row.metadata?.weight_version_spans;
  if (Array.isArray(spans)) {
    for (const span of spans) {
      if (!Array.isArray(span)) continue;
      const [start, end, version] = span as [unknown, unknown, unknown];
      if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end)) continue;
      const v = numbered(version);
      for (let i = Math.max(0, start as number); i < Math.min(n, end as number); i++) byToken[i] = v;
    }
  }
  const versions: Array<number | undefined> = [];
  for (let i = 0; i < n; i++) if (row.loss_mask === null || row.loss_mask[i] === 1) versions.push(byToken[i]);
  const staleness = row.metadata?.staleness as { trainer_version?: unknown } | undefined;
  return { versions, trainer: numbered(staleness?.trainer_version) };
}

function lagSummary(lag: Record<string, number>) {
  let tokens = 0;
  let sum = 0;
  let max = Number.NEGATIVE_INFINITY;
  for (const [k, count] of Object.entries(lag)) {
    tokens += count;
    sum += Number(k) * count;
    max = Math.max(max, Number(k));
  }
  const share: Record<string, number> = {};
  for (const [k, count] of Object.entries(lag)) share[k] = count / tokens;
  return { tokens, share, mean_lag: tokens ? sum / tokens : 0, max_lag: tokens ? max : 0 };
}

/** Token-level staleness of the trained rows of each step; null when no trained token carries a numbered version. */
export function tokenStaleness(
  byStep: ReadonlyArray<{ step: number; results: ReadonlyArray<RolloutResult> }>,
): TokenStaleness | null {
  const perStep: TokenStalenessStep[] = [];
  const total: Record<string, number> = {};
  let unversionedTotal = 0;
  for (const { step, results } of byStep) {
    const rows = results.filter(isScored).flatMap((r) => r.samples.map(rowTokens));
    const known = rows.flatMap((r) => r.versions).filter((v): v is number => v !== undefined);
    if (known.length === 0) continue;
    const newest = Math.max(...known);
    const lag: Record<string, number> = {};
    let unversioned = 0;
    const fromRows = rows.every((r) => r.versions.length === 0 || r.trainer !== undefined);
    for (const r of rows) {
      const trainer = r.trainer ?? newest;
      for (const v of r.versions) {
        if (v === undefined) {
          unversioned++;
          continue;
        }
        const k = String(trainer - v);
        lag[k] = (lag[k] ?? 0) + 1;
        total[k] = (total[k] ?? 0) + 1;
      }
    }
    unversionedTotal += unversioned;
    const trainers = rows.map((r) => r.trainer).filter((t): t is number => t !== undefined);
    perStep.push({
      step,
      trainer_version: fromRows && trainers.length > 0 ? Math.max(...trainers) : newest,
      trainer_version_from: fromRows && trainers.length > 0 ? 'rows' : 'newest_token',
      lag,
      ...lagSummary(lag),
      unversioned,
    });
  }
  if (perStep.length === 0) return null;
  return { per_step: perStep, lag: total, ...lagSummary(total), unversioned: unversionedTotal };
}

/** The token-level staleness tables of the report's staleness section. */
export function tokenStalenessHtml(s: TokenStaleness | null | undefined): string {
  if (!s) return '';
  const pct = (x: number | undefined) => `${((x ?? 0) * 100).toFixed(1)}%`;
  const lags = Object.keys(s.lag).sort(byNumber);
  const rows = s.per_step.map((p) => [
    String(p.step),
    String(p.trainer_version),
    String(p.tokens),
    ...lags.map((k) => `${p.lag[k] ?? 0} (${pct(p.share[k])})`),
    p.mean_lag.toFixed(2),
    String(p.unversioned),
  ]);
  return (
    '<h3>Trained tokens by lag (trainer version − token version)</h3>' +
    table(
      ['step', 'trainer version', 'tokens', ...lags.map((k) => `lag ${k}`), 'mean lag', 'unversioned'],
      rows,
    ) +
    `<p>${s.tokens} trained tokens carry a weight version: ${lags.map((k) => `${pct(s.share[k])} at lag ${k}`).join(', ')}; most behind: ${s.max_lag}.</p>`
  );
}
