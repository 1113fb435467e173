/** What the sharded proxy's main thread and its shard workers send each other. */
import type { MessagePort } from 'node:worker_threads';
import type { VllmEngineOptions } from '../../engine/vllm.js';
import type { CaptureProxyOptions, SessionOptions } from '../api.js';
import type { ProxyEvents } from '../events.js';

/** An engine a shard builds its own client for (engine objects do not cross threads). */
export interface EngineSpec {
  kind: 'sglang' | 'vllm';
  url: string;
  /** Client settings (`sglangEngine` / `vllmEngine` options, minus what cannot cross threads). */
  options?: Omit<VllmEngineOptions, 'dispatcher' | 'logger'> | undefined;
}

/** The capture-proxy options every shard runs with. */
export type ShardProxyOptions = Pick<
  CaptureProxyOptions,
  | 'onWeightUpdate'
  | 'routingReplay'
  | 'host'
  | 'defaultSampling'
  | 'defaultMaxTokens'
  | 'modelName'
  | 'maxTurns'
  | 'specialTokenText'
  | 'limits'
> & { router?: Omit<NonNullable<CaptureProxyOptions['router']>, 'logger'> | undefined };

export interface ShardData {
  index: number;
  tokenizerDir: string;
  engines: EngineSpec[];
  options: ShardProxyOptions;
  /** The handover gate's counters (see `gate.ts`). */
  cells: SharedArrayBuffer;
  /** All shards' open client sockets, counted in one place. */
  connections: SharedArrayBuffer;
  /** Main → shard: `ToShard`. */
  control: MessagePort;
  /** Shard → main: `FromShard`, in the order things happened. */
  reports: MessagePort;
}

/** A session's options as they cross to its shard: its engine by URL. */
export type OpenOptions = Omit<SessionOptions, 'engine'> & { engineUrl?: string | undefined };

export type ToShard =
  | { op: 'open'; id: string; key: string; slot: number; options: OpenOptions }
  | { op: 'finish'; id: string }
  | { op: 'close' };

export type FromShard =
  | { kind: 'ready'; url: string }
  | { kind: 'failed'; message: string }
  | { kind: 'event'; name: keyof ProxyEvents; payload: Record<string, unknown> }
  /** The shard is done with a finished session's gate slot: it may take a new session. */
  | { kind: 'released'; slot: number };
