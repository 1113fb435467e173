import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'eventemitter3';
import { turnNucleus } from '../engine/nucleus.js';
import { newRequestId } from '../engine/request-id.js';
import type { Engine, Sampling } from '../engine/types.js';
import { ConfigError, EngineError, VimeError } from '../errors.js';
import type { Sample } from '../sample.js';
import { adminRoute } from './admin.js';
import { encodeTurn, parseTurnRequest, turnEncoder } from './answer.js';
import type { CaptureProxy, CaptureProxyOptions, CaptureSession, SessionOptions } from './api.js';
import { type ChatRequest, type Dialect, errorBody, RequestError, type TurnReply } from './dialects.js';
import type { ProxyEvents } from './events.js';
import { inProcessFetch } from './in-process.js';
import { checkMaxTurns, FinishedSessions, retryCountOf, TurnLedger } from './ledger.js';
import { type LiveTurn, streamTurn } from './live.js';
import { holdLastChunk, json, NO_RETRY, type Reply, SSE_TYPE, write } from './reply.js';
import { EngineRouter } from './router.js';
import { resolveSampling } from './sampling.js';
import {
  type ConnectionCount,
  checkJsonShape,
  credentialOf,
  decodePathSegment,
  readBody,
  resolveLimits,
  startProxyServer,
  yieldToLoop,
} from './server.js';
import { checkFinish, finishThreads, replyMessage, SessionThreads } from './stitch.js';
import { type FinishOptions, TrajectoryManager } from './trajectory/manager.js';
import { generateTurn } from './turn.js';
import { listenUnixSocket } from './unix-socket.js';

export type { CaptureProxy, CaptureProxyOptions, CaptureSession, SessionOptions } from './api.js';

interface SessionState {
  id: string;
  /** What `openSession` returned; a request names the session by its `apiKey`. */
  handle: CaptureSession;
  sampling: Sampling;
  maxContextTokens: number | undefined;
  templateKwargs: Record<string, unknown> | undefined;
  truncated: boolean;
  inflight: Set<AbortController>;
  /** Raw argument text of tool calls this session produced, by call id, to re-render them exactly. */
  toolArgs: Map<string, string>;
  /** The session's conversations and the captured history each next prompt reuses. */
  threads: SessionThreads;
  /** Answers kept for retries, and the turns recorded (see `TurnLedger`). */
  ledger: TurnLedger;
}

const LARGE_BODY_CHARS = 1 << 20;

/** Check a session's id and options (the sharded proxy checks them before a shard sees them). */
export function checkSession(id: string, options: SessionOptions): void {
  if (typeof id !== 'string' || id === '' || /[\s/]/.test(id)) {
    throw new ConfigError(
      `session id must be a non-empty string without spaces or '/', found ${JSON.stringify(id)}`,
    );
  }
  const { maxContextTokens } = options;
  if (maxContextTokens !== undefined && !(Number.isInteger(maxContextTokens) && maxContextTokens > 0)) {
    throw new ConfigError(`maxContextTokens must be a positive integer, found ${maxContextTokens}`);
  }
  checkMaxTurns(options.maxTurns, 'maxTurns');
}

/** What a shard worker adds to the proxy it runs (see `shards/`). */
export interface ShardHooks {
  /** A request named a key no open session has: take in the sessions the main thread opened since. */
  unknownKey(): void;
  /** A turn's answer is about to be handed over: false once the main thread finished the session. */
  enter(sessionId: string): boolean;
  /** That answer was handed over (and recorded) or given up. */
  leave(sessionId: string): void;
  /** The open sockets `limits.maxConnections` caps: all shards' together. */
  connections: ConnectionCount;
}

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

