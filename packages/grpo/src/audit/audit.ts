/**
 * The token audit: every trained span of a batch maps to exactly one captured turn (the proxy's
 * captured-turn log), with identical prompt and output token ids, log probs, sampler replay slices and
 * weight versions; every captured turn of the batch's sessions is trained once; trained tokens equal
 * sampled tokens.
 */
import type { Sample } from '@vime/core';
import { type AuditDifference, type AuditTurn, differenceAt, extendedTurn } from './difference.js';
import { routingProblem, routingShapeProblem } from './routing.js';
import { compareTopK, maskedTopKProblem, sampleTopK } from './topk.js';
import { sampleTokenVersions, versionProblem } from './versions.js';

/** A captured turn, by its session and index. */
export interface TurnRef {
  session_id: string;
  turn: number;
}

/** The token audit of one sample: where its tokens and log probs differ from the captured turns. */
export interface SampleAudit {
  /** The sample's position in the batch. */
  position: number;
  /** The sample's own `index` field. */
  index: number | null;
  sessionId: string | null;
  trainedTokens: number;
  /** The captured turns the sample's trained spans map to, in order. */
  turns: TurnRef[];
  /** Sampled tokens of those turns replaced by re-tokenised text (a realign), not trained. */
  realignedTokens: number;
  ok: boolean;
  firstDifference?: AuditDifference | undefined;
}

/** The token audit of a batch against the captured turns: a verdict and each sample's differences. */
export interface TokenAuditReport {
  verdict: 'pass' | 'fail';
  samples: SampleAudit[];
  turns: {
    /** Captured turns with output in the log. */
    captured: number;
    /** Of those, the ones of sessions in the batch. */
    inBatchSessions: number;
    matched: number;
    /** Turns of the batch's sessions no trained span maps to. */
    untrained: Array<TurnRef & { outputTokens: number }>;
  };
  totals: { trainedTokens: number; sampledTokens: number; realignedTokens: number };
  /** Batch-level failures (untrained turns, totals that do not add up). */
  problems: string[];
}

const f32 = (x: number) => Math.fround(x);
const show = (x: number) => String(f32(x));
const ref = (t: AuditTurn) => `session ${JSON.stringify(t.session_id)} turn ${t.turn}`;
const key = (t: TurnRef) => `${t.session_id}\u0000${t.turn}`;

/** The kept-id log probs a sample carries (`rollout_top_p_log_probs`, kept in `extra`). */
function replayLogprobs(sample: Sample): number[] | undefined {
  const v = sample.extra?.rollout_top_p_log_probs;
  return Array.isArray(v) ? (v as number[]) : undefined;
}

interface Replay {
  ids: ArrayLike<number>;
  offsets: ArrayLike<number>;
  logprobs: ArrayLike<number> | undefined;
}

/** Check a sample's own shape; the first problem as a difference. */
function shapeProblem(
  sample: Sample,
  n: number,
  p: number,
  replay: Replay | undefined,
): AuditDifference | undefined {
  const at = differenceAt(p);
  if (n > sample.tokens.length) {
    return at(
      0,
      'response_length',
      `≤ ${sample.tokens.length}`,
      String(n),
      'response_length exceeds the tokens',
    );
  }
  if (sample.loss_mask && sample.loss_mask.length !== n) {
    return at(
      0,
      'loss_mask',
      `${n} entries`,
      `${sample.loss_mask.length}`,
      'loss_mask needs one entry per response token',
    );
  }
  const lp = sample.rollout_log_probs;
  if (!lp || lp.length !== n) {
    return at(
      0,
      'rollout_log_probs',
      `${n} entries`,
      lp ? `${lp.length}` : 'none',
      'every response token needs its rollout log prob',
    );
  }
  if (!replay) return undefined;
  const { ids, offsets, logprobs } = replay;
  if (offsets.length !== n + 1 || offsets[0] !== 0) {
    return at(
      0,
      'rollout_top_p_token_offsets',
      `${n + 1} offsets from 0`,
      `${offsets.length} from ${offsets[0]}`,
      'offsets need one entry per response token plus one, starting at 0',
    );
  }
  for (let i = 0; i < n; i++) {
    if (offsets[i + 1]! < offsets[i]!) {
      return at(
        i,
        'rollout_top_p_token_offsets',
        `≥ ${offsets[i]}`,
        String(offsets[i + 1]),
        `offsets[${i + 1}] is below offsets[${i}]: offsets never decrease`,
      );
    }
  }
  if (offsets[n] !== ids.length) {
    return at(
      n > 0 ? n - 1 : 0,
      'rollout_top_p_token_offsets',
      String(ids.length),
      String(offsets[n]),
      'the last offset must equal the number of kept ids',
    );
  }
  if (logprobs && logprobs.length !== ids.length) {
    return at(
      0,
      'rollout_top_p_log_probs',
      `${ids.length} entries`,
      `${logprobs.length}`,
      'one log prob per kept id',
    );
  }
  return undefined;
}

