/**
 * The capture proxy on several threads. Sessions are placed on shards, each a whole capture proxy in a
 * worker thread with its own port, tokenizer and engine clients; a session's `baseURL` is on its shard.
 * The main thread keeps what `startCaptureProxy` keeps on its one thread: the sessions, their
 * trajectories and the events, with `finishSession` as synchronous and as exact (see `gate.ts`).
 */
import { randomBytes } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { receiveMessageOnPort } from 'node:worker_threads';
import { EventEmitter } from 'eventemitter3';
import { loadTokenizer } from '../../engine/tokenizer/tokenizer.js';
import { ConfigError, EngineError } from '../../errors.js';
import type { Sample } from '../../sample.js';
import type { CaptureSession, SessionOptions } from '../api.js';
import { connectionCeiling, openFileLimit } from '../connections.js';
import type { ProxyEvents, ProxyTurnEvent } from '../events.js';
import { resolveLimits } from '../server.js';
import { checkSession } from '../sessions.js';
import { addStitch, checkFinish, emptyTotals, finishThreads, type StitchTotals } from '../stitch.js';
import { type FinishOptions, TrajectoryManager } from '../trajectory/manager.js';
import { type Shard, type ShardListener, type ShardSpec, startShards } from './shard.js';
import type { EngineSpec, FromShard, ShardProxyOptions, ToShard } from './wire.js';

export type { EngineSpec } from './wire.js';

/** Options of `startShardedCaptureProxy`. */
export interface ShardedCaptureProxyOptions extends ShardProxyOptions {
  /** Worker threads, each serving its share of the sessions (default: half the cores, 1 to 8). */
  shards?: number | undefined;
  /** The engines, as each shard builds its own client for them. */
  engines: readonly EngineSpec[];
  /** The tokenizer's directory (`tokenizer.json`, `tokenizer_config.json`); each shard loads its own. */
  tokenizerDir: string;
  /** Where turns are recorded (default: a new manager that decodes `prompt`/`response` text). */
  trajectories?: TrajectoryManager | undefined;
  /** Most sessions open on one shard at once (default 65,536). */
  sessionsPerShard?: number | undefined;
  /** How long `finishSession` waits for an answer on its way to its client (default 1,000 ms). */
  handoverWaitMs?: number | undefined;
}

/** The events of a sharded capture proxy. */
export interface ShardedProxyEvents extends ProxyEvents {
  /** A shard's thread ended before `close`: its sessions' turns are gone (their `finishSession` throws). */
  'shard:exit': (event: { shard: number; cause: string }) => void;
}

/** A capture proxy served by several worker threads, each holding its share of the sessions. */
export interface ShardedCaptureProxy {
  /** Each shard's URL (a session's `baseURL` is on its shard's). */
  urls: string[];
  events: EventEmitter<ShardedProxyEvents>;
  trajectories: TrajectoryManager;
  /** Open a session on the least-loaded shard; its `fetch` sends turns to that shard over HTTP. */
  openSession(id: string, options?: SessionOptions): CaptureSession;
  /** The open session `id`, if there is one. */
  session(id: string): CaptureSession | undefined;
  /** Close a session and return its slime-wire training rows, as `CaptureProxy.finishSession`. */
  finishSession(id: string, options?: FinishOptions): Sample[];
  readonly size: number;
  /** Open client sockets now, every shard's. */
  readonly connections: number;
  /**
   * The connection cap in force, all shards' together: `limits.maxConnections`, lowered to what the
   * process's open-file limit allows, in equal shares (each shard makes room within its own).
   */
  readonly maxConnections: number;
  /** Stop every shard. */
  close(): Promise<void>;
}

const OPTION_KEYS = new Set([
  'shards',
  'engines',
  'tokenizerDir',
  'trajectories',
  'sessionsPerShard',
  'handoverWaitMs',
  'onWeightUpdate',
  'routingReplay',
  'host',
  'defaultSampling',
  'defaultMaxTokens',
  'modelName',
  'maxTurns',
  'specialTokenText',
  'limits',
  'router',
]);

