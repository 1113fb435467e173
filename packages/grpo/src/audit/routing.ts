/**
 * The token audit of routing replay (R3): a row's `rollout_routed_experts` (slime's layout: one position
 * per token but the last, `layers × topK` expert ids each) must hold, at every position whose forward
 * pass sampled a trained token, the experts its captured turn recorded there — the routing that
 * produced the token. A row without routing whose turn recorded some, or the reverse, differs too.
 */
import type { Sample } from '@vime/core';
import { type AuditDifference, type AuditTurn, differenceAt } from './difference.js';

const FIELD = 'rollout_routed_experts';
const ref = (t: AuditTurn) => `session ${JSON.stringify(t.session_id)} turn ${t.turn}`;

/** The row's routing has one position per token but the last, each `layers × topK` alike. */
export function routingShapeProblem(sample: Sample, p: number): AuditDifference | undefined {
  const routes = sample.rollout_routed_experts;
  if (!routes) return undefined;
  const want = Math.max(0, sample.tokens.length - 1);
  const at = differenceAt(p);
  if (routes.length !== want) {
    return at(
      0,
      FIELD,
      `${want} positions`,
      `${routes.length}`,
      'routing replay needs one position per token but the last',
    );
  }
  const layers = routes[0]?.length ?? 0;
  const topK = routes[0]?.[0]?.length ?? 0;
  for (let q = 0; q < routes.length; q++) {
    const row = routes[q]!;
    if (row.length !== layers || row.some((l) => l.length !== topK)) {
      return at(
        q - p,
        FIELD,
        `${layers} layers × ${topK}`,
        `position ${q} differs`,
        'every position needs the same layers × top-k',
      );
    }
  }
  return undefined;
}

/**
 * The routing of the forward passes that sampled response tokens `i..i+m` (positions `p+i−1 ..
 * p+i+m−2` of the row) against turn `t`'s.
 */
export function routingProblem(
  sample: Sample,
  t: AuditTurn,
  i: number,
  m: number,
  p: number,
): AuditDifference | undefined {
  const at = differenceAt(p);
  const routes = sample.rollout_routed_experts;
  const recorded = t.routed_experts;
  if (!recorded) {
    return routes
      ? at(
          i,
          FIELD,
          `no routing (${ref(t)} recorded none)`,
          'routing',
          'the sample replays routing the turn did not record',
        )
      : undefined;
  }
  if (!routes) {
    return at(
      i,
      FIELD,
      `the routing ${ref(t)} recorded`,
      'none',
      'the sample lacks the routing replay data of its turn',
    );
  }
  const { layers, top_k: topK, start, experts } = recorded;
  const rows = experts.length / (layers * topK);
  for (let q = p + i - 1; q < p + i + m - 1; q++) {
    const token = q + 1 - p;
    if (q < start || q >= start + rows) {
      return at(
        token,
        FIELD,
        `routing of position ${q}`,
        'none',
        `${ref(t)} recorded no routing for position ${q}`,
      );
    }
    const row = routes[q]!;
    if (row.length !== layers || row[0]!.length !== topK) {
      return at(
        token,
        FIELD,
        `${layers} layers × ${topK}`,
        `${row.length} × ${row[0]?.length}`,
        'the routing shape differs from the turn’s',
      );
    }
    for (let l = 0; l < layers; l++) {
      for (let k = 0; k < topK; k++) {
        const want = experts[((q - start) * layers + l) * topK + k]!;
        if (row[l]![k] !== want) {
          return at(
            token,
            FIELD,
            String(want),
            String(row[l]![k]),
            `the expert of position ${q} (layer ${l}, slot ${k}), which sampled token ${token}, differs from ${ref(t)}'s`,
          );
        }
      }
    }
  }
  return undefined;
}
