/** The public shapes of `GroupQueue`: options, leases, results, receipts, batches, events. */
import type { Sample } from '../sample.js';
import type { DropReason, Failure, SampleVersions, VersionSpan } from './group-events.js';

export type { DropReason, Failure, SampleVersions, VersionSpan };

/** Options of a `GroupQueue`. */
export interface GroupQueueOptions {
  /** Start a new segment once the active one reaches this size. Default 8 MiB. */
  segmentBytes?: number | undefined;
  /** Flush every group commit to disk (`fdatasync`). Default true. */
  sync?: boolean | undefined;
  /** Deadline of an attempt when `lease` is not given one, ms. Default 30 minutes. */
  deadlineMs?: number | undefined;
  /** Attempts per sibling that may fail (infra) or run past their deadline before the group is dropped. Default 3. */
  maxAttempts?: number | undefined;
  /** Attempts per sibling that may be lost to a restart of the owner before the group is dropped. Default 10. */
  maxLost?: number | undefined;
  /** What the next attempt does with a sibling's saved partial: continue from it (default) or start over. */
  partials?: 'continue' | 'restart' | undefined;
  /** Largest lag (trainer version − oldest token version) a sample may have when handed off. Default none. */
  maxStaleness?: number | undefined;
  /**
   * Over `maxStaleness`: `drop` the group (counted; default), or `wait`: lease no fresh group while
   * those already started would be handed off past the bound (needs `groupsPerStep`).
   */
  onStale?: 'drop' | 'wait' | undefined;
  /** Groups the trainer takes per step (for `onStale: 'wait'`). */
  groupsPerStep?: number | undefined;
  /** Committed steps kept for `replay` beyond what rollback needs. Default 0. */
  retainSteps?: number | undefined;
  /** Collect after every `commit`. Default true. */
  autoGc?: boolean | undefined;
}

/** Options of leasing a group. */
export interface LeaseOptions {
  /** Who holds the lease (kept in the journal). Default 'worker'. */
  worker?: string | undefined;
  /** At most this many free siblings of the group. Default all. */
  slots?: number | undefined;
  /** Lease only this group's free siblings (e.g. a request for one group's sample). Default any group. */
  group?: number | undefined;
  /** Deadline of these attempts, ms from now. Default the queue's `deadlineMs`. */
  deadlineMs?: number | undefined;
  /** Wait for work (default), or return undefined when there is none. */
  wait?: boolean | undefined;
  signal?: AbortSignal | undefined;
}

/** Names one sibling attempt (a `SiblingAttempt` is one). */
export interface AttemptRef {
  group: number;
  slot: number;
  attempt: number;
}

/** A sibling's saved progress: its trajectory so far and the weight versions of its tokens. */
export interface Continuation {
  /** The attempt that saved it. */
  attempt: number;
  samples: Sample[];
  versions: SampleVersions[];
  /** The caller's own resume state (JSON), as saved. */
  state: unknown;
}

/** One leased attempt at a sibling: its deadline, its signal and where to continue from. */
export interface SiblingAttempt extends AttemptRef {
  lease: number;
  /** Wall-clock ms (epoch): a result after this is refused. */
  deadline: number;
  /** Aborted when the attempt can no longer commit (deadline, group dropped, queue closed). */
  signal: AbortSignal;
  /** Continue from here (with `partials: 'continue'`). */
  partial?: Continuation | undefined;
}

/** A leased prompt group: its payload and the attempts the worker runs. */
export interface GroupLease {
  group: number;
  key: string | undefined;
  n: number;
  payload: unknown;
  lease: number;
  worker: string;
  deadline: number;
  attempts: SiblingAttempt[];
}

/** A sibling's result as submitted: reward, samples and their weight versions. */
export interface SiblingInput {
  status?: 'completed' | 'truncated' | undefined;
  reward: number;
  samples: ReadonlyArray<Sample>;
  /**
   * The weight versions of each sample's tokens. Default: from each sample's `weight_versions`
   * (integers) and its `metadata.weight_version_spans` when present: `[start, end, version]` as the capture
   * proxy records them, or `[version, tokens]` pairs.
   */
  versions?: ReadonlyArray<SampleVersions> | undefined;
  /** JSON-like data kept with the result (e.g. the grade's outcome). */
  meta?: Record<string, unknown> | undefined;
}