/** What a single-thread option needs instead here. */
const NOT_SHARDED: Record<string, string> = {
  engine: 'give `engines: [{ kind, url }]` (engine objects do not cross threads)',
  tokenizer: 'give `tokenizerDir` (each shard loads its own)',
  socketPath: 'use startCaptureProxy for a unix socket',
  adminToken: 'use startCaptureProxy for the admin routes',
  autoOpenSessions: 'open sessions with openSession (a shard serves only the sessions placed on it)',
  port: 'each shard takes a free port (`urls`)',
};

interface ThreadMirror {
  index: number;
  key: string;
  parent: number | undefined;
  totals: StitchTotals;
}

/** The main thread's copy of a session: where it runs, and the turns its shard reported. */
interface SessionMirror {
  handle: CaptureSession;
  shard: Shard;
  slot: number;
  threads: Map<number, ThreadMirror>;
  truncated: boolean;
}

function positiveInteger(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || (value as number) < 1)
    throw new ConfigError(`${name}: expected a positive integer, found ${JSON.stringify(value)}`);
  return value as number;
}

function checkOptions(options: ShardedCaptureProxyOptions): void {
  for (const key of Object.keys(options)) {
    if (OPTION_KEYS.has(key)) continue;
    const fix = NOT_SHARDED[key];
    throw new ConfigError(
      fix
        ? `startShardedCaptureProxy: option \`${key}\` is not for the sharded proxy: ${fix}`
        : `startShardedCaptureProxy: unknown option \`${key}\``,
    );
  }
  const { engines } = options;
  if (!Array.isArray(engines) || engines.length === 0)
    throw new ConfigError('startShardedCaptureProxy: `engines` needs at least one { kind, url }');
  for (const [i, e] of engines.entries()) {
    if (!e || (e.kind !== 'sglang' && e.kind !== 'vllm') || typeof e.url !== 'string')
      throw new ConfigError(
        `engines[${i}]: expected { kind: 'sglang' | 'vllm', url }, found ${JSON.stringify(e)}`,
      );
  }
  if (typeof options.tokenizerDir !== 'string' || options.tokenizerDir === '')
    throw new ConfigError('startShardedCaptureProxy: `tokenizerDir` is required (the tokenizer directory)');
}

/** A `fetch` that sends a session's requests to its shard, whatever URL it is given (as `captureFetch`). */
function shardFetch(shardUrl: string, key: string): typeof fetch {
  return (input, init) => {
    const given = new URL(input instanceof Request ? input.url : String(input));
    const url = `${shardUrl}/sessions/${encodeURIComponent(key)}${given.pathname}${given.search}`;
    return fetch(input instanceof Request ? new Request(url, input) : url, init);
  };
}

/**
 * Start the capture proxy on `shards` worker threads: the same routes, sessions, capture and limits as
 * `startCaptureProxy`, for turn rates one thread cannot serve. What it leaves out: run-time engine
 * changes (each shard's router has the engines it started with), the admin routes, unix sockets and
 * `autoOpenSessions`.
 */
export async function startShardedCaptureProxy(
  options: ShardedCaptureProxyOptions,
): Promise<ShardedCaptureProxy> {
  checkOptions(options);
  const count = positiveInteger(
    options.shards,
    'shards',
    Math.min(8, Math.max(1, Math.floor(availableParallelism() / 2))),
  );
  const capacity = positiveInteger(options.sessionsPerShard, 'sessionsPerShard', 65_536);
  const waitMs = positiveInteger(options.handoverWaitMs, 'handoverWaitMs', 1000);
  const {
    shards: _,
    engines,
    tokenizerDir,
    trajectories: given,
    sessionsPerShard,
    handoverWaitMs,
    ...rest
  } = options;
  const trajectories =
    given ??
    new TrajectoryManager({
      decode: (
        (t) => (ids) =>
          t.decode(ids)
      )(await loadTokenizer(tokenizerDir)),
    });
  const proxy = new ShardedProxy(trajectories, engines, waitMs);
  const connections = new SharedArrayBuffer(4);
  // the shards share one process's descriptors: each takes an equal share of the cap that fits them
  const cap = Math.min(resolveLimits(rest.limits).maxConnections, connectionCeiling(await openFileLimit()));
  const share = Math.max(1, Math.floor(cap / count));
  const limits = { ...rest.limits, maxConnections: share };
  await proxy.start(count, { tokenizerDir, engines, options: { ...rest, limits }, capacity, connections });
  const connectionCount = new Int32Array(connections);
  return {
    urls: proxy.urls,
    events: proxy.events,
    trajectories,
    openSession: (id, sessionOptions) => proxy.open(id, sessionOptions),
    session: (id) => proxy.session(id),
    finishSession: (id, finish) => proxy.finish(id, finish),
    get size() {
      return proxy.size;
    },
    get connections() {
      return Atomics.load(connectionCount, 0);
    },
    maxConnections: share * count,
    close: () => proxy.close(),
  };
}