/**
 * Audit a batch of training samples against the captured turns they were built from. A sample with a
 * `session_id` is matched against that session's turns only (GRPO siblings share their first prompt).
 */
export function auditTokens(samples: readonly Sample[], turns: readonly AuditTurn[]): TokenAuditReport {
  const live = turns.filter((t) => t.output_ids.length > 0);
  // Turns by prompt length, per session ('' holds every turn, for samples without a session id).
  const index = new Map<string, Map<number, AuditTurn[]>>();
  const add = (scope: string, t: AuditTurn) => {
    let m = index.get(scope);
    if (!m) {
      m = new Map();
      index.set(scope, m);
    }
    const list = m.get(t.prompt_ids.length);
    if (list) list.push(t);
    else m.set(t.prompt_ids.length, [t]);
  };
  for (const t of live) {
    add(`s:${t.session_id}`, t);
    add('', t);
  }
  const usedBy = new Map<string, number>();
  const reports = samples.map((sample, position) => auditSample(sample, position, index, usedBy));

  const sessions = new Set(samples.map((s) => s.session_id));
  const scoped = sessions.has(null) ? live : live.filter((t) => sessions.has(t.session_id));
  const untrained = scoped
    .filter((t) => !usedBy.has(key(t)))
    .map((t) => ({ session_id: t.session_id, turn: t.turn, outputTokens: t.output_ids.length }));
  const trainedTokens = reports.reduce((s, r) => s + r.trainedTokens, 0);
  const realignedTokens = reports.reduce((s, r) => s + r.realignedTokens, 0);
  const sampledTokens = scoped.reduce((s, t) => s + t.output_ids.length, 0);
  const problems: string[] = [];
  for (const t of untrained.slice(0, 10)) {
    problems.push(
      `session ${JSON.stringify(t.session_id)} turn ${t.turn} (${t.outputTokens} sampled tokens) is in no trained span`,
    );
  }
  if (untrained.length > 10) problems.push(`… and ${untrained.length - 10} more untrained turns`);
  if (trainedTokens + realignedTokens !== sampledTokens) {
    problems.push(
      `the batch trains ${trainedTokens} tokens (loss mask 1)${realignedTokens ? ` and realigned ${realignedTokens}` : ''}, but its sessions sampled ${sampledTokens}`,
    );
  }
  const ok = problems.length === 0 && reports.every((r) => r.ok);
  return {
    verdict: ok ? 'pass' : 'fail',
    samples: reports,
    turns: { captured: live.length, inBatchSessions: scoped.length, matched: usedBy.size, untrained },
    totals: { trainedTokens, sampledTokens, realignedTokens },
    problems,
  };
}

/** What the checks of one sample share: its tokens, where its response starts, its session's turns. */
interface SampleView {
  tokens: Int32Array;
  /** Response tokens. */
  n: number;
  /** Where the response starts in `tokens`. */
  p: number;
  trained: (i: number) => boolean;
  replay: Replay | undefined;
  /** The captured turns the sample may map to, by prompt length. */
  pool: Map<number, AuditTurn[]> | undefined;
  /** The scope of that pool, for messages. */
  where: string;
  at: ReturnType<typeof differenceAt>;
}

