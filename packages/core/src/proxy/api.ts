/** The capture proxy's public shapes: its options, its sessions and the running proxy. */
import type { EventEmitter } from 'eventemitter3';
import type { RoutingShape } from '../engine/routing.js';
import type { ChatTokenizer, SpecialTokenText } from '../engine/tokenizer/tokenizer.js';
import type { Engine, Sampling } from '../engine/types.js';
import type { Sample } from '../sample.js';
import type { ProxyEvents } from './events.js';
import type { EngineRouter, EngineRouterOptions } from './router.js';
import type { ProxyLimits } from './server.js';
import type { FinishOptions, TrajectoryManager } from './trajectory/manager.js';
import type { WeightUpdatePolicy } from './turn.js';

/** Options of one capture session. */
export interface SessionOptions {
  /** Sampling for every turn of the session; what the harness sends is overridden (and reported). */
  sampling?: Sampling | undefined;
  /** Whole-trajectory token budget: each turn's `max_new_tokens` is clamped to what is left of it. */
  maxContextTokens?: number | undefined;
  /** Place the session on this engine while it is healthy (default: the least-loaded healthy engine). */
  engine?: Engine | undefined;
  /** Extra chat-template variables for this session, e.g. `{ enable_thinking: false }`. */
  templateKwargs?: Record<string, unknown> | undefined;
  /** Most turns the session may record; past them a new turn is answered 429 (default: the proxy's). */
  maxTurns?: number | undefined;
}

/** An open capture session: point a harness at `baseURL` with `apiKey`, or give a client `fetch`. */
export interface CaptureSession {
  id: string;
  /** OpenAI/Anthropic base URL routed to this session (`<proxy>/sessions/<apiKey>/v1`). */
  baseURL: string;
  /**
   * The session's credential, `<id>.<secret>` (128 random bits), for clients that route by
   * `Authorization: Bearer` / `x-api-key`: an agent that knows or guesses another session's id cannot
   * post turns into it.
   */
  apiKey: string;
  /** A `fetch` that runs turns in-process (no HTTP hop); see `captureFetch`. */
  fetch: typeof fetch;
}

/** Options of `startCaptureProxy`. */
export interface CaptureProxyOptions {
  /**
   * One engine, or several behind the router: a session sticks to its engine while that one is healthy,
   * new sessions go to the least-loaded healthy engine (see `EngineRouter`).
   */
  engine: Engine | readonly Engine[];
  /** Router settings: in-flight caps, health-check interval, how long a turn waits for a healthy engine. */
  router?: EngineRouterOptions | undefined;
  /**
   * A turn the engine cuts short (SGLang aborts in-flight requests for a weight update): `continue` (the
   * default) resumes from the tokens already produced, so the turn spans two weight versions; `restart`
   * discards them and regenerates the turn on the new weights.
   */
  onWeightUpdate?: WeightUpdatePolicy | undefined;
  /**
   * MoE routing replay (R3), off by default: every turn asks its engine for the routed experts of the
   * whole sequence (SGLang `return_routed_experts`, vLLM `--enable-return-routed-experts`), a turn
   * whose engine returns none or the wrong shape fails, and every row carries `rollout_routed_experts`
   * (`len(tokens) − 1` positions × `layers` × `topK`). Give the model's MoE layer count and experts per token.
   */
  routingReplay?: RoutingShape | undefined;
  /**
   * Bearer token of the admin routes (`GET|POST|DELETE /admin/engines`: list, add, remove engines at run
   * time; `GET|POST /admin/weight-version`: the weight-update log, and a version a trainer loaded). Without
   * one the admin routes do not exist: agents reach this server too.
   */
  adminToken?: string | undefined;
  tokenizer: ChatTokenizer;
  host?: string | undefined;
  /** Default 0: any free port. */
  port?: number | undefined;
  /**
   * Also listen on this unix socket (absolute path; created mode 0666, a stale socket replaced): the way a
   * sandbox without a network reaches the proxy (see `@vime/sandbox`'s `SandboxSpec.proxy`).
   */
  socketPath?: string | undefined;
  /** Where turns are recorded (default: a new manager that decodes `prompt`/`response` text). */
  trajectories?: TrajectoryManager | undefined;
  /** Sampling for sessions opened without their own. */
  defaultSampling?: Sampling | undefined;
  /** Default per-turn cap on new tokens when neither the session nor the harness sets one (4096). */
  defaultMaxTokens?: number | undefined;
  /** Model name reported to harnesses (`/v1/models`, responses). Default `vime-policy`. */
  modelName?: string | undefined;
  /**
   * Open a session for any unknown key on first use, the key being its id and credential, instead of
   * answering 401 (default false). Only for clients that are all trusted: any of them can post into any
   * session whose key it knows.
   */
  autoOpenSessions?: boolean | undefined;
  /** Default per-session turn cap (`SessionOptions.maxTurns`); none when omitted. */
  maxTurns?: number | undefined;
  /**
   * What special-token text (`<|im_start|>`, …) in user, system and tool content becomes: `special` (the
   * default: what SGLang and vLLM do when they tokenize a rendered chat, so captures match the engine's own
   * chat endpoints token for token) or `text` (encoded as plain text: content cannot inject markup).
   */
  specialTokenText?: SpecialTokenText | undefined;
  /** Caps and timeouts against hostile or broken clients (body and header size, slow clients, socket count). */
  limits?: ProxyLimits | undefined;
}

/** A running capture proxy: sessions, their captured turns and their training rows. */
export interface CaptureProxy {
  url: string;
  /** The unix socket the proxy also listens on (`options.socketPath`), if any. */
  socketPath: string | undefined;
  events: EventEmitter<ProxyEvents>;
  trajectories: TrajectoryManager;
  /** The engine router: status, `add`/`remove` at run time, health, the circuit breaker, weight updates. */
  router: EngineRouter;
  /** Open a capture session: its API key and base URL route a client's calls to it. */
  openSession(id: string, options?: SessionOptions): CaptureSession;
  /** The open session `id` (its `apiKey` and `baseURL`), if there is one. */
  session(id: string): CaptureSession | undefined;
  /** Close a session and return its slime-wire training rows (see `TrajectoryManager.finish`). */
  finishSession(id: string, options?: FinishOptions): Sample[];
  /** Number of open sessions. */
  readonly size: number;
  /** Open client sockets (capped by `maxConnections`). */
  readonly connections: number;
  /**
   * The connection cap in force: `limits.maxConnections`, lowered to what the process's open-file limit
   * allows (448 at the common 1,024; see the package README).
   */
  readonly maxConnections: number;
  /** Stop serving and close the engines' connections. */
  close(): Promise<void>;
}