/** What an attempt hands over when it stops early: its samples so far and the state to continue from. */
export interface PartialInput {
  samples: ReadonlyArray<Sample>;
  versions?: ReadonlyArray<SampleVersions> | undefined;
  /** What the next attempt needs to continue (JSON-like): messages, the patch so far, … */
  state?: unknown;
}

/** Proof that a result was accepted: asking again for the same attempt returns the same receipt. */
export interface Receipt {
  /** `<group>/<slot>/<attempt>`. */
  id: string;
  group: number;
  slot: number;
  attempt: number;
  /** Journal record holding the result. */
  seq: number;
  /** Accepted before (a repeated submit); nothing was written. */
  duplicate: boolean;
}

/** A sibling's accepted result, read back. */
export interface SiblingResult {
  receipt: Receipt;
  reward: number;
  samples: Sample[];
  meta: Record<string, unknown>;
}

/** What failing an attempt did: a replacement attempt, the group dropped, or nothing (a stale attempt). */
export type FailOutcome =
  | { outcome: 'replace' }
  | { outcome: 'drop'; reason: DropReason }
  /** The attempt was already stale; nothing changed. */
  | { outcome: 'stale' };

/** One sibling of a handed-off group: its result, the weight versions of its tokens and its lag. */
export interface HandedSibling {
  slot: number;
  attempt: number;
  status: 'completed' | 'truncated';
  reward: number;
  samples: Sample[];
  /** Per sample: the weight versions of its tokens. */
  versions: SampleVersions[];
  /** Oldest and newest version over its tokens (a partial it continued from included). */
  span: { min: number; max: number } | null;
  /** Trainer version at consumption − oldest token version. */
  lag: number | null;
  meta: Record<string, unknown>;
}

/** One prompt group handed to the trainer, with its siblings and staleness. */
export interface HandedGroup {
  group: number;
  key: string | undefined;
  payload: unknown;
  siblings: HandedSibling[];
  span: { min: number; max: number } | null;
  lag: number | null;
  /** From the last sibling recorded to the hand-off, ms: time spent waiting in the queue. */
  queueMs: number;
  /** From creation to the hand-off, ms. */
  ageMs: number;
}

/** The groups a trainer step takes, with the trainer's version and the groups dropped as stale. */
export interface TrainingBatch {
  step: number;
  /** The trainer's weight version when it took the batch. */
  trainerVersion: number;
  /** The batch was recorded before this call (a restart, a rollback, or a debug replay). */
  replay: boolean;
  groups: HandedGroup[];
  /** Groups dropped at this hand-off as too stale, with their lag. */
  stale: Array<{ group: number; lag: number }>;
}

/** What a garbage collection of the queue removed and kept. */
export interface GcReport {
  deleted: string[];
  /** Segment files kept, and their bytes. */
  segments: number;
  bytes: number;
  /** Groups and steps dropped from the state. */
  collected: { groups: number; steps: number };
}

/** The events of a `GroupQueue`. */
export interface GroupQueueEvents {
  flush: [{ records: number; bytes: number; synced: boolean; durationMs: number }];
  complete: [{ group: number }];
  drop: [{ group: number; reason: DropReason }];
  expire: [{ attempts: AttemptRef[]; reason: 'deadline' | 'restart' }];
  take: [{ step: number; groups: number[]; stale: number }];
  gc: [GcReport];
}

/** Counters (durable) and the live picture. */
export interface GroupQueueStats {
  created: number;
  completed: number;
  handed: number;
  dropped: Record<DropReason, number>;
  started: number;
  attempts: number;
  failed: number;
  expired: number;
  lost: number;
  partials: number;
  restarted: number;
  open: number;
  ready: number;
  inFlight: number;
}
