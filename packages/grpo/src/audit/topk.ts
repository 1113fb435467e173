/**
 * The token audit's checks of top-k log probs (score centering): a sample's `rollout_topk_token_ids` /
 * `rollout_topk_log_probs` (one list of k per response token, kept in `extra`) must carry, on every
 * trained token, its captured turn's head of that output token, and on every other token the uniform
 * filler (ids 0..k-1, log prob -log k each).
 */
import type { Sample } from '@vime/core';
import { type AuditDifference, type AuditTurn, differenceAt } from './difference.js';

/** A sample's heads: k, and one row of ids and of log probs per response token. */
export interface SampleTopK {
  k: number;
  ids: ArrayLike<number>[];
  logprobs: ArrayLike<number>[];
}

const f32 = (x: number) => Math.fround(x);
const ref = (t: AuditTurn) => `session ${JSON.stringify(t.session_id)} turn ${t.turn}`;

/** A sample's heads, or the difference that says why they are malformed; undefined when it has none. */
export function sampleTopK(sample: Sample, n: number, p: number): SampleTopK | AuditDifference | undefined {
  const ids = sample.extra?.rollout_topk_token_ids;
  const lps = sample.extra?.rollout_topk_log_probs;
  if (ids === undefined && lps === undefined) return undefined;
  const at = differenceAt(p);
  const rows = (v: unknown) => Array.isArray(v) && v.length === n && v.every((r) => Array.isArray(r));
  if (!rows(ids) || !rows(lps)) {
    const field = rows(ids) ? 'rollout_topk_log_probs' : 'rollout_topk_token_ids';
    return at(
      0,
      field,
      `${n} rows (one per response token)`,
      describe(rows(ids) ? lps : ids),
      'top-k data needs one row of k ids and one of k log probs per response token',
    );
  }
  const idRows = ids as number[][];
  const lpRows = lps as number[][];
  const k = idRows[0]?.length ?? 0;
  for (let i = 0; i < n; i++) {
    if (idRows[i]!.length !== k || lpRows[i]!.length !== k) {
      const field = idRows[i]!.length !== k ? 'rollout_topk_token_ids' : 'rollout_topk_log_probs';
      return at(
        i,
        field,
        `${k} entries`,
        String(Math.min(idRows[i]!.length, lpRows[i]!.length)),
        'every row of top-k data has k entries',
      );
    }
  }
  return { k, ids: idRows, logprobs: lpRows };
}

function describe(v: unknown): string {
  return Array.isArray(v) ? `${v.length} entries` : v === undefined ? 'none' : typeof v;
}

/** A token with loss mask 0 was not sampled: it carries the uniform filler. */
export function maskedTopKProblem(
  top: SampleTopK | undefined,
  i: number,
  p: number,
): AuditDifference | undefined {
  if (!top) return undefined;
  const filler = f32(-Math.log(top.k));
  for (let j = 0; j < top.k; j++) {
    if (top.ids[i]![j] !== j || f32(top.logprobs[i]![j]!) !== filler) {
      return differenceAt(p)(
        i,
        top.ids[i]![j] !== j ? 'rollout_topk_token_ids' : 'rollout_topk_log_probs',
        `the filler (ids 0..${top.k - 1}, log prob ${filler})`,
        `[${Array.from(top.ids[i]!).join(', ')}]: [${Array.from(top.logprobs[i]!).join(', ')}]`,
        'a token with loss mask 0 was not sampled and carries the uniform top-k filler',
      );
    }
  }
  return undefined;
}

/** The sample's heads of tokens `i..i+m` against the turn's of output tokens `0..m`. */
export function compareTopK(
  t: AuditTurn,
  top: SampleTopK | undefined,
  i: number,
  m: number,
  p: number,
): AuditDifference | undefined {
  const at = differenceAt(p);
  const ids = t.topk_token_ids;
  const lps = t.topk_log_probs;
  const k = t.topk_k;
  if (!ids || !lps || !k) {
    return top
      ? at(
          i,
          'rollout_topk_token_ids',
          `no top-k data (${ref(t)} has none)`,
          'top-k data',
          'the sample carries heads the turn did not record',
        )
      : undefined;
  }
  if (!top) {
    return at(
      i,
      'rollout_topk_token_ids',
      `the heads ${ref(t)} recorded`,
      'none',
      'the sample lacks the top-k log probs of its turn',
    );
  }
  if (top.k !== k)
    return at(
      i,
      'rollout_topk_token_ids',
      `k = ${k}`,
      `k = ${top.k}`,
      `the sample's heads are not top-${k} as ${ref(t)}'s`,
    );
  for (let q = 0; q < m; q++) {
    for (let j = 0; j < k; j++) {
      const wantId = ids[q * k + j]!;
      const wantLp = lps[q * k + j]!;
      const gotId = top.ids[i + q]![j]!;
      const gotLp = top.logprobs[i + q]![j]!;
      if (wantId !== gotId || (wantLp !== gotLp && f32(wantLp) !== f32(gotLp))) {
        return at(
          i + q,
          wantId !== gotId ? 'rollout_topk_token_ids' : 'rollout_topk_log_probs',
          `${wantId}: ${wantLp}`,
          `${gotId}: ${gotLp}`,
          `entry ${j} of the head of token ${i + q} differs from that of output token ${q} of ${ref(t)}`,
        );
      }
    }
  }
  return undefined;
}