export async function startProxyCore(options: CaptureProxyOptions, shard?: ShardHooks): Promise<ProxyCore> {
  const engines = Array.isArray(options.engine) ? [...options.engine] : [options.engine as Engine];
  if (engines.length === 0) throw new ConfigError('startCaptureProxy: `engine` needs at least one engine');
  const { tokenizer } = options;
  const modelName = options.modelName ?? 'vime-policy';
  const trajectories =
    options.trajectories ?? new TrajectoryManager({ decode: (ids) => tokenizer.decode(ids) });
  const events = new EventEmitter<ProxyEvents>();
  const sessions = new Map<string, SessionState>();
  const byKey = new Map<string, SessionState>();
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
  const router = new EngineRouter(engines, options.router);
  const defaultMaxTurns = checkMaxTurns(options.maxTurns, 'maxTurns');
  const finished = new FinishedSessions();
  let url = '';

  function openSession(
    id: string,
    sessionOptions: SessionOptions = {},
    key = `${id}.${randomBytes(16).toString('base64url')}`,
  ): CaptureSession {
    checkSession(id, sessionOptions);
    if (sessions.has(id)) throw new ConfigError(`session ${JSON.stringify(id)} is already open`);
    const { maxContextTokens } = sessionOptions;
    const maxTurns = sessionOptions.maxTurns ?? defaultMaxTurns;
    trajectories.open(id);
    if (sessionOptions.engine) router.place(id, sessionOptions.engine.url);
    const handle: CaptureSession = {
      id,
      baseURL: `${url}/sessions/${encodeURIComponent(key)}/v1`,
      apiKey: key,
      fetch: inProcessFetch(key, dispatch, limits.maxBodyBytes),
    };
    const state: SessionState = {
      id,
      handle,
      sampling: sessionOptions.sampling ?? options.defaultSampling ?? {},
      maxContextTokens,
      templateKwargs: sessionOptions.templateKwargs,
      truncated: false,
      inflight: new Set(),
      toolArgs: new Map(),
      threads: new SessionThreads(id, tokenizer),
      ledger: new TurnLedger(maxTurns),
    };
    sessions.set(id, state);
    byKey.set(key, state);
    return handle;
  }

  function closeSession(state: SessionState, reason: string): void {
    for (const c of state.inflight) c.abort(new Error(reason));
    sessions.delete(state.id);
    byKey.delete(state.handle.apiKey);
    router.release(state.id);
  }

  function endSession(id: string, where: string): SessionState {
    const state = sessions.get(id);
    if (!state) throw new ConfigError(`${where}: no open session ${JSON.stringify(id)}`);
    closeSession(state, 'session finished');
    const reason = `session ${JSON.stringify(id)} is finished (finishSession); open a new session for a new rollout`;
    finished.add(state.handle.apiKey, reason);
    // auto-open takes a bare id as a key: it must not bring a finished session back
    if (options.autoOpenSessions) finished.add(id, reason);
    // A rollout completed: check the engines now, so a dead one is gone before its sessions' next turn.
    void router.checkNow('completion');
    return state;
  }

  function finishSession(id: string, finish: FinishOptions = {}): Sample[] {
    const open = sessions.get(id);
    const status = finish.status ?? (open?.truncated ? 'truncated' : undefined);
    const options = { ...finish, ...(status ? { status } : {}) };
    // bad options end nothing: the call can be made again with the rows intact
    if (open) checkFinish(trajectories, open.threads, options);
    const state = endSession(id, 'finishSession');
    return finishThreads(trajectories, state.threads, options);
  }

  /** The commit and abandon of a turn's answer, or undefined when a shard's session was finished. */
  function handOver(session: SessionState, commit: () => void, abandon: () => void) {
    if (!shard) return { commit, abandon };
    if (!shard.enter(session.id)) return undefined;
    let left = false;
    const leave = () => {
      if (left) return;
      left = true;
      shard.leave(session.id);
    };
    return {
      commit: () => {
        commit();
        leave();
      },
      abandon: () => {
        abandon();
        leave();
      },
    };
  }

  async function runTurn(
    state: SessionState,
    dialect: Dialect,
    req: ChatRequest,
    signal: AbortSignal,
    live?: LiveTurn,
  ): Promise<TurnReply & { record: () => boolean }> {
    const startedAt = performance.now();
    const templateKwargs =
      state.templateKwargs || req.templateKwargs
        ? { ...req.templateKwargs, ...state.templateKwargs }
        : undefined;
    // The captured history's ids are reused; new text is tokenized (long uncached input on a worker
    // thread, which the turn's signal stops on a disconnect).
    const planReq = { messages: req.messages, tools: req.tools, templateKwargs, specialTokenText, signal };
    const planned = await state.threads.plan(planReq);
    const { promptIds } = planned;
    const { sampling, overridden } = resolveSampling(state, req, promptIds.length, options.defaultMaxTokens);
    if (Object.keys(overridden).length > 0)
      events.emit('sampling:override', { sessionId: state.id, fields: overridden });
    const rid = newRequestId('turn');
    const base = { id: `chatcmpl-${rid}`, model: req.model ?? modelName, promptTokens: promptIds.length };
    live?.begin({ rid, id: base.id, model: base.model, promptIds });
    if (sampling.maxTokens! <= 0) {
      state.truncated = true;
      events.emit('budget:exhausted', {
        sessionId: state.id,
        promptTokens: promptIds.length,
        maxContextTokens: state.maxContextTokens!,
      });
      return {
        ...base,
        parsed: { content: '', reasoning: undefined, toolCalls: [] },
        toolCallIds: [],
        finishReason: 'length',
        outputTokens: 0,
        record: () => false,
      };
    }
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    state.inflight.add(controller);
    let result: Awaited<ReturnType<typeof generateTurn>>;
    try {
      result = await generateTurn(
        router,
        {
          sessionId: state.id,
          promptIds,
          sampling: sampling as Sampling & { maxTokens: number },
          rid,
          signal: controller.signal,
          onWeightUpdate,
          onTokens: live && ((chunk) => live.tokens(chunk)),
        },
        {
          retry: (e) => events.emit('turn:retry', { sessionId: state.id, ...e }),
          interrupted: (e) => events.emit('turn:interrupted', { sessionId: state.id, ...e }),
        },
      );
    } catch (error) {
      if (controller.signal.aborted) {
        events.emit('turn:abort', { sessionId: state.id, rid, reason: String(controller.signal.reason) });
      } else events.emit('turn:error', { sessionId: state.id, error: error as Error });
      throw error;
    } finally {
      signal.removeEventListener('abort', onAbort);
      state.inflight.delete(controller);
    }
    const endedAt = performance.now();
    if (sessions.get(state.id) !== state)
      throw new RequestError(409, `session ${state.id} was finished during the turn`);
    let topP: ReturnType<typeof turnNucleus>;
    try {
      topP = turnNucleus(sampling, result, tokenizer.vocabSize);
    } catch (error) {
      events.emit('turn:error', { sessionId: state.id, error: error as Error });
      throw error;
    }
    const versions = result.versionRuns.filter(
      (r): r is { version: string; tokens: number } => r.version !== undefined,
    );
    const last = versions[versions.length - 1]?.version;
    const text = tokenizer.decode(stripStop(result.outputIds, tokenizer.eosTokenId));
    const parsed = tokenizer.parseResponse(text);
    const toolCallIds = parsed.toolCalls.map((call, i) => {
      const id = `${dialect === 'anthropic' ? 'toolu' : 'call'}_${rid}_${i}`;
      state.toolArgs.set(id, call.arguments);
      return id;
    });
    // Recorded once the answer was handed over: a turn the client never got is no part of its trajectory,
    // and the next request does not stitch onto it.
    const record = () => {
      if (sessions.get(state.id) !== state) return false;
      const turn = trajectories.record(planned.thread.key, {
        promptIds,
        outputIds: result.outputIds,
        logprobs: result.logprobs,
        finishReason: result.finishReason,
        ...(last !== undefined ? { policyVersion: last } : {}),
        ...(versions.length > 1 ? { versionRuns: versions } : {}),
        engines: result.engines,
        ...(topP ? { topP } : {}),
        startedAt,
        endedAt,
      });
      if (result.finishReason === 'length') state.truncated = true;
      state.threads.done(planned, planReq, result.outputIds, replyMessage(parsed, toolCallIds));
      events.emit('turn', {
        sessionId: state.id,
        dialect,
        turn,
        promptTokens: promptIds.length,
        outputTokens: result.outputIds.length,
        durationMs: endedAt - startedAt,
        engines: result.engines,
        stitch: planned.stitch,
      });
      return true;
    };
    return {
      ...base,
      parsed,
      toolCallIds,
      finishReason: result.finishReason,
      outputTokens: result.outputIds.length,
      record,
    };
  }

  /** Route one request; a session key in the path wins over the credential headers. */
  async function dispatch(
    method: string,
    pathname: string,
    credential: string | undefined,
    readBody: () => Promise<string>,
    signal: AbortSignal,
    retryCount = 0,
  ): Promise<Reply> {
    let path = pathname;
    let key = credential;
    const m = /^\/sessions\/([^/]+)(\/.*)?$/.exec(path);
    if (m) {
      key = decodePathSegment(m[1]!);
      path = m[2] ?? '/';
    }
    if (!m && path.startsWith('/admin/')) {
      const reply = await adminRoute(router, options.adminToken, { method, path, credential, readBody });
      return json(reply.status, reply.body);
    }
    if (path.startsWith('/v1/')) path = path.slice(3);
    const dialect: Dialect = path.startsWith('/messages')
      ? 'anthropic'
      : path === '/responses'
        ? 'responses'
        : 'openai';
    if (method === 'GET' && path === '/models') {
      return json(200, {
        object: 'list',
        data: [
          {
            id: modelName,
            object: 'model',
            created: 0,
            owned_by: 'vime',
            type: 'model',
            display_name: modelName,
          },
        ],
      });
    }
    if (method === 'GET' && path === '/health') return json(200, { sessions: sessions.size });
    const countOnly = path === '/messages/count_tokens';
    const turnPath = path === '/chat/completions' || path === '/messages' || path === '/responses';
    if (method !== 'POST' || (!turnPath && !countOnly)) {
      return json(404, errorBody(dialect, 404, `no route ${method} ${pathname}`));
    }
    let state = key ? byKey.get(key) : undefined;
    if (!state && key && shard) {
      shard.unknownKey();
      state = byKey.get(key);
    }
    const gone = !state && key ? finished.reason(key) : undefined;
    if (gone) return json(409, errorBody(dialect, 409, gone), NO_RETRY);
    if (!state && key && options.autoOpenSessions && !sessions.has(key)) {
      openSession(key, {}, key);
      state = byKey.get(key);
    }
    if (!state) {
      // The same answer for a wrong secret and an unknown id: a guess learns nothing.
      const why = `${key ? 'no open session has this key' : 'no session key'}: send the session's apiKey (Authorization: Bearer <apiKey> or x-api-key) or use its baseURL (/sessions/<apiKey>/v1)`;
      return json(401, errorBody(dialect, 401, why));
    }
    const session = state;
    try {
      const text = await readBody();
      // A retry of an answered turn gets the same answer: no second sample, no fork.
      const key = turnPath ? await TurnLedger.key(path, text) : '';
      const replayed = turnPath ? session.ledger.replay(key, retryCount) : undefined;
      if (replayed) {
        const handover = handOver(
          session,
          () => session.ledger.commit(key),
          () => {},
        );
        if (!handover) throw new RequestError(409, `session ${session.id} was finished`);
        return { ...replayed, ...handover };
      }
      // A large body's long steps each let other sessions' work run in between.
      await checkJsonShape(text, limits);
      const large = text.length > LARGE_BODY_CHARS;
      if (large) await yieldToLoop();
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        throw new RequestError(400, 'request body is not valid JSON');
      }
      if (large) await yieldToLoop();
      const parsed = parseTurnRequest(dialect, body, state.toolArgs, countOnly);
      if (large) await yieldToLoop();
      const { req } = parsed;
      if (countOnly) {
        const ids = await tokenizer.encodeChatAsync(req.messages, {
          tools: req.tools,
          templateKwargs: state.templateKwargs,
          specialTokenText,
          signal,
        });
        return json(200, { input_tokens: ids.length });
      }
      const capped = session.ledger.capReached();
      if (capped) return json(429, errorBody(dialect, 429, capped), NO_RETRY);
      const end = session.ledger.begin();
      if (req.stream) {
        // Live tokens; the whole SSE text is kept for a retry once it was all read, and the turn is
        // recorded when the response finished. A stream that failed or was left early keeps nothing.
        let kept = false;
        const stream = await streamTurn({
          dialect,
          encoder: turnEncoder(dialect, parsed),
          tokenizer,
          run: (live) => runTurn(session, dialect, req, signal, live),
          onInexact: (reason) => events.emit('stream:inexact', { sessionId: session.id, reason }),
          onComplete: (sse, turn) => {
            kept = true;
            session.ledger.keep(key, { status: 200, contentType: SSE_TYPE, body: sse }, turn.record);
          },
        }).catch((error: unknown) => {
          end();
          throw error;
        });
        const commit = () => {
          end();
          if (kept) session.ledger.commit(key);
        };
        if (!shard) return { status: 200, contentType: SSE_TYPE, body: '', stream, commit, abandon: end };
        // The last event goes out only while the session is open (see `ShardHooks.enter`).
        let handover: ReturnType<typeof handOver>;
        const held = holdLastChunk(stream, () => {
          handover = handOver(session, commit, end);
          return handover !== undefined;
        });
        return {
          status: 200,
          contentType: SSE_TYPE,
          body: '',
          stream: held,
          commit: () => (handover ? handover.commit() : end()),
          abandon: () => (handover ? handover.abandon() : end()),
        };
      }
      const turn = await runTurn(session, dialect, req, signal).catch((error: unknown) => {
        end();
        throw error;
      });
      const reply = encodeTurn(dialect, parsed, turn);
      session.ledger.keep(key, reply, turn.record);
      const commit = () => {
        end();
        session.ledger.commit(key);
      };
      const handover = handOver(session, commit, end);
      if (!handover) {
        end();
        throw new RequestError(409, `session ${session.id} was finished during the turn`);
      }
      return { ...reply, ...handover };
    } catch (error) {
      const { apiKey } = session.handle;
      const gone = byKey.has(apiKey) ? undefined : finished.reason(apiKey);
      if (gone) return json(409, errorBody(dialect, 409, gone), NO_RETRY);
      if (error instanceof RequestError)
        return json(error.status, errorBody(dialect, error.status, error.message));
      const status =
        error instanceof EngineError
          ? error.isRetryable
            ? 503
            : 502
          : VimeError.isInstance(error)
            ? 400
            : 500;
      return json(status, errorBody(dialect, status, (error as Error).message));
    }
  }

  const http = await startProxyServer(
    limits,
    { host: options.host ?? '127.0.0.1', port: options.port ?? 0 },
    (req, res) => {
      const closer = new AbortController();
      res.on('close', () => {
        if (!res.writableFinished) closer.abort(new Error('client disconnected'));
      });
      const pathname = (req.url ?? '/').split('?')[0]!;
      const read = () => readBody(req, limits.maxBodyBytes);
      const retries = retryCountOf(req.headers['x-stainless-retry-count']);
      dispatch(req.method ?? 'GET', pathname, credentialOf(req), read, closer.signal, retries)
        .then((reply) => write(req, res, reply))
        .catch((error: unknown) =>
          write(req, res, json(500, errorBody('openai', 500, (error as Error).message))),
        );
    },
    shard?.connections,
  );
  url = http.url;
  const unix = options.socketPath
    ? await listenUnixSocket(http.server, options.socketPath).catch(async (error: unknown) => {
        await http.close();
        throw error;
      })
    : undefined;

  const proxy: CaptureProxy = {
    url,
    socketPath: unix?.path,
    events,
    trajectories,
    router,
    openSession: (id, sessionOptions) => openSession(id, sessionOptions),
    session: (id) => sessions.get(id)?.handle,
    finishSession,
    get size() {
      return sessions.size;
    },
    get connections() {
      return http.connections;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const state of [...sessions.values()]) closeSession(state, 'proxy closed');
        void Promise.all([http.close(), unix?.close()]).then(() => router.close().then(resolve));
      }),
  };
  return {
    proxy,
    open: openSession,
    discard(id) {
      const state = endSession(id, 'discard');
      for (const thread of state.threads.list) trajectories.discard(thread.key);
      trajectories.discard(id);
    },
  };
}

/** Output ids without the final stop token (it is markup, not text for the harness). */
function stripStop(ids: Int32Array, eos: number): Int32Array {
  return ids.length > 0 && ids[ids.length - 1] === eos ? ids.subarray(0, ids.length - 1) : ids;
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
