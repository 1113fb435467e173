import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EventEmitter } from 'eventemitter3';
import type { ChatTokenizer } from '../engine/tokenizer/tokenizer.js';
import type { EngineFinishReason } from '../engine/types.js';
import { ConfigError } from '../errors.js';
import { HttpFailure, type PauseMode, StandInCore } from './generation.js';
import { decodeLogLine, ThroughputMeter } from './metrics.js';
import { StandInRoutes, send } from './routes.js';
import type { StandInRouting } from './routing.js';
import type { ServiceModel } from './scheduler.js';

/** What a scripted policy sees for one request. */
export interface StandInRequest {
  rid: string;
  /** 0-based count of generation requests this engine has received. */
  requestIndex: number;
  inputIds: Int32Array;
  /** The prompt decoded with special tokens kept (the rendered chat, for chat models). */
  prompt: string;
  maxTokens: number;
  temperature: number | undefined;
  signal: AbortSignal;
}

/**
 * The scripted policy: the text of the next turn (tokenized with the real tokenizer, then the stop token
 * is appended), or exact `ids` to emit (to script tokenizations a model could sample but re-tokenizing
 * would not produce).
 */
export type StandInPolicy = (
  request: StandInRequest,
) => string | { ids: ArrayLike<number> } | Promise<string | { ids: ArrayLike<number> }>;

/** A fault the stand-in engine injects: an error answer or a stall. */
export type StandInFault =
  | { kind: 'error'; status?: number | undefined; message?: string | undefined }
  | { kind: 'stall'; ms: number }
  /** Send part of the answer, then drop the connection. */
  | { kind: 'disconnect' };

/** Options of `startStandInEngine`. */
export interface StandInEngineOptions {
  tokenizer: ChatTokenizer;
  policy: StandInPolicy;
  service?: ServiceModel | undefined;
  /** Fault injection: called for every generation request. */
  fault?:
    | ((request: { rid: string; requestIndex: number; path: string }) => StandInFault | undefined)
    | undefined;
  /** Served model name (default `vime-standin`). */
  modelName?: string | undefined;
  weightVersion?: string | undefined;
  host?: string | undefined;
  /** Default 0: any free port. */
  port?: number | undefined;
  /** Emit an SGLang decode-batch log line this often while requests run (ms; default 0 = never). */
  decodeLogIntervalMs?: number | undefined;
  /** TP rank tag in log lines (default `TP0`). */
  logTag?: string | undefined;
  /**
   * Streamed `/generate` chunks carry only their new tokens, as SGLang's `--incremental-streaming-output`
   * does (default false: every chunk carries the whole output so far, SGLang's default).
   */
  incrementalStreamingOutput?: boolean | undefined;
  /**
   * Which engine's `/tokenize` and `/detokenize` it serves (default `sglang`: `{tokens, count,
   * max_model_len}` and `{text}`; `vllm`: `{prompt}` back from `/detokenize`), or `none`, as an engine
   * without them. Both use `tokenizer`, the stand-in's served vocabulary.
   */
  tokenizeWire?: 'sglang' | 'vllm' | 'none' | undefined;
  /**
   * Simulated speculative decoding: the verification passes a finished `/generate` answer reports as
   * `meta_info.spec_verify_ct` (SGLang's field), given its output tokens; e.g. `(n) => Math.ceil(n / 3)`
   * for an acceptance length of about 3. A stand-in's scripted figure, never a measured one: nothing is
   * drafted or verified. Default: no count, as an engine without speculation.
   */
  specVerifyPasses?: ((generation: { rid: string; outputTokens: number }) => number) | undefined;
  /**
   * vLLM's `--max-logprobs` on `/v1/completions` (default 20, vLLM's): a request for more top log probs
   * is refused with 400. SGLang's `/generate` takes a `top_logprobs_num` up to the vocabulary size.
   */
  maxLogprobs?: number | undefined;
  /**
   * Simulated MoE routing (R3): the routed experts SGLang's `/generate` returns when asked
   * (`return_routed_experts`) and vLLM's non-streamed `/v1/completions` returns (as with
   * `--enable-return-routed-experts`), deterministic per token and position (`standInExpert`). A
   * stand-in's made-up routing. Default: none, as an engine without routing capture.
   */
  routedExperts?: StandInRouting | undefined;
}

/** What a stand-in engine has served so far: requests by outcome, tokens, peaks and weight updates. */
export interface StandInStats {
  running: number;
  queued: number;
  completed: number;
  aborted: number;
  failed: number;
  promptTokens: number;
  generationTokens: number;
  /** Highest number of requests running at once, and waiting at once. */
  peakRunning: number;
  peakQueued: number;
  /** Requests held by a pause or a pending weight update. */
  held: number;
  weightUpdates: number;
  /** The `/pause_generation` mode in force, if paused. */
  paused: PauseMode | null;
}