function viewOf(sample: Sample, index: Map<string, Map<number, AuditTurn[]>>): SampleView {
  const n = sample.response_length;
  const p = sample.tokens.length - n;
  const mask = sample.loss_mask;
  return {
    tokens: sample.tokens,
    n,
    p,
    trained: (i) => (mask ? mask[i] === 1 : true),
    replay:
      sample.rollout_top_p_token_offsets || sample.rollout_top_p_token_ids
        ? {
            ids: sample.rollout_top_p_token_ids ?? [],
            offsets: sample.rollout_top_p_token_offsets ?? [],
            logprobs: replayLogprobs(sample),
          }
        : undefined,
    pool: index.get(sample.session_id === null ? '' : `s:${sample.session_id}`),
    where: sample.session_id === null ? 'the log' : `session ${JSON.stringify(sample.session_id)}`,
    at: differenceAt(p),
  };
}

/**
 * Walk a sample's response: every run of trained tokens must be the output of one captured turn no
 * other span trains (or a prefix of it, where the row realigned), with the turn's log probs and nucleus.
 */
function auditSample(
  sample: Sample,
  position: number,
  index: Map<string, Map<number, AuditTurn[]>>,
  usedBy: Map<string, number>,
): SampleAudit {
  const v = viewOf(sample, index);
  const report: SampleAudit = {
    position,
    index: sample.index,
    sessionId: sample.session_id,
    trainedTokens: 0,
    turns: [],
    realignedTokens: 0,
    ok: true,
  };
  for (let i = 0; i < Math.min(v.n, v.tokens.length); i++) if (v.trained(i)) report.trainedTokens++;
  const fail = (d: AuditDifference) => {
    report.ok = false;
    report.firstDifference = d;
    return report;
  };
  const shape = shapeProblem(sample, v.n, v.p, v.replay) ?? routingShapeProblem(sample, v.p);
  if (shape) return fail(shape);
  const top = sampleTopK(sample, v.n, v.p);
  if (top && 'field' in top) return fail(top);
  const lp = sample.rollout_log_probs!;
  const versions = sampleTokenVersions(sample);
  if (!Array.isArray(versions)) return fail(versions);

  let previous: AuditTurn | undefined;
  // The last turn whose prompt and output are verified to be the sample's tokens up to here.
  let anchor: AuditTurn | undefined;
  for (let i = 0; i < v.n; ) {
    if (!v.trained(i)) {
      const masked = maskedTokenProblem(v, i) ?? maskedTopKProblem(top, i, v.p);
      if (masked) return fail(masked);
      i++;
      previous = undefined;
      continue;
    }
    let runEnd = i;
    while (runEnd < v.n && v.trained(runEnd)) runEnd++;
    const match = turnOfSpan(v, i, runEnd, previous, anchor);
    if (!('turn' in match)) return fail(match);
    const t = match.turn;
    const used = usedBy.get(key(t));
    if (used !== undefined) {
      return fail(
        v.at(
          i,
          'turn',
          'a turn no other span trains',
          `${ref(t)}, already trained by sample ${used}`,
          `the trained span at token ${i} maps to a turn another span already trained`,
        ),
      );
    }
    usedBy.set(key(t), position);
    report.turns.push({ session_id: t.session_id, turn: t.turn });
    const m = Math.min(t.output_ids.length, runEnd - i);
    report.realignedTokens += t.output_ids.length - m;
    const problem =
      logProbProblem(v, lp, t, i, m) ??
      compareReplay(t, v.replay, i, m, v.p) ??
      compareTopK(t, top, i, m, v.p) ??
      routingProblem(sample, t, i, m, v.p) ??
      versionProblem(sample, versions, t, i, m);
    if (problem) return fail(problem);
    previous = t;
    anchor = m === t.output_ids.length ? t : undefined;
    i += m;
  }
  return report;
}

/** A token with loss mask 0 was not sampled, so it must carry no nucleus. */
function maskedTokenProblem(v: SampleView, i: number): AuditDifference | undefined {
  const { replay } = v;
  if (!replay || replay.offsets[i + 1] === replay.offsets[i]) return undefined;
  return v.at(
    i,
    'rollout_top_p_token_offsets',
    'an empty span',
    `${Number(replay.offsets[i + 1]) - Number(replay.offsets[i])} kept ids`,
    'a token with loss mask 0 was not sampled and has no nucleus',
  );
}

/**
 * The one captured turn whose prompt is the sample's tokens before `i` and whose output is the trained
 * run `i..runEnd` (or starts it, where the run continues into the next turn or the row realigned).
 */
