/**
 * The events of a `GroupQueue` journal. Each is one record of the segment log (`format.ts`): the record
 * key is the event type, the record meta its fields, and the samples (sibling results, partials) its
 * body. Every decision that depends on options (a replacement or a drop, a stale group) is written
 * out in the event, so replaying the journal gives the same state whatever options the reader has.
 * Events cross a process boundary (the disk): they are validated with zod when read back.
 */
import { z } from 'zod';

const int = z.number().int();
const nat = int.nonnegative();

/** `[version, tokens]`: `tokens` consecutive generated tokens of a sample came from weight `version`. */
export type VersionSpan = [version: number, tokens: number];
const SpanSchema = z.tuple([nat, nat]);

/** A record's place: `[segment (its first seq), byte offset, seq]`. */
export type DataRef = [segment: number, offset: number, seq: number];

/** One sibling attempt: `[group, slot, attempt]`. */
export type AttemptKey = [group: number, slot: number, attempt: number];
const AttemptSchema = z.tuple([nat, nat, nat]);

/** The weight versions a sample's tokens came from: distinct versions in order of use, and token spans when known. */
export interface SampleVersions {
  versions: number[];
  spans?: VersionSpan[] | undefined;
}
const SampleVersionsSchema = z.object({
  versions: z.array(nat),
  spans: z.array(SpanSchema).optional(),
});

export const FailureSchema = z.object({
  code: z.string(),
  message: z.string(),
  phase: z.string().optional(),
});
/** Why a sibling's attempt failed: a code, a message and the phase. */
export type Failure = z.infer<typeof FailureSchema>;

export const DropReasonSchema = z.enum(['infra_failed', 'deadline', 'restart', 'stale', 'cancelled']);
/** Why a group was dropped: a sibling's infra failures or deadlines ran out of attempts, restarts
 * kept killing it, its tokens grew too stale, or the caller dropped it. */
export type DropReason = z.infer<typeof DropReasonSchema>;

const Drops = z.array(z.tuple([nat, DropReasonSchema]));

export const EventSchemas = {
  /** The owner opened the queue; every attempt still leased died with the previous owner. */
  open: z.object({ session: int.positive() }),
  create: z.object({
    group: nat,
    key: z.string().min(1).optional(),
    n: int.positive(),
    payload: z.unknown(),
  }),
  lease: z.object({
    lease: nat,
    worker: z.string(),
    deadline: z.number(),
    attempts: z.array(AttemptSchema).min(1),
    /** Slots whose partial is set aside (`partials: 'restart'`, or too stale to continue). */
    restart: z.array(nat).optional(),
  }),
  partial: z.object({
    a: AttemptSchema,
    versions: z.array(SampleVersionsSchema),
    state: z.unknown().optional(),
  }),
  sibling: z.object({
    a: AttemptSchema,
    status: z.enum(['completed', 'truncated']),
    reward: z.number(),
    versions: z.array(SampleVersionsSchema),
    meta: z.record(z.string(), z.unknown()).optional(),
  }),
  fail: z.object({ a: AttemptSchema, error: FailureSchema, drop: DropReasonSchema.optional() }),
  expire: z.object({
    attempts: z.array(AttemptSchema),
    reason: z.enum(['deadline', 'restart']),
    drops: Drops,
  }),
  drop: z.object({ group: nat, reason: DropReasonSchema }),
  take: z.object({
    step: int.positive(),
    version: nat,
    groups: z.array(nat),
    /** Groups dropped as too stale at this hand-off, with their lag in versions. */
    stale: z.array(z.tuple([nat, nat])),
  }),
  commit: z.object({ step: int.positive(), version: nat }),
  checkpoint: z.object({ step: nat }),
  release: z.object({ step: nat }),
  rollback: z.object({ to: nat }),
} as const;

export type EventType = keyof typeof EventSchemas;
export type EventOf<T extends EventType> = z.infer<(typeof EventSchemas)[T]>;
export type UnitEvent = { [T in EventType]: { type: T } & EventOf<T> }[EventType];

export const isEventType = (key: string): key is EventType => Object.hasOwn(EventSchemas, key);
