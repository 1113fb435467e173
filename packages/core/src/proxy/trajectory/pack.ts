import type { Turn } from '../../rollout.js';
import { type RowReplay, rowReplay } from './replay.js';
import { type RowRoutes, rowRoutes } from './routing.js';
import { type RowTopK, rowTopK } from './topk.js';

/** One training row under construction: a prompt and the response region that follows it. */
export interface PackedRow {
  promptIds: Int32Array;
  /** Response region: sampled outputs (mask 1) interleaved with observations (mask 0). */
  responseIds: Int32Array;
  lossMask: Uint8Array;
  logprobs: Float32Array;
  /** Indexes (into the trajectory) of the turns packed into this row. */
  turns: number[];
  /** Weight versions of those turns, in order of first appearance. */
  weightVersions: string[];
  /** The version of every sampled token: `[start, end, version]` over the response region, in order. */
  versionSpans: Array<[number, number, string]>;
  /**
   * Sampler replay data over the response region (empty spans on observations), when the row's turns
   * carry it; `error` says why it could not be built (turns with and without it in one row).
   */
  replay?: RowReplay | undefined;
  /** Top-k log probs over the response region (the uniform filler on observations), when the row's turns carry them. */
  topK?: RowTopK | undefined;
  /**
   * MoE routing replay over the row's tokens but the last (slime's `rollout_routed_experts`), when its
   * turns carry routing; `error` says why it could not be built.
   */
  routes?: RowRoutes | undefined;
}

/** How often packing a session's turns had to fork or realign a row. */
export interface DriftCounts {
  /** Times a turn's prompt did not extend the row and a new row was started. */
  forks: number;
  /** Times short drift inside the last response was overwritten in place. */
  realigns: number;
  /** Sampled tokens replaced by re-tokenized ones during realigns. */
  retokenizedTokens: number;
}

/** Options of packing a session's turns into rows. */
export interface PackOptions {
  /** Longest drift (tokens from the divergence to the end of the last output) fixed by a realign. Default 16. */
  realignMaxTokens?: number | undefined;
}

/** A session's packed rows and their drift counts. */
export interface PackResult {
  rows: PackedRow[];
  drift: DriftCounts;
  /** What happened at each turn after the first. */
  steps: Array<{
    turn: number;
    kind: 'extend' | 'realign' | 'fork';
    divergedAt?: number | undefined;
    replaced?: number | undefined;
  }>;
}

/** Growable parallel arrays for one row. */
class RowBuilder {
  ids: number[] = [];
  mask: number[] = [];
  logprobs: number[] = [];
  /** The weight version of each response token (undefined for observations and unversioned output). */
  tokenVersions: Array<string | undefined> = [];
  /** Where each response token was sampled: turn index and output position (-1 for observations). */
  sourceTurn: number[] = [];
  sourcePos: number[] = [];
  /** Start (in response coordinates) of the last sampled output. */
  lastOutputStart = 0;
  turns: number[] = [];
  /** The first position of the row each turn's routing fills (parallel to `turns`). */
  routeFrom: number[] = [];
  versions: string[] = [];
  constructor(readonly promptIds: Int32Array) {}