/**
 * The main thread of the sharded proxy: it places sessions on shards, records the turns they report
 * (each before its answer's last bytes leave the shard, see `gate.ts`) and finishes sessions exactly.
 */
class ShardedProxy implements ShardListener {
  readonly events = new EventEmitter<ShardedProxyEvents>();
  readonly #trajectories: TrajectoryManager;
  readonly #engines: readonly EngineSpec[];
  readonly #waitMs: number;
  readonly #sessions = new Map<string, SessionMirror>();
  #shards: Shard[] = [];
  #capacity = 0;
  #closing = false;

  constructor(trajectories: TrajectoryManager, engines: readonly EngineSpec[], waitMs: number) {
    this.#trajectories = trajectories;
    this.#engines = engines;
    this.#waitMs = waitMs;
  }

  async start(count: number, spec: ShardSpec): Promise<void> {
    this.#capacity = spec.capacity;
    try {
      this.#shards = await startShards(count, spec, this);
    } catch (error) {
      this.#closing = true;
      throw error;
    }
  }

  get urls(): string[] {
    return this.#shards.map((s) => s.url);
  }

  get size(): number {
    return this.#sessions.size;
  }

  session(id: string): CaptureSession | undefined {
    return this.#sessions.get(id)?.handle;
  }

  open(id: string, sessionOptions: SessionOptions = {}): CaptureSession {
    checkSession(id, sessionOptions);
    if (this.#closing) throw new ConfigError('openSession: the proxy is closed');
    if (this.#sessions.has(id)) throw new ConfigError(`session ${JSON.stringify(id)} is already open`);
    const { engine, ...options } = sessionOptions;
    if (engine && !this.#engines.some((e) => e.url === engine.url))
      throw new ConfigError(`openSession: engine ${engine.url} is not one of the proxy's engines`);
    const shard = this.#leastLoaded();
    // throws for an id the manager already holds, before a slot is taken
    this.#trajectories.open(id);
    const slot = shard.free.pop() ?? shard.next++;
    const key = `${id}.${randomBytes(16).toString('base64url')}`;
    const open: ToShard = {
      op: 'open',
      id,
      key,
      slot,
      options: { ...options, engineUrl: engine?.url },
    };
    shard.gate.open(slot);
    try {
      shard.control.postMessage(open);
    } catch (error) {
      shard.free.push(slot);
      this.#trajectories.discard(id);
      throw new ConfigError(`openSession: options cannot cross to a shard: ${(error as Error).message}`);
    }
    const handle: CaptureSession = {
      id,
      baseURL: `${shard.url}/sessions/${encodeURIComponent(key)}/v1`,
      apiKey: key,
      fetch: shardFetch(shard.url, key),
    };
    shard.open++;
    this.#sessions.set(id, { handle, shard, slot, threads: new Map(), truncated: false });
    return handle;
  }

  /** The live shard with the fewest open sessions, if it has room for one more. */
  #leastLoaded(): Shard {
    const live = this.#shards.filter((s) => !s.exited);
    if (live.length === 0) throw new EngineError('openSession: every shard of the proxy has exited');
    const shard = live.reduce((a, b) => (b.open < a.open ? b : a));
    if (shard.free.length === 0 && shard.next >= this.#capacity)
      throw new ConfigError(
        `openSession: shard ${shard.index} has ${this.#capacity} sessions open (sessionsPerShard)`,
      );
    return shard;
  }

  finish(id: string, finish: FinishOptions = {}): Sample[] {
    const s = this.#sessions.get(id);
    if (!s) throw new ConfigError(`finishSession: no open session ${JSON.stringify(id)}`);
    const { shard } = s;
    const trajectories = this.#trajectories;
    const threads = () => ({
      sessionId: id,
      list: [...s.threads.values()].sort((a, b) => a.index - b.index),
    });
    const options = (): FinishOptions => {
      const status = finish.status ?? (s.truncated ? 'truncated' : undefined);
      return status ? { ...finish, status } : finish;
    };
    this.#drain(shard);
    if (!shard.exited) {
      // bad options end nothing: the call can be made again with the rows intact
      checkFinish(trajectories, threads(), options());
      shard.gate.close(s.slot, this.#waitMs);
      this.#drain(shard);
      // a late turn can change the status the options are checked against: the session then takes
      // no more answers, and a call with fitting options still returns every row
      checkFinish(trajectories, threads(), options());
    }
    this.#sessions.delete(id);
    shard.open--;
    const { list } = threads();
    if (shard.exited) {
      for (const t of list) trajectories.discard(t.key);
      trajectories.discard(id);
      throw new EngineError(
        `finishSession: the shard of session ${JSON.stringify(id)} ended (${shard.exited}); its turns are lost`,
        { isRetryable: true },
      );
    }
    shard.control.postMessage({ op: 'finish', id } satisfies ToShard);
    return finishThreads(trajectories, { sessionId: id, list }, options());
  }

  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    this.#sessions.clear();
    for (const shard of this.#shards)
      if (!shard.exited) shard.control.postMessage({ op: 'close' } satisfies ToShard);
    // a shard that does not close in time is stopped
    const timer = setTimeout(() => {
      for (const shard of this.#shards) void shard.worker.terminate();
    }, 10_000);
    await Promise.all(this.#shards.map((s) => s.closed));
    clearTimeout(timer);
  }

  report(shard: Shard, m: FromShard): void {
    if (m.kind === 'released') {
      shard.free.push(m.slot);
      return;
    }
    if (m.kind !== 'event') return;
    const s = this.#sessions.get(m.payload.sessionId as string);
    const mine = s?.shard === shard ? s : undefined;
    // a turn recorded after its session was finished is no part of it
    if (m.name === 'turn')
      return void (mine && this.#recordTurn(mine, m.payload as unknown as ProxyTurnEvent));
    if (m.name === 'budget:exhausted' && mine) mine.truncated = true;
    const payload = { ...m.payload };
    const error = payload.error as { name: string; message: string; code?: unknown } | undefined;
    if (error) payload.error = Object.assign(new Error(error.message), error);
    (this.events.emit as (name: string, payload: unknown) => boolean)(m.name, payload);
  }

  exited(shard: Shard, cause: string): void {
    if (this.#closing) return;
    shard.exited = cause;
    this.events.emit('shard:exit', { shard: shard.index, cause });
  }

  #recordTurn(s: SessionMirror, event: ProxyTurnEvent): void {
    const index = event.stitch.thread;
    let thread = s.threads.get(index);
    if (!thread) {
      const key = index === 0 ? s.handle.id : `${s.handle.id}/${index}`;
      thread = { index, key, parent: index === 0 ? undefined : 0, totals: emptyTotals() };
      s.threads.set(index, thread);
    }
    const { index: _, ...turn } = event.turn;
    const recorded = this.#trajectories.record(thread.key, turn);
    addStitch(thread.totals, event.stitch);
    if (turn.finishReason === 'length') s.truncated = true;
    this.events.emit('turn', { ...event, trajectoryId: thread.key, turn: recorded });
  }

  /** Take in every report a shard has sent so far (its turns recorded before now). */
  #drain(shard: Shard): void {
    for (let m = receiveMessageOnPort(shard.reports); m; m = receiveMessageOnPort(shard.reports))
      this.report(shard, m.message as FromShard);
  }
}
