/**
 * The capture proxy's routes: one request, from the HTTP server or a session's in-process `fetch`, to
 * its answer. The admin and model-list routes answer at once; a turn route finds its session by key,
 * replays a kept answer to a retry, or runs a new turn (streamed or whole) and hands its answer over.
 */
import type { EventEmitter } from 'eventemitter3';
import type { ChatTokenizer, SpecialTokenText } from '../engine/tokenizer/tokenizer.js';
import { EngineError, VimeError } from '../errors.js';
import { adminRoute } from './admin.js';
import { encodeTurn, type GeminiRoute, parseTurnRequest, type TurnRequest, turnEncoder } from './answer.js';
import type { RequestBudget } from './budget.js';
import type { ConnectionTally } from './connections.js';
import { type Dialect, errorBody, RequestError } from './dialects.js';
import type { ProxyEvents } from './events.js';
import { TurnLedger } from './ledger.js';
import { streamTurn } from './live.js';
import { holdLastChunk, json, NO_RETRY, type Reply, SSE_TYPE } from './reply.js';
import type { EngineRouter } from './router.js';
import {
  type BodyAccount,
  checkJsonShape,
  decodePathSegment,
  type ResolvedLimits,
  yieldToLoop,
} from './server.js';
import type { SessionRegistry, SessionState } from './sessions.js';
import type { TurnRunner } from './turn-runner.js';

/** What a shard worker adds to the proxy it runs (see `shards/`). */
export interface ShardHooks {
  /** A request named a key no open session has: take in the sessions the main thread opened since. */
  unknownKey(): void;
  /** A turn's answer is about to be handed over: false once the main thread finished the session. */
  enter(sessionId: string): boolean;
  /** That answer was handed over (and recorded) or given up. */
  leave(sessionId: string): void;
  /** Where this shard's open client sockets are counted: all shards' together (its own cap is its share). */
  connections: ConnectionTally;
}

export interface DispatcherOptions {
  sessions: SessionRegistry;
  turns: TurnRunner;
  router: EngineRouter;
  tokenizer: ChatTokenizer;
  events: EventEmitter<ProxyEvents>;
  limits: ResolvedLimits;
  modelName: string;
  specialTokenText: SpecialTokenText;
  adminToken: string | undefined;
  shard: ShardHooks | undefined;
}

/** A request to a turn route (or token count) of one session. */
interface TurnCall {
  session: SessionState;
  dialect: Dialect;
  path: string;
  countOnly: boolean;
  readBody: (account?: BodyAccount) => Promise<string>;
  signal: AbortSignal;
  retryCount: number;
  /** A Gemini request's model and streaming, from its path. */
  gemini?: GeminiRoute | undefined;
}

const LARGE_BODY_CHARS = 1 << 20;

/** A turn's answer as handed over: `commit` once the client has it, `abandon` when it never will. */
type Handover = { commit: () => void; abandon: () => void };

export class RequestDispatcher {
  readonly #o: DispatcherOptions;

  constructor(options: DispatcherOptions) {
    this.#o = options;
  }