  get length(): number {
    return this.promptIds.length + this.ids.length;
  }
  at(i: number): number {
    const p = this.promptIds.length;
    return i < p ? this.promptIds[i]! : this.ids[i - p]!;
  }
  truncate(fullLength: number): void {
    const n = fullLength - this.promptIds.length;
    this.ids.length = n;
    this.mask.length = n;
    this.logprobs.length = n;
    this.tokenVersions.length = n;
    this.sourceTurn.length = n;
    this.sourcePos.length = n;
  }
  observe(ids: ArrayLike<number>, from: number): void {
    for (let i = from; i < ids.length; i++) {
      this.ids.push(ids[i]!);
      this.mask.push(0);
      this.logprobs.push(0);
      this.tokenVersions.push(undefined);
      this.sourceTurn.push(-1);
      this.sourcePos.push(-1);
    }
  }
  sample(turn: Turn, index: number, routeFrom: number): void {
    this.routeFrom.push(routeFrom);
    this.lastOutputStart = this.ids.length;
    for (let i = 0; i < turn.outputIds.length; i++) {
      this.ids.push(turn.outputIds[i]!);
      this.mask.push(1);
      this.logprobs.push(turn.logprobs[i]!);
      this.sourceTurn.push(index);
      this.sourcePos.push(i);
    }
    this.turns.push(index);
    const runs = turn.versionRuns ?? [{ version: turn.policyVersion, tokens: turn.outputIds.length }];
    let left = turn.outputIds.length;
    for (const run of runs) {
      const n = Math.min(run.tokens, left);
      for (let i = 0; i < n; i++) this.tokenVersions.push(run.version);
      left -= n;
      if (run.version !== undefined && !this.versions.includes(run.version)) this.versions.push(run.version);
    }
    for (; left > 0; left--) this.tokenVersions.push(turn.policyVersion);
  }
  versionSpans(): Array<[number, number, string]> {
    const spans: Array<[number, number, string]> = [];
    const v = this.tokenVersions;
    for (let i = 0; i < v.length; ) {
      const version = v[i];
      let j = i + 1;
      while (j < v.length && v[j] === version) j++;
      if (version !== undefined) spans.push([i, j, version]);
      i = j;
    }
    return spans;
  }
  build(turns: readonly Turn[]): PackedRow {
    return {
      promptIds: this.promptIds,
      responseIds: Int32Array.from(this.ids),
      lossMask: Uint8Array.from(this.mask),
      logprobs: Float32Array.from(this.logprobs),
      turns: this.turns,
      weightVersions: this.versions,
      versionSpans: this.versionSpans(),
      replay: rowReplay(turns, this.turns, this.sourceTurn, this.sourcePos),
      topK: rowTopK(turns, this.turns, this.sourceTurn, this.sourcePos),
      routes: rowRoutes(turns, this.turns, this.routeFrom),
    };
  }
}

/**
 * Pack a trajectory's turns into training rows. While each turn's prompt extends the previous
 * prompt + output exactly as tokens, the turn joins the row (the new prompt tokens are observations:
 * loss mask 0, log prob 0). When the prompt diverges inside the last output by at most
 * `realignMaxTokens`, the drifted tail is overwritten by the re-tokenized prompt (mask 0). Otherwise
 * the trajectory forks: a new row starts from this turn's prompt. A turn that carries routing (R3)
 * never realigns: re-tokenized positions would have no routing of their own, so it forks.
 */
export function packTurns(turns: readonly Turn[], options: PackOptions = {}): PackResult {
  const realignMax = options.realignMaxTokens ?? 16;
  const rows: PackedRow[] = [];
  const drift: DriftCounts = { forks: 0, realigns: 0, retokenizedTokens: 0 };
  const steps: PackResult['steps'] = [];
  let row: RowBuilder | undefined;
  turns.forEach((turn, t) => {
    const prompt = turn.promptIds;
    if (!row) {
      row = new RowBuilder(prompt);
      row.sample(turn, t, 0);
      return;
    }
    const n = row.length;
    const limit = Math.min(n, prompt.length);
    let common = 0;
    while (common < limit && prompt[common] === row.at(common)) common++;
    let routeFrom = 0;
    if (common === n) {
      row.observe(prompt, n);
      steps.push({ turn: t, kind: 'extend' });
      // the previous output's last token is first forwarded by this turn's prefill
      routeFrom = n - 1;
    } else if (
      turn.routes === undefined &&
      common >= row.promptIds.length + row.lastOutputStart &&
      n - common <= realignMax
    ) {
      row.truncate(common);
      row.observe(prompt, common);
      drift.realigns++;
      drift.retokenizedTokens += n - common;
      steps.push({ turn: t, kind: 'realign', divergedAt: common, replaced: n - common });
    } else {
      rows.push(row.build(turns));
      row = new RowBuilder(prompt);
      drift.forks++;
      steps.push({ turn: t, kind: 'fork', divergedAt: common });
    }
    row.sample(turn, t, routeFrom);
  });
  if (row) rows.push(row.build(turns));
  return { rows, drift, steps };
}
