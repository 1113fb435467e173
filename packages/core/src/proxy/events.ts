/** The capture proxy's events: one per recorded turn, and the turn machinery's retries, aborts and overrides. */
import type { ToolCallHealth } from '../engine/tokenizer/tool-health.js';
import type { Turn } from '../rollout.js';
import type { Dialect } from './dialects.js';
import type { StitchInfo } from './stitch.js';
import type { WeightUpdatePolicy } from './turn.js';

/** One captured turn, as the proxy's `turn` event reports it. */
export interface ProxyTurnEvent {
  sessionId: string;
  /**
   * The trajectory the turn was recorded into, and the `session_id` of the rows that train it: the session
   * id for the session's first thread, `<sessionId>/<k>` for its thread `k` (a subagent, a conversation
   * restarted from a compaction summary). `turn.index` counts within it. A turn log the token audit reads
   * keys turns by this id.
   */
  trajectoryId: string;
  dialect: Dialect;
  turn: Turn;
  promptTokens: number;
  outputTokens: number;
  durationMs: number;
  /** The engines that produced the turn's output, in order (more than one when it moved mid-turn). */
  engines: string[];
  /** How the prompt was made: reused history, re-rendered, changed, or a new thread of the session. */
  stitch: StitchInfo;
  /** The turn's tool calls: emitted, parsed, malformed, unknown tool, bad arguments (Hermes parser only). */
  toolCalls?: ToolCallHealth | undefined;
}

/** The events of a capture proxy. */
export interface ProxyEvents {
  /** A turn was captured. */
  turn: (event: ProxyTurnEvent) => void;
  /** Harness-sent sampling knobs that the session's sampling replaced. */
  'sampling:override': (event: {
    sessionId: string;
    fields: Record<string, { sent: unknown; used: unknown }>;
  }) => void;
  /** A turn's upstream request was cancelled (client disconnect or session finish). */
  'turn:abort': (event: { sessionId: string; rid: string; reason: string }) => void;
  /** A turn failed; its client got an error answer. */
  'turn:error': (event: { sessionId: string; error: Error }) => void;
  /** A streamed answer's reasoning/content split turned out to differ from the final parse. */
  'stream:inexact': (event: { sessionId: string; reason: string }) => void;
  /** A request failed and was retried on a healthy engine (the turn goes on). */
  'turn:retry': (event: { sessionId: string; url: string; error: Error; failures: number }) => void;
  /** The engine cut the turn short (a weight update) and the proxy continued or restarted it. */
  'turn:interrupted': (event: {
    sessionId: string;
    url: string;
    outputTokens: number;
    policy: WeightUpdatePolicy;
  }) => void;
  /** The session's token budget was spent; the turn was answered as truncated without calling the engine. */
  'budget:exhausted': (event: { sessionId: string; promptTokens: number; maxContextTokens: number }) => void;
}