  /** Route one request; a session key in the path wins over the credential headers. */
  async dispatch(
    method: string,
    pathname: string,
    credential: string | undefined,
    readBody: (account?: BodyAccount) => Promise<string>,
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
      const reply = await adminRoute(this.#o.router, this.#o.adminToken, {
        method,
        path,
        credential,
        readBody,
      });
      return json(reply.status, reply.body);
    }
    const gemini = geminiRoute(path);
    if (gemini) {
      const session = this.#sessionOf(key, 'gemini');
      if (!('ledger' in session)) return session;
      if (method !== 'POST') return json(404, errorBody('gemini', 404, `no route ${method} ${pathname}`));
      const call = { session, dialect: 'gemini' as const, path, countOnly: false, gemini };
      return this.#turn({ ...call, readBody, signal, retryCount });
    }
    if (path.startsWith('/v1/')) path = path.slice(3);
    const dialect: Dialect = path.startsWith('/messages')
      ? 'anthropic'
      : path === '/responses'
        ? 'responses'
        : 'openai';
    if (method === 'GET' && path === '/models') return this.#models();
    if (method === 'GET' && path === '/health') return json(200, { sessions: this.#o.sessions.size });
    const countOnly = path === '/messages/count_tokens';
    const turnPath = path === '/chat/completions' || path === '/messages' || path === '/responses';
    if (method !== 'POST' || (!turnPath && !countOnly)) {
      return json(404, errorBody(dialect, 404, `no route ${method} ${pathname}`));
    }
    const session = this.#sessionOf(key, dialect);
    if (!('ledger' in session)) return session;
    return this.#turn({ session, dialect, path, countOnly, readBody, signal, retryCount });
  }

  #models(): Reply {
    const { modelName } = this.#o;
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

  /** The open session a key names, or the answer for a key that names none. */
  #sessionOf(key: string | undefined, dialect: Dialect): SessionState | Reply {
    const { sessions, shard } = this.#o;
    let state = key ? sessions.withKey(key) : undefined;
    if (!state && key && shard) {
      shard.unknownKey();
      state = sessions.withKey(key);
    }
    const gone = !state && key ? sessions.goneReason(key) : undefined;
    if (gone) return json(409, errorBody(dialect, 409, gone), NO_RETRY);
    if (!state && key) state = sessions.autoOpen(key);
    if (state) return state;
    // The same answer for a wrong secret and an unknown id: a guess learns nothing.
    const why = `${key ? 'no open session has this key' : 'no session key'}: send the session's apiKey (Authorization: Bearer <apiKey> or x-api-key) or use its baseURL (/sessions/<apiKey>/v1)`;
    return json(401, errorBody(dialect, 401, why));
  }

  /** A request of a session, within the session's budget: refused (429) past its requests in flight. */
  async #turn(call: TurnCall): Promise<Reply> {
    const budget = call.session.budget.begin();
    if (budget instanceof RequestError) return this.#failed(call.session, call.dialect, budget);
    return heldUntilDone(await this.#answer(call, budget), budget.end);
  }

  async #answer(call: TurnCall, budget: RequestBudget): Promise<Reply> {
    const { session, dialect, countOnly, signal } = call;
    try {
      const read = await this.#read(call, budget);
      if ('reply' in read) return read.reply;
      const { key, parsed } = read;
      if (countOnly) return await this.#count(session, parsed, signal);
      const capped = session.ledger.capReached();
      if (capped) return json(429, errorBody(dialect, 429, capped), NO_RETRY);
      const end = session.ledger.begin();
      if (parsed.req.stream) return await this.#streamed(call, parsed, key, end);
      return await this.#answered(call, parsed, key, end);
    } catch (error) {
      return this.#failed(session, dialect, error);
    }
  }

  /**
   * The request's body (its bytes counted against the session's budget as they arrive), then a
   * retry's kept answer or the request parsed. The body's text is dropped once parsed.
   */
  async #read(
    call: TurnCall,
    budget: RequestBudget,
  ): Promise<{ reply: Reply } | { key: string; parsed: TurnRequest }> {
    const { session, dialect, path, countOnly } = call;
    const text = await call.readBody(budget);
    // A retry of an answered turn gets the same answer: no second sample, no fork.
    const key = countOnly ? '' : await TurnLedger.key(path, text);
    const replayed = countOnly ? undefined : session.ledger.replay(key, call.retryCount);
    if (replayed) {
      const handover = this.#handOver(
        session,
        () => session.ledger.commit(key),
        () => {},
      );
      if (!handover) throw new RequestError(409, `session ${session.id} was finished`);
      return { reply: { ...replayed, ...handover } };
    }
    return { key, parsed: await this.#parse(session, dialect, text, countOnly, call.gemini) };
  }

  /** `count_tokens`: the rendered prompt's token count, its text charged to the session's budget. */
  async #count(session: SessionState, { req }: TurnRequest, signal: AbortSignal): Promise<Reply> {
    const { tokenizer, specialTokenText } = this.#o;
    const text = tokenizer.renderChat(req.messages, {
      tools: req.tools,
      templateKwargs: session.templateKwargs,
      specialTokenText,
    });
    session.budget.tokenize(text.length);
    const ids = await tokenizer.encodeRenderedAsync(text, { specialTokenText, signal });
    return json(200, { input_tokens: ids.length });
  }

  /** The request body as a turn request; a large body's long steps each let other sessions' work run. */
  async #parse(
    session: SessionState,
    dialect: Dialect,
    text: string,
    countOnly: boolean,
    gemini: GeminiRoute | undefined,
  ): Promise<TurnRequest> {
    await checkJsonShape(text, this.#o.limits);
    const large = text.length > LARGE_BODY_CHARS;
    if (large) await yieldToLoop();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new RequestError(400, 'request body is not valid JSON');
    }
    if (large) await yieldToLoop();
    const parsed = parseTurnRequest(dialect, body, session.toolArgs, countOnly, gemini);
    if (large) await yieldToLoop();
    return parsed;
  }

  /**
   * A streamed turn: live tokens; the whole SSE text is kept for a retry once it was all read, and the
   * turn is recorded when the response finished. A stream that failed or was left early keeps nothing.
   */
  async #streamed(call: TurnCall, parsed: TurnRequest, key: string, end: () => void): Promise<Reply> {
    const { session, dialect, signal } = call;
    const { events, shard } = this.#o;
    let kept = false;
    const stream = await streamTurn({
      dialect,
      encoder: turnEncoder(dialect, parsed),
      tokenizer: this.#o.tokenizer,
      run: (live) => this.#o.turns.run(session, dialect, parsed.req, signal, live),
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
    let handover: Handover | undefined;
    const held = holdLastChunk(stream, () => {
      handover = this.#handOver(session, commit, end);
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

  /** A whole turn, answered as JSON and kept for a retry. */
  async #answered(call: TurnCall, parsed: TurnRequest, key: string, end: () => void): Promise<Reply> {
    const { session, dialect, signal } = call;
    const turn = await this.#o.turns.run(session, dialect, parsed.req, signal).catch((error: unknown) => {
      end();
      throw error;
    });
    const reply = encodeTurn(dialect, parsed, turn);
    session.ledger.keep(key, reply, turn.record);
    const commit = () => {
      end();
      session.ledger.commit(key);
    };
    const handover = this.#handOver(session, commit, end);
    if (!handover) {
      end();
      throw new RequestError(409, `session ${session.id} was finished during the turn`);
    }
    return { ...reply, ...handover };
  }

  /** The commit and abandon of a turn's answer, or undefined when a shard's session was finished. */
  #handOver(session: SessionState, commit: () => void, abandon: () => void): Handover | undefined {
    const { shard } = this.#o;
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

  /** A failed turn's answer: 409 once its session was finished, else a status for the error's kind. */
  #failed(session: SessionState, dialect: Dialect, error: unknown): Reply {
    const gone = this.#o.sessions.goneReason(session.handle.apiKey);
    if (gone) return json(409, errorBody(dialect, 409, gone), NO_RETRY);
    if (error instanceof RequestError) {
      const { status, message, retryAfterS } = error;
      if (retryAfterS === undefined) return json(status, errorBody(dialect, status, message));
      return json(status, errorBody(dialect, status, message, true), {
        'retry-after': String(retryAfterS),
      });
    }
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

/**
 * A reply that gives its request's share of the session's budget back once handed over or given up; a
 * reply with no hand-over (an error, a token count) gives it back at once.
 */
function heldUntilDone(reply: Reply, end: () => void): Reply {
  if (!reply.commit && !reply.abandon) {
    end();
    return reply;
  }
  return {
    ...reply,
    commit: () => {
      end();
      reply.commit?.();
    },
    abandon: () => {
      end();
      reply.abandon?.();
    },
  };
}

/**
 * A Gemini API turn route, `/v1beta/models/<model>:generateContent` or `:streamGenerateContent` (the SSE
 * form; its `?alt=sse` is in the query): the model and whether it streams; undefined for any other path.
 */
function geminiRoute(path: string): GeminiRoute | undefined {
  const m = /^\/v1(?:beta|alpha)?\/models\/([^/:]+):(generateContent|streamGenerateContent)$/.exec(path);
  if (!m) return undefined;
  return { model: decodePathSegment(m[1]!), stream: m[2] === 'streamGenerateContent' };
}
