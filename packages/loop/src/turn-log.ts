/**
 * The run's captured turns: every model call the proxy answered, kept per session until the session's
 * rows are handed off (the hand-off audits them against it), and appended to `turns.jsonl` in the run
 * folder, so a resumed run can audit rollouts captured before the restart and `vime-grpo audit` can
 * check any step's batch afterwards.
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { capturedTurnRecord, type ScoredRollout, type Turn, VimeError } from '@vime/core';
import {
  type AuditTurn,
  auditHandoff,
  auditTurnOf,
  readTurnLog,
  TOKEN_AUDIT_FAILED,
  type WeightLogView,
} from '@vime/grpo';

/** The turn log's file name in the run folder. */
export const TURN_LOG_FILE = 'turns.jsonl';

/** Captured turns by session, and the append-only file that keeps them across a restart. */
export class TurnLog {
  readonly #bySession = new Map<string, AuditTurn[]>();
  readonly #file: WriteStream | undefined;
  #failed = false;
  /**
   * The router's weight-update log (`proxy.router.weightLog`): with it, the hand-off also checks every
   * weight version of this process's turns against it (`auditHandoff`'s `weightLog`).
   */
  weightLog: WeightLogView | undefined;

  private constructor(
    /** The file the turns are appended to (none: kept in memory only). */
    readonly path: string | undefined,
    /** Where a file that cannot be written is reported, once. */
    readonly log: (line: string) => void,
  ) {
    if (path === undefined) return;
    this.#file = createWriteStream(path, { flags: 'a' });
    // A log that cannot be written (a full disk) is reported once; the hand-off audits from memory.
    this.#file.on('error', (error) => {
      if (this.#failed) return;
      this.#failed = true;
      log(
        `${TURN_LOG_FILE}: cannot append (${error.message}); a restart cannot audit this run's open rollouts`,
      );
    });
  }

  /** Open the run's turn log; a resumed run reads back what its earlier starts captured. */
  static async open(out: string, resume: boolean, log: (line: string) => void): Promise<TurnLog> {
    const path = join(out, TURN_LOG_FILE);
    const turnLog = new TurnLog(path, log);
    if (resume) {
      let text = '';
      try {
        text = await readFile(path, 'utf8');
      } catch {
        // No log yet: nothing was captured before the restart.
      }
      // A kill mid-append leaves a partial last line: its turn is unknown, so its rollout fails the audit.
      const lines = text.split('\n').filter((l) => l.trim() !== '');
      const whole = text.endsWith('\n') ? lines : lines.slice(0, -1);
      if (whole.length > 0) for (const t of readTurnLog(whole.join('\n'), path)) turnLog.#keep(t);
    }
    return turnLog;
  }

  /** A turn log kept in memory only (a server whose answers are recorded elsewhere). */
  static memory(): TurnLog {
    return new TurnLog(undefined, () => {});
  }

  /** Record one captured turn (the proxy's `turn` event). */
  record(sessionId: string, turn: Turn): void {
    // In memory the turn's own typed arrays (the audit compares them fastest); on disk its log record.
    this.#keep(auditTurnOf(sessionId, turn, this.#bySession.get(sessionId)?.at(-1)));
    if (this.#file && !this.#failed)
      this.#file.write(`${JSON.stringify(capturedTurnRecord(sessionId, turn))}\n`);
  }

  #keep(t: AuditTurn): void {
    const list = this.#bySession.get(t.session_id);
    if (list) list.push(t);
    else this.#bySession.set(t.session_id, [t]);
  }

  /** The captured turns of these sessions. */
  turnsOf = (sessionIds: readonly string[]): AuditTurn[] =>
    sessionIds.flatMap((id) => this.#bySession.get(id) ?? []);

  /** Drop sessions whose rows were handed off (or whose rollout failed): they are never audited again. */
  forget(sessionIds: Iterable<string>): void {
    for (const id of sessionIds) this.#bySession.delete(id);
  }

  /** Sessions kept in memory. */
  get sessions(): number {
    return this.#bySession.size;
  }

  /** Flush and close the file. */
  close(): Promise<void> {
    const file = this.#file;
    return file ? new Promise((resolve) => file.end(() => resolve())) : Promise.resolve();
  }
}

/**
 * The token audit of one rollout's rows against the turns `turnLog` captured for their sessions
 * (`auditHandoff` of `@vime/grpo`); the sessions are forgotten either way. Undefined when the rows pass,
 * else the error that makes the rollout an infrastructure failure (`token_audit_failed`).
 */
export function auditRolloutRows(
  rollout: Pick<
    ScoredRollout,
    'taskId' | 'groupIndex' | 'sampleIndex' | 'rolloutId' | 'samples' | 'sessionId'
  >,
  turnLog: TurnLog,
): VimeError | undefined {
  const whole: ScoredRollout = {
    ...rollout,
    status: 'completed',
    reward: 0,
    turns: 0,
    timings: {},
    metadata: {},
  };
  const { failed } = auditHandoff([whole], turnLog.turnsOf, { weightLog: turnLog.weightLog });
  turnLog.forget([
    ...(rollout.sessionId === undefined ? [] : [rollout.sessionId]),
    ...rollout.samples.flatMap((r) => (r.session_id === null ? [] : [r.session_id])),
  ]);
  const f = failed[0]?.failure;
  return f && new VimeError(TOKEN_AUDIT_FAILED, f.error.message, { cause: f.error.cause });
}