function turnOfSpan(
  v: SampleView,
  i: number,
  runEnd: number,
  previous: AuditTurn | undefined,
  anchor: AuditTurn | undefined,
): { turn: AuditTurn } | AuditDifference {
  const s = v.p + i;
  const run = runEnd - i;
  const candidates = (v.pool?.get(s) ?? []).filter((t) => promptMatches(t, v.tokens, s, anchor));
  if (candidates.length === 0) return noTurnProblem(v, i, run, previous);
  const common = candidates.map((t) =>
    samePrefix(t.output_ids, v.tokens, Math.min(t.output_ids.length, run), s),
  );
  const exact = candidates.filter((t, k) => {
    const m = common[k]!;
    if (m < Math.min(t.output_ids.length, run)) return false;
    if (m === t.output_ids.length) return true; // the whole output (a longer run continues into the next turn)
    // A shorter span is a realign: the row's next token is re-tokenised text that differs from the output.
    return runEnd < v.n && v.tokens[v.p + runEnd] !== t.output_ids[m];
  });
  if (exact.length === 1) return { turn: exact[0]! };
  if (exact.length > 1) {
    return v.at(
      i,
      'turn',
      'one captured turn',
      exact.map(ref).join(', '),
      `the trained span at token ${i} maps to ${exact.length} captured turns`,
    );
  }
  // No turn fits: name where the closest one departs from the run.
  let best = 0;
  for (let k = 1; k < candidates.length; k++) if (common[k]! > common[best]!) best = k;
  const t = candidates[best]!;
  const m = common[best]!;
  if (m < Math.min(t.output_ids.length, run)) {
    return v.at(
      i + m,
      'tokens',
      String(t.output_ids[m]),
      String(v.tokens[s + m]),
      `token ${i + m} differs from output token ${m} of ${ref(t)}`,
    );
  }
  return v.at(
    runEnd,
    'loss_mask',
    '1',
    '0',
    `token ${runEnd} is output token ${m} of ${ref(t)} (sampled) but has loss mask 0`,
  );
}

/** No captured turn has the prompt before a trained run: say why as precisely as the log allows. */
function noTurnProblem(
  v: SampleView,
  i: number,
  run: number,
  previous: AuditTurn | undefined,
): AuditDifference {
  if (previous) {
    return v.at(
      i,
      'loss_mask',
      '0',
      '1',
      `token ${i} has loss mask 1 right after the end of ${ref(previous)}'s output, and no captured turn sampled it`,
    );
  }
  const s = v.p + i;
  // Name the closest prompt of the session, to point at the first token that differs.
  const closest = closestPrompt(v.pool, v.tokens, s);
  if (closest && closest.at < s) {
    const t = closest.turn;
    return v.at(
      closest.at - v.p,
      'tokens',
      String(t.prompt_ids[closest.at]),
      String(v.tokens[closest.at]),
      `the trained span at token ${i} maps to no captured turn of ${v.where}: the prompt of ${ref(t)} differs at position ${closest.at}`,
    );
  }
  return v.at(
    i,
    'turn',
    `a turn of ${v.where} with this ${s}-token prompt`,
    'none',
    `the trained span of ${run} tokens at token ${i} maps to no captured turn`,
  );
}

/** The rollout log probs of tokens `i..i+m` against the turn's output log probs, in float32 (NaN equals NaN). */
function logProbProblem(
  v: SampleView,
  lp: ArrayLike<number>,
  t: AuditTurn,
  i: number,
  m: number,
): AuditDifference | undefined {
  for (let k = 0; k < m; k++) {
    const x = lp[i + k]!;
    const y = t.output_log_probs[k]!;
    // Equal doubles first: the common case, without rounding.
    if (x !== y && f32(x) !== f32(y) && !(Number.isNaN(x) && Number.isNaN(y))) {
      return v.at(
        i + k,
        'rollout_log_probs',
        show(t.output_log_probs[k]!),
        show(lp[i + k]!),
        `the log prob of token ${i + k} differs from output token ${k} of ${ref(t)}`,
      );
    }
  }
  return undefined;
}

