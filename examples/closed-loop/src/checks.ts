/**
 * The checks of a closed-loop step, on the files it left: `vime-grpo check` (the trainer's dumped
 * advantages against the SDK's recomputation, slime preset), the token audit (the trainer trained on
 * exactly the tokens, loss masks and rollout log-probs the capture proxy recorded), and the weight
 * versions (every row carries the version the engine served while it was sampled).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeSamples, type Sample } from '@vime/core';
import { checkAgainstTrainer, readRolloutDump, readTrainDump, type TrainDump } from '@vime/grpo';

export interface TokenAudit {
  ok: boolean;
  samples: number;
  tokens: number;
  /** The first differences found (at most 10), by rollout position and field. */
  problems: string[];
}

/** Compare a train dump with the captured step batch, sample by sample and token by token. */
export function auditTrainerTokens(captured: readonly Sample[], dump: TrainDump): TokenAudit {
  const problems: string[] = [];
  const add = (p: string) => {
    if (problems.length < 10) problems.push(p);
  };
  if (dump.samples.length !== captured.length)
    add(`the trainer trained ${dump.samples.length} samples, the batch has ${captured.length}`);
  const seen = new Set<number>();
  let tokens = 0;
  for (const s of dump.samples) {
    const at = s.rollout_position;
    const row = captured[at];
    if (!row) {
      add(`rollout_position ${at}: no such sample in the batch`);
      continue;
    }
    if (seen.has(at)) add(`rollout_position ${at}: trained twice`);
    seen.add(at);
    const same = (
      field: string,
      a: ArrayLike<number> | undefined,
      b: ArrayLike<number> | null | undefined,
    ) => {
      if (!a || !b) return add(`sample ${at}: ${field} missing (${a ? 'batch' : 'dump'})`);
      if (a.length !== b.length) return add(`sample ${at}: ${field} length ${a.length} vs ${b.length}`);
      for (let i = 0; i < a.length; i++) {
        // Log-probs travel as float32 both ways; compare their float32 values.
        if (Math.fround(a[i]!) !== Math.fround(b[i]!))
          return add(`sample ${at}: ${field}[${i}] is ${a[i]} in the dump, ${b[i]} captured`);
      }
    };
    same('tokens', s.tokens, row.tokens);
    same('loss_mask', s.loss_masks, row.loss_mask);
    same('rollout_log_probs', s.rollout_log_probs, row.rollout_log_probs);
    if (s.response_lengths !== row.response_length)
      add(`sample ${at}: response_length ${s.response_lengths} vs ${row.response_length} captured`);
    tokens += s.tokens?.length ?? 0;
  }
  return { ok: problems.length === 0, samples: dump.samples.length, tokens, problems };
}

export interface VersionCheck {
  ok: boolean;
  /** Versions the step's rows carry, oldest first. */
  versions: string[];
  /** Rows without any version, or with one other than `expected`. */
  unversioned: number;
  other: number;
}

/** Every row of a step batch carries a weight version, and (sync mode) only `expected`. */
export function checkWeightVersions(rows: readonly Sample[], expected: string | undefined): VersionCheck {
  const versions = [...new Set(rows.flatMap((r) => r.weight_versions))].sort((a, b) => Number(a) - Number(b));
  const unversioned = rows.filter((r) => r.weight_versions.length === 0).length;
  const other =
    expected === undefined ? 0 : rows.filter((r) => r.weight_versions.some((v) => v !== expected)).length;
  return { ok: unversioned === 0 && other === 0 && rows.length > 0, versions, unversioned, other };
}

export interface StepChecks {
  step: number;
  grpoCheck: {
    verdict: 'match' | 'mismatch' | 'unreadable';
    bitExactTokens: number;
    tokens: number;
    note?: string | undefined;
  };
  tokenAudit: TokenAudit;
  versions: VersionCheck;
}

/** All three checks of one step: its batch (`steps/N.msgpack`) and the trainer's dumps of it. */
export async function checkStep(options: {
  step: number;
  batchPath: string;
  trainerOut: string;
  /** The version the engine served while the step rolled out (sync mode), or undefined (async). */
  expectedVersion: string | undefined;
}): Promise<StepChecks> {
  const { step } = options;
  const rows = decodeSamples(await readFile(options.batchPath));
  const versions = checkWeightVersions(rows, options.expectedVersion);
  const bytes = async (dir: string) =>
    new Uint8Array(await readFile(join(options.trainerOut, dir, `${step}.pt`)));
  let trainDump: TrainDump;
  try {
    trainDump = readTrainDump(await bytes('train_data'));
  } catch (error) {
    const note = (error as Error).message;
    return {
      step,
      grpoCheck: { verdict: 'unreadable', bitExactTokens: 0, tokens: 0, note },
      tokenAudit: { ok: false, samples: 0, tokens: 0, problems: [note] },
      versions,
    };
  }
  const tokenAudit = auditTrainerTokens(rows, trainDump);
  let grpoCheck: StepChecks['grpoCheck'];
  try {
    const rolloutDump = readRolloutDump(await bytes('rollout_data'));
    // The trainer normalises one reward per rollout (a rollout the proxy recorded as several rows
    // counts once in its group); with one row per rollout this is slime's rule exactly.
    const report = checkAgainstTrainer({ rolloutDump, trainDump }, { preset: 'slime', perRollout: true });
    grpoCheck = {
      verdict: report.verdict,
      bitExactTokens: report.summary.bitExactTokens,
      tokens: report.summary.tokens,
    };
  } catch (error) {
    grpoCheck = { verdict: 'unreadable', bitExactTokens: 0, tokens: 0, note: (error as Error).message };
  }
  return { step, grpoCheck, tokenAudit, versions };
}
