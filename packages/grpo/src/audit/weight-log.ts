/**
 * The hand-off's check of weight versions against the router's weight-update log: a sample's
 * `metadata.weight_version_spans` cover exactly its trained tokens (loss mask 1), and every version a
 * captured turn's tokens carry was logged for an engine that produced the turn (an update the router
 * applied or was told of, or a version the engine reported itself). The token audit has already found
 * each span equal to its captured turn's versions, so a span that passes names a logged version.
 */
import type { Sample } from '@vime/core';
import type { AuditTurn } from './difference.js';
import { turnRuns } from './versions.js';

/** What the check reads of the log: whether a version was ever in force for an engine (`WeightUpdateLog`). */
export interface WeightLogView {
  /** Whether `version` was ever in force for the engine at `url`. */
  logged(url: string, version: string): boolean;
}

/** Why a rollout's versions disagree with the log, with the field to count it under; undefined when they agree. */
export interface WeightLogProblem {
  cause: 'weight_version_spans' | 'weight_version_log';
  message: string;
}

/** The first problem of a rollout's samples and captured turns against the log. */
export function weightLogProblem(
  samples: readonly Sample[],
  turns: readonly AuditTurn[],
  log: WeightLogView,
): WeightLogProblem | undefined {
  for (const [position, sample] of samples.entries()) {
    const message = coverageProblem(sample);
    if (message) return { cause: 'weight_version_spans', message: `sample ${position}: ${message}` };
  }
  for (const t of turns) {
    // Read back from a file (a restarted run): its engines, and the log of the process that captured it, are gone.
    if (t.engines === undefined) continue;
    for (const run of turnRuns(t)) {
      if (run.version === undefined || run.tokens === 0) continue;
      if (t.engines.some((url) => log.logged(url, run.version!))) continue;
      const engines = t.engines.length > 0 ? t.engines.join(', ') : 'no engine recorded';
      return {
        cause: 'weight_version_log',
        message: `session ${JSON.stringify(t.session_id)} turn ${t.turn}: weight version ${JSON.stringify(run.version)} was never logged for the engine(s) that produced it (${engines})`,
      };
    }
  }
  return undefined;
}

/** Spans present must cover the trained response tokens exactly: none left out, no observation in one. */
function coverageProblem(sample: Sample): string | undefined {
  const raw = sample.metadata?.weight_version_spans;
  if (!Array.isArray(raw)) return undefined;
  const n = sample.response_length;
  // No mask: every response token is trained.
  const trained = (i: number) => sample.loss_mask === null || sample.loss_mask[i] === 1;
  const covered = new Uint8Array(n);
  for (const [j, span] of raw.entries()) {
    const [start, end] = span as [number, number, string];
    for (let i = start; i < end; i++) {
      if (!trained(i))
        return `weight_version_spans[${j}] covers response token ${i}, which is not trained (loss mask 0)`;
      covered[i] = 1;
    }
  }
  for (let i = 0; i < n; i++) {
    if (trained(i) && covered[i] === 0)
      return `trained response token ${i} is in no weight_version_spans span`;
  }
  return undefined;
}
