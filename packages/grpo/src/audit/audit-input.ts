/** The token audit's inputs read from text: a batch of slime sample dicts and a captured-turn log. */
import {
  type CapturedTurn,
  CapturedTurnSchema,
  fromSlimeDict,
  parseWith,
  type Sample,
  ValidationError,
} from '@vime/core';
import { nucleusProblem, topLogprobsProblem } from '@vime/core/engine';

/** JSON values of a file: one JSON document (an array, or an object with `samples`), or JSON lines. */
function jsonValues(text: string, what: string): Array<{ value: unknown; where: string }> {
  const trimmed = text.trim();
  if (trimmed === '') throw new ValidationError(what, 'the file is empty', { code: 'decode_error' });
  try {
    const doc = JSON.parse(trimmed) as unknown;
    const list = Array.isArray(doc)
      ? doc
      : doc && typeof doc === 'object' && Array.isArray((doc as { samples?: unknown }).samples)
        ? (doc as { samples: unknown[] }).samples
        : [doc];
    return list.map((value, i) => ({ value, where: `${what}[${i}]` }));
  } catch {
    // Not one document: JSON lines.
  }
  const out: Array<{ value: unknown; where: string }> = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    const where = `${what}:${i + 1}`;
    try {
      out.push({ value: JSON.parse(line), where });
    } catch (error) {
      throw new ValidationError(where, `not JSON: ${(error as Error).message}`, { code: 'decode_error' });
    }
  });
  return out;
}

/** A batch of training samples: `Sample.to_dict()` dicts as JSON lines, a JSON array, or `{ samples }`. */
export function readAuditBatch(text: string, what = 'batch'): Sample[] {
  return jsonValues(text, what).map(({ value, where }) => fromSlimeDict(value, where));
}

/** A captured-turn log (JSON lines of `capturedTurnRecord`), each record checked for consistency. */
export function readTurnLog(text: string, what = 'turn log'): CapturedTurn[] {
  return jsonValues(text, what).map(({ value, where }) => {
    const turn = parseWith(CapturedTurnSchema, value, 'captured turn', { root: where, code: 'decode_error' });
    if (turn.output_log_probs.length !== turn.output_ids.length) {
      throw new ValidationError(
        `${where}.output_log_probs`,
        `expected one per output token (${turn.output_ids.length}), found ${turn.output_log_probs.length}`,
        { code: 'decode_error' },
      );
    }
    const { top_p_token_ids: ids, top_p_token_offsets: offsets, top_p_log_probs: lps } = turn;
    if (ids || offsets || lps) {
      const problem =
        ids && offsets
          ? nucleusProblem(
              {
                ids: Int32Array.from(ids),
                offsets: Int32Array.from(offsets),
                logprobs: lps ? Float32Array.from(lps) : undefined,
              },
              { outputLength: turn.output_ids.length },
            )
          : 'top_p_token_ids: replay data needs both top_p_token_ids and top_p_token_offsets';
      if (problem)
        throw new ValidationError(`${where}.${problem.split(':')[0]}`, problem, { code: 'decode_error' });
    }
    const { topk_k: k, topk_token_ids: topIds, topk_log_probs: topLps } = turn;
    if (k !== undefined || topIds || topLps) {
      const top = {
        k: k ?? 0,
        ids: Int32Array.from(topIds ?? []),
        logprobs: Float32Array.from(topLps ?? []),
      };
      const problem = topLogprobsProblem(top, { outputLength: turn.output_ids.length, k: k ?? 0 });
      if (problem) throw new ValidationError(`${where}.topk_token_ids`, problem, { code: 'decode_error' });
    }
    return turn;
  });
}