/**
 * Whether turn `t`'s prompt is `tokens[0..s)`. Where `t` was recorded as extending the anchor (the turn
 * whose prompt and output this sample's tokens were just verified to be), only the rest is compared.
 */
function promptMatches(t: AuditTurn, tokens: Int32Array, s: number, anchor: AuditTurn | undefined): boolean {
  const p = t.prompt_ids;
  if (p.length !== s || s > tokens.length) return false;
  const from = anchor && extendedTurn(t) === anchor ? anchor.prompt_ids.length + anchor.output_ids.length : 0;
  for (let k = from; k < s; k++) if (p[k] !== tokens[k]) return false;
  return true;
}

/** How many leading entries of `a` equal `tokens[from..]` (up to `limit`). */
function samePrefix(a: ArrayLike<number>, tokens: Int32Array, limit: number, from = 0): number {
  const n = Math.min(limit, a.length, tokens.length - from);
  let k = 0;
  while (k < n && a[k] === tokens[from + k]) k++;
  return k;
}

function closestPrompt(
  pool: Map<number, AuditTurn[]> | undefined,
  tokens: Int32Array,
  s: number,
): { turn: AuditTurn; at: number } | undefined {
  let best: { turn: AuditTurn; at: number } | undefined;
  for (const list of pool?.values() ?? []) {
    for (const t of list) {
      if (t.prompt_ids.length > s) continue;
      const at = samePrefix(t.prompt_ids, tokens, t.prompt_ids.length);
      if (at < t.prompt_ids.length && (!best || at > best.at)) best = { turn: t, at };
    }
  }
  return best;
}

/** The sample's nucleus of tokens `i..i+m` against the turn's of output tokens `0..m`. */
function compareReplay(
  t: AuditTurn,
  replay: Replay | undefined,
  i: number,
  m: number,
  p: number,
): AuditDifference | undefined {
  const at = differenceAt(p);
  const ids = t.top_p_token_ids;
  const offsets = t.top_p_token_offsets;
  if (!ids || !offsets) {
    return replay
      ? at(
          i,
          'rollout_top_p_token_ids',
          `no replay data (${ref(t)} has none)`,
          'replay data',
          'the sample replays a nucleus the turn did not record',
        )
      : undefined;
  }
  if (!replay) {
    return at(
      i,
      'rollout_top_p_token_ids',
      `the nucleus ${ref(t)} recorded`,
      'none',
      'the sample lacks the sampler replay data of its turn',
    );
  }
  const lps = t.top_p_log_probs;
  const rIds = replay.ids;
  const rOffsets = replay.offsets;
  for (let k = 0; k < m; k++) {
    const a = offsets[k]!;
    const b = offsets[k + 1]!;
    const x = rOffsets[i + k]!;
    const y = rOffsets[i + k + 1]!;
    // Compared in place: this runs for every trained token of every hand-off.
    let same = b - a === y - x;
    for (let j = 0; same && j < b - a; j++) same = ids[a + j] === rIds[x + j];
    if (!same) {
      const want = Array.prototype.slice.call(ids, a, b) as number[];
      const got = Array.from({ length: Math.max(0, y - x) }, (_, j) => Number(replay.ids[x + j]));
      const field = want.length !== got.length ? 'rollout_top_p_token_offsets' : 'rollout_top_p_token_ids';
      return at(
        i + k,
        field,
        `[${want.join(', ')}]`,
        `[${got.join(', ')}]`,
        `the nucleus of token ${i + k} differs from that of output token ${k} of ${ref(t)}`,
      );
    }
    if (lps) {
      if (!replay.logprobs) {
        return at(
          i + k,
          'rollout_top_p_log_probs',
          `the kept-id log probs ${ref(t)} recorded`,
          'none',
          'the sample lacks the log probs of its nucleus',
        );
      }
      for (let j = 0; j < b - a; j++) {
        const want = lps[a + j]!;
        const got = replay.logprobs[x + j]!;
        if (want !== got && f32(want) !== f32(got)) {
          return at(
            i + k,
            'rollout_top_p_log_probs',
            show(lps[a + j]!),
            show(replay.logprobs[x + j]!),
            `the log prob of kept id ${ids[a + j]} of token ${i + k} differs from ${ref(t)}'s`,
          );
        }
      }
    }
  }
  return undefined;
}
