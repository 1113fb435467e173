import { EventEmitter } from 'eventemitter3';
import { checkRoutingShape, type RoutingShape } from '../engine/routing.js';
import type { ChatTokenizer, SpecialTokenText } from '../engine/tokenizer/tokenizer.js';
import type { Engine } from '../engine/types.js';
import { ConfigError } from '../errors.js';
import type { CaptureProxy, CaptureProxyOptions, CaptureSession, SessionOptions } from './api.js';
import { connectionCeiling, openFileLimit } from './connections.js';
import { errorBody } from './dialects.js';
import { RequestDispatcher, type ShardHooks } from './dispatch.js';
import type { ProxyEvents } from './events.js';
import { type Dispatch, inProcessFetch } from './in-process.js';
import { checkMaxTurns, retryCountOf } from './ledger.js';
import { json, write } from './reply.js';
import { EngineRouter } from './router.js';
import {
  type BodyAccount,
  credentialOf,
  type ProxyServer,
  type ResolvedLimits,
  readBody,
  resolveLimits,
  startProxyServer,
} from './server.js';
import { SessionRegistry } from './sessions.js';
import { TrajectoryManager } from './trajectory/manager.js';
import type { WeightUpdatePolicy } from './turn.js';
import { TurnRunner } from './turn-runner.js';
import { listenUnixSocket } from './unix-socket.js';

export type { CaptureProxy, CaptureProxyOptions, CaptureSession, SessionOptions } from './api.js';
export type { ShardHooks } from './dispatch.js';

/** The proxy, and what a shard worker drives it with: sessions opened under a given key, and dropped. */
export interface ProxyCore {
  proxy: CaptureProxy;
  open(id: string, options: SessionOptions, key: string): CaptureSession;
  /** End a session and forget its turns (its main thread keeps them). */
  discard(id: string): void;
}

/**
 * Start the capture proxy: an OpenAI Chat Completions + Responses + Anthropic Messages server in front of
 * token-in/token-out engines. Any agent harness talks to it unchanged; every turn's prompt ids,
 * output ids, log probs, finish reason, policy version and timings are recorded per session.
 */
export async function startCaptureProxy(options: CaptureProxyOptions): Promise<CaptureProxy> {
  return (await startProxyCore(options)).proxy;
}

/** The options every part of the proxy reads, checked and with their defaults. */
interface Settings {
  engines: Engine[];
  tokenizer: ChatTokenizer;
  modelName: string;
  trajectories: TrajectoryManager;
  onWeightUpdate: WeightUpdatePolicy;
  routingReplay: RoutingShape | undefined;
  limits: ResolvedLimits;
  specialTokenText: SpecialTokenText;
}

function settingsOf(options: CaptureProxyOptions): Settings {
  const engines = Array.isArray(options.engine) ? [...options.engine] : [options.engine as Engine];
  if (engines.length === 0) throw new ConfigError('startCaptureProxy: `engine` needs at least one engine');
  const { tokenizer } = options;
  const modelName = options.modelName ?? 'vime-policy';
  const trajectories =
    options.trajectories ?? new TrajectoryManager({ decode: (ids) => tokenizer.decode(ids) });
  const onWeightUpdate = options.onWeightUpdate ?? 'continue';
  if (onWeightUpdate !== 'continue' && onWeightUpdate !== 'restart') {
    throw new ConfigError(
      `onWeightUpdate: expected 'continue' or 'restart', found ${JSON.stringify(onWeightUpdate)}`,
    );
  }
  const limits = resolveLimits(options.limits);
  const specialTokenText = options.specialTokenText ?? 'special';
  if (specialTokenText !== 'special' && specialTokenText !== 'text') {
    throw new ConfigError(
      `specialTokenText: expected 'special' or 'text', found ${JSON.stringify(specialTokenText)}`,
    );
  }
  const routingReplay = options.routingReplay && checkRoutingShape(options.routingReplay, 'routingReplay');
  return {
    engines,
    tokenizer,
    modelName,
    trajectories,
    onWeightUpdate,
    routingReplay,
    limits,
    specialTokenText,
  };
}

