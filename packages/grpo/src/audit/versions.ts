/**
 * The token audit's version check: every trained token carries the weight version its captured turn
 * sampled it with (`metadata.weight_version_spans`, `[start, end, version]` over the response), and the
 * sample's `weight_versions` name every version its trained tokens came from.
 */
import type { Sample } from '@vime/core';
import { type AuditDifference, type AuditTurn, differenceAt } from './difference.js';

/** The weight version of each response token as a sample states it (undefined where it states none). */
export type TokenVersions = Array<string | undefined>;

/** A sample's per-token versions from its spans, or the first malformed span as a difference. */
export function sampleTokenVersions(sample: Sample): TokenVersions | AuditDifference {
  const n = sample.response_length;
  const at = differenceAt(sample.tokens.length - n);
  const out: TokenVersions = new Array(n).fill(undefined);
  const raw = sample.metadata?.weight_version_spans;
  if (raw === undefined) return out;
  if (!Array.isArray(raw)) {
    return at(0, 'weight_version_spans', '[[start, end, version], …]', typeof raw, 'spans must be an array');
  }
  let previousEnd = 0;
  for (const [j, span] of raw.entries()) {
    const [start, end, version] = Array.isArray(span) ? span : [];
    const ok =
      Number.isSafeInteger(start) &&
      Number.isSafeInteger(end) &&
      typeof version === 'string' &&
      (start as number) >= previousEnd &&
      (end as number) > (start as number) &&
      (end as number) <= n;
    if (!ok) {
      return at(
        Math.min(n, Math.max(0, Number(start) || 0)),
        'weight_version_spans',
        `[start, end, version] with ${previousEnd} ≤ start < end ≤ ${n}`,
        JSON.stringify(span),
        `weight_version_spans[${j}] is not an ordered span of the response`,
      );
    }
    out.fill(version as string, start as number, end as number);
    previousEnd = end as number;
  }
  return out;
}

/** The runs of versions a captured turn sampled its output with (the policy version past its runs). */
export function turnRuns(t: AuditTurn): Array<{ version: string | undefined; tokens: number }> {
  const runs: Array<{ version: string | undefined; tokens: number }> = [...(t.version_runs ?? [])];
  const covered = runs.reduce((n, r) => n + r.tokens, 0);
  if (covered < t.output_ids.length)
    runs.push({ version: t.policy_version, tokens: t.output_ids.length - covered });
  return runs;
}

/** The versions of tokens `i..i+m` against those of the turn's output tokens `0..m`, run by run. */
export function versionProblem(
  sample: Sample,
  versions: TokenVersions,
  t: AuditTurn,
  i: number,
  m: number,
): AuditDifference | undefined {
  let k = 0;
  for (const run of turnRuns(t)) {
    const end = Math.min(m, k + run.tokens);
    for (; k < end; k++)
      if (versions[i + k] !== run.version) return mismatch(sample, t, i + k, k, run.version, versions);
    if (run.version !== undefined && run.tokens > 0 && !sample.weight_versions.includes(run.version)) {
      return differenceAt(sample.tokens.length - sample.response_length)(
        i,
        'weight_versions',
        `a list naming ${JSON.stringify(run.version)}`,
        JSON.stringify(sample.weight_versions),
        `the sample's weight_versions omit version ${JSON.stringify(run.version)} of session ${JSON.stringify(t.session_id)} turn ${t.turn}`,
      );
    }
    if (k >= m) break;
  }
  return undefined;
}

function mismatch(
  sample: Sample,
  t: AuditTurn,
  token: number,
  k: number,
  want: string | undefined,
  versions: TokenVersions,
): AuditDifference {
  return differenceAt(sample.tokens.length - sample.response_length)(
    token,
    'weight_version_spans',
    want ?? 'no version',
    versions[token] ?? 'no version',
    `the weight version of token ${token} differs from output token ${k} of session ${JSON.stringify(t.session_id)} turn ${t.turn}`,
  );
}