/** The events of a stand-in engine. */
export interface StandInEvents {
  /** An SGLang-format log line (decode batches). */
  log: (line: string) => void;
  /** A generation request arrived (`routingKey`: its `X-SMG-Routing-Key` header). */
  request: (info: {
    rid: string;
    path: string;
    inputIds: Int32Array;
    routingKey: string | undefined;
    /** The sampling fields exactly as sent (SGLang's `sampling_params`; vLLM's request fields). */
    sampling: Record<string, unknown>;
  }) => void;
  /** A request finished. */
  finish: (info: {
    rid: string;
    finishReason: EngineFinishReason;
    outputTokens: number;
    outputIds: Int32Array;
    weightVersion: string;
  }) => void;
}

/** A running stand-in engine (a scripted policy, not a model). */
export interface StandInEngine {
  url: string;
  events: EventEmitter<StandInEvents>;
  /** What the engine has served so far. */
  stats(): StandInStats;
  /** Change the reported weight version (as after a weight update). */
  setWeightVersion(version: string): void;
  /** Report unhealthy (503 on `/health`) until set back. */
  setHealthy(healthy: boolean): void;
  /** Stop the server. */
  close(): Promise<void>;
}

/**
 * Start a stand-in engine: an HTTP server with SGLang's and vLLM's token-in/token-out wire, a real
 * tokenizer, a scripted policy, a throughput/slot service model, SGLang's weight-update controls and
 * fault injection. It is a test double for an inference engine, not a model: every output is what the
 * policy scripted, and a weight update only changes the reported version.
 */
export async function startStandInEngine(options: StandInEngineOptions): Promise<StandInEngine> {
  const { tokenizer, policy } = options;
  if (typeof policy !== 'function') {
    throw new ConfigError(
      'startStandInEngine: `policy` must be a function (request) => text of the next turn',
    );
  }
  const modelName = options.modelName ?? 'vime-standin';
  const events = new EventEmitter<StandInEvents>();
  const core = new StandInCore({
    tokenizer,
    policy,
    service: options.service,
    fault: options.fault,
    weightVersion: options.weightVersion ?? 'default',
    modelPath: modelName,
    events,
  });
  const { scheduler } = core;
  const throughput = new ThroughputMeter(core);
  const routes = new StandInRoutes(core, {
    tokenizer,
    modelName,
    incremental: options.incrementalStreamingOutput ?? false,
    throughput,
    tokenizeWire: options.tokenizeWire ?? 'sglang',
    specVerifyPasses: options.specVerifyPasses,
    maxLogprobs: options.maxLogprobs ?? 20,
    routedExperts: options.routedExperts,
  });
  const logTimer = decodeLog(core, events, throughput, options);
  const { server, url } = await listen(routes, options);
  return {
    url,
    events,
    stats: () => {
      scheduler.tick();
      return {
        ...core.stats,
        running: scheduler.running.size,
        queued: scheduler.queue.length,
        held: core.held,
        paused: core.paused ?? null,
      };
    },
    setWeightVersion(v) {
      core.weightVersion = v;
    },
    setHealthy(h) {
      core.healthy = h;
    },
    close: () =>
      new Promise<void>((resolve) => {
        if (logTimer) clearInterval(logTimer);
        core.close();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** SGLang's decode-batch log lines, every `decodeLogIntervalMs` while requests run (none at 0). */
function decodeLog(
  core: StandInCore,
  events: EventEmitter<StandInEvents>,
  throughput: ThroughputMeter,
  options: StandInEngineOptions,
): NodeJS.Timeout | undefined {
  const { scheduler } = core;
  let batch = 0;
  const logTimer =
    options.decodeLogIntervalMs && options.decodeLogIntervalMs > 0
      ? setInterval(() => {
          scheduler.tick();
          if (scheduler.running.size === 0 && scheduler.queue.length === 0) return;
          events.emit('log', decodeLogLine(core, batch++, options.logTag ?? 'TP0', throughput.read()));
        }, options.decodeLogIntervalMs)
      : undefined;
  logTimer?.unref();
  return logTimer;
}

/** Serve the routes on HTTP; a request whose client disconnects is aborted. */
async function listen(
  routes: StandInRoutes,
  options: StandInEngineOptions,
): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    const closer = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) closer.abort(new Error('client disconnected'));
    });
    routes.handle(req, res, closer.signal).catch((error: unknown) => {
      if (closer.signal.aborted || res.headersSent) return;
      if (error instanceof HttpFailure) send(res, error.status, { error: { message: error.message } });
      else send(res, 500, { error: { message: (error as Error).message } });
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const address = server.address() as AddressInfo;
  const url = `http://${address.address.includes(':') ? `[${address.address}]` : address.address}:${address.port}`;
  return { server, url };
}