/** The proxy on one thread; a shard worker passes its `shard` hooks (see `shards/`). */
export async function startProxyCore(options: CaptureProxyOptions, shard?: ShardHooks): Promise<ProxyCore> {
  const settings = settingsOf(options);
  const { tokenizer, trajectories, limits } = settings;
  // every client socket is a descriptor: the cap stays within what the process may open
  limits.maxConnections = Math.min(limits.maxConnections, connectionCeiling(await openFileLimit()));
  const events = new EventEmitter<ProxyEvents>();
  const router = new EngineRouter(settings.engines, options.router);
  const defaultMaxTurns = checkMaxTurns(options.maxTurns, 'maxTurns');
  let url = '';
  const dispatch: Dispatch = (...request) => dispatcher.dispatch(...request);
  const sessions = new SessionRegistry({
    trajectories,
    router,
    tokenizer,
    defaultSampling: options.defaultSampling,
    defaultMaxTurns,
    autoOpen: Boolean(options.autoOpenSessions),
    limits,
    handle: (id, key) => ({
      id,
      baseURL: `${url}/sessions/${encodeURIComponent(key)}/v1`,
      apiKey: key,
      fetch: inProcessFetch(key, dispatch, limits.maxBodyBytes),
    }),
  });
  const turns = new TurnRunner({
    ...settings,
    router,
    events,
    sessions,
    defaultMaxTokens: options.defaultMaxTokens,
  });
  const dispatcher = new RequestDispatcher({
    ...settings,
    sessions,
    turns,
    router,
    events,
    adminToken: options.adminToken,
    shard,
  });
  const http = await startProxyServer(
    limits,
    { host: options.host ?? '127.0.0.1', port: options.port ?? 0 },
    serveHttp(dispatch, limits),
    shard?.connections,
  );
  url = http.url;
  const unix = options.socketPath
    ? await listenUnixSocket(http.server, options.socketPath).catch(async (error: unknown) => {
        await http.close();
        throw error;
      })
    : undefined;
  const close = () =>
    new Promise<void>((resolve) => {
      sessions.closeAll('proxy closed');
      void Promise.all([http.close(), unix?.close()]).then(() => router.close().then(resolve));
    });
  const proxy = proxyHandle({
    url,
    maxConnections: limits.maxConnections,
    socketPath: unix?.path,
    events,
    trajectories,
    router,
    sessions,
    http,
    close,
  });
  return { proxy, open: (id, o, key) => sessions.open(id, o, key), discard: (id) => sessions.discard(id) };
}

/** The HTTP server's handler: a request's route, credential and retry count, its answer written back. */
function serveHttp(dispatch: Dispatch, limits: ResolvedLimits): Parameters<typeof startProxyServer>[2] {
  return (req, res) => {
    const closer = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) closer.abort(new Error('client disconnected'));
    });
    const pathname = (req.url ?? '/').split('?')[0]!;
    const read = (account?: BodyAccount) => readBody(req, limits.maxBodyBytes, account);
    const retries = retryCountOf(req.headers['x-stainless-retry-count']);
    dispatch(req.method ?? 'GET', pathname, credentialOf(req), read, closer.signal, retries)
      .then((reply) => write(req, res, reply))
      .catch((error: unknown) =>
        write(req, res, json(500, errorBody('openai', 500, (error as Error).message))),
      );
  };
}

interface HandleParts {
  url: string;
  maxConnections: number;
  socketPath: string | undefined;
  events: EventEmitter<ProxyEvents>;
  trajectories: TrajectoryManager;
  router: EngineRouter;
  sessions: SessionRegistry;
  http: ProxyServer;
  close: () => Promise<void>;
}

function proxyHandle({
  url,
  maxConnections,
  socketPath,
  events,
  trajectories,
  router,
  sessions,
  http,
  close,
}: HandleParts): CaptureProxy {
  return {
    url,
    socketPath,
    events,
    trajectories,
    router,
    openSession: (id, sessionOptions) => sessions.open(id, sessionOptions),
    session: (id) => sessions.get(id)?.handle,
    finishSession: (id, finish) => sessions.finish(id, finish),
    get size() {
      return sessions.size;
    },
    get connections() {
      return http.connections;
    },
    maxConnections,
    close,
  };
}

/**
 * A `fetch` that sends a session's turns straight into the proxy's capture path (no HTTP hop), for
 * in-process clients: `new OpenAI({ baseURL: 'http://vime/v1', apiKey: 'x', fetch: captureFetch(session) })`
 * or the AI SDK's `createOpenAICompatible({ baseURL, name, fetch: captureFetch(session) })`.
 */
export function captureFetch(session: CaptureSession): typeof fetch {
  if (!session || typeof session.fetch !== 'function') {
    throw new ConfigError('captureFetch(session): pass the session returned by proxy.openSession(id)');
  }
  return session.fetch;
}
