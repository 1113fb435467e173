import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EventEmitter } from 'eventemitter3';
import { z } from 'zod';
import { newRequestId } from '../engine/request-id.js';
import type { ChatTokenizer } from '../engine/tokenizer/tokenizer.js';
import type { EngineFinishReason } from '../engine/types.js';
import { ConfigError } from '../errors.js';
import { type Generation, HttpFailure, type PauseMode, StandInCore } from './generation.js';
import { decodeLogLine, metricsText, ThroughputMeter } from './metrics.js';
import { standInNucleusMeta } from './nucleus.js';
import type { ServiceModel } from './scheduler.js';
import { type StreamWriter, sglangStream, vllmStream } from './stream.js';

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

export type StandInFault =
  | { kind: 'error'; status?: number; message?: string }
  | { kind: 'stall'; ms: number }
  /** Send part of the answer, then drop the connection. */
  | { kind: 'disconnect' };

export interface StandInEngineOptions {
  tokenizer: ChatTokenizer;
  policy: StandInPolicy;
  service?: ServiceModel;
  /** Fault injection: called for every generation request. */
  fault?: (request: { rid: string; requestIndex: number; path: string }) => StandInFault | undefined;
  /** Served model name (default `vime-standin`). */
  modelName?: string;
  weightVersion?: string;
  host?: string;
  /** Default 0: any free port. */
  port?: number;
  /** Emit an SGLang decode-batch log line this often while requests run (ms; default 0 = never). */
  decodeLogIntervalMs?: number;
  /** TP rank tag in log lines (default `TP0`). */
  logTag?: string;
  /**
   * Streamed `/generate` chunks carry only their new tokens, as SGLang's `--incremental-streaming-output`
   * does (default false: every chunk carries the whole output so far, SGLang's default).
   */
  incrementalStreamingOutput?: boolean;
}

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

export interface StandInEvents {
  /** An SGLang-format log line (decode batches). */
  log: (line: string) => void;
  /** A generation request arrived (`routingKey`: its `X-SMG-Routing-Key` header). */
  request: (info: {
    rid: string;
    path: string;
    inputIds: Int32Array;
    routingKey: string | undefined;
  }) => void;
  finish: (info: {
    rid: string;
    finishReason: EngineFinishReason;
    outputTokens: number;
    outputIds: Int32Array;
    weightVersion: string;
  }) => void;
}

export interface StandInEngine {
  url: string;
  events: EventEmitter<StandInEvents>;
  stats(): StandInStats;
  /** Change the reported weight version (as after a weight update). */
  setWeightVersion(version: string): void;
  /** Report unhealthy (503 on `/health`) until set back. */
  setHealthy(healthy: boolean): void;
  close(): Promise<void>;
}

const GenerateBodySchema = z.looseObject({
  input_ids: z.array(z.number().int()).optional(),
  text: z.string().optional(),
  sampling_params: z
    .looseObject({
      max_new_tokens: z.number().int().nonnegative().optional(),
      temperature: z.number().optional(),
      top_p: z.number().optional(),
      skip_special_tokens: z.boolean().optional(),
      custom_params: z.looseObject({ return_top_p_token_ids: z.boolean().optional() }).nullish(),
    })
    .default({}),
  return_logprob: z.boolean().optional(),
  rid: z.string().optional(),
  stream: z.boolean().optional(),
});

const CompletionBodySchema = z.looseObject({
  model: z.string().optional(),
  prompt: z.union([z.string(), z.array(z.number().int())]),
  max_tokens: z.number().int().nonnegative().nullish(),
  temperature: z.number().nullish(),
  logprobs: z.number().int().nullish(),
  return_token_ids: z.boolean().nullish(),
  skip_special_tokens: z.boolean().nullish(),
  request_id: z.string().nullish(),
  stream: z.boolean().nullish(),
});

const AbortBodySchema = z.looseObject({ rid: z.string().optional(), abort_all: z.boolean().optional() });

/** SGLang's `UpdateWeightFromDiskReqInput` fields the stand-in reads (the rest are accepted and ignored). */
const UpdateWeightsBodySchema = z.looseObject({
  model_path: z.string().min(1),
  load_format: z.string().nullish(),
  weight_version: z.union([z.string(), z.number()]).nullish(),
  abort_all_requests: z.boolean().default(false),
  flush_cache: z.boolean().default(true),
});

const PauseBodySchema = z.looseObject({
  mode: z.enum(['abort', 'retract', 'in_place']).default('abort'),
});

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
  const incremental = options.incrementalStreamingOutput ?? false;
  const throughput = new ThroughputMeter(core);

  function sglangBody(g: Generation, skipSpecial: boolean, returnLogprob: boolean, returnTopP = false) {
    const matched = g.finishReason === 'stop' ? g.outputIds[g.outputIds.length - 1] : undefined;
    return {
      text: tokenizer.decode(g.outputIds, { skipSpecialTokens: skipSpecial }),
      meta_info: {
        id: g.rid,
        finish_reason:
          g.finishReason === 'length'
            ? { type: 'length', length: g.outputIds.length }
            : g.finishReason === 'abort'
              ? { type: 'abort', message: 'Abort request' }
              : { type: 'stop', matched },
        prompt_tokens: g.promptTokens,
        completion_tokens: g.outputIds.length,
        cached_tokens: 0,
        e2e_latency: g.latencyS,
        weight_version: g.weightVersion,
        ...(returnLogprob
          ? { output_token_logprobs: Array.from(g.outputIds, (id, i) => [g.logprobs[i], id, null]) }
          : {}),
        // As the top-p patch: the nucleus of every output token, once the request finished with some.
        ...(returnTopP && g.outputIds.length > 0
          ? standInNucleusMeta(g.promptTokens, g.outputIds, g.logprobs, tokenizer.vocabSize)
          : {}),
      },
    };
  }

  const modelInfo = () => ({
    model_path: core.modelPath,
    tokenizer_path: modelName,
    is_generation: true,
    preferred_sampling_params: null,
    weight_version: core.weightVersion,
    has_image_understanding: false,
    has_audio_understanding: false,
    model_type: 'standin',
    architectures: ['StandIn'],
  });

  async function handle(req: IncomingMessage, res: ServerResponse, closed: AbortSignal): Promise<void> {
    const path = (req.url ?? '/').split('?')[0]!;
    if (req.method === 'GET') {
      switch (path) {
        case '/health':
        case '/health_generate':
          return send(
            res,
            core.healthy ? 200 : 503,
            core.healthy ? {} : { error: { message: 'unhealthy (injected)' } },
          );
        case '/model_info':
        case '/get_model_info':
          return send(res, 200, modelInfo());
        case '/weight_version':
        case '/get_weight_version':
          return send(res, 200, { weight_version: core.weightVersion });
        case '/server_info':
        case '/get_server_info':
          return send(res, 200, {
            model_path: core.modelPath,
            tp_size: 1,
            dp_size: 1,
            pp_size: 1,
            max_running_requests: scheduler.slots,
            disaggregation_mode: 'null',
            weight_version: core.weightVersion,
            version: 'standin',
          });
        case '/v1/models':
          return send(res, 200, {
            object: 'list',
            data: [{ id: modelName, object: 'model', root: modelName, owned_by: 'vime-standin' }],
          });
        case '/metrics':
          scheduler.tick();
          res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
          res.end(metricsText(core, modelName, throughput));
          return;
        case '/flush_cache':
          return send(res, 200, {});
      }
      return send(res, 404, { error: { message: `no route GET ${path}` } });
    }
    if (req.method !== 'POST') return send(res, 405, { error: { message: `${req.method} not allowed` } });
    const json = await readJson(req);
    switch (path) {
      case '/abort_request': {
        const body = parseBody(AbortBodySchema, json);
        if (body.abort_all) core.abortAll();
        else if (body.rid) core.abort(body.rid);
        return send(res, 200, {});
      }
      case '/pause_generation':
        core.pause(parseBody(PauseBodySchema, json).mode);
        return send(res, 200, { message: 'Generation paused successfully.', status: 'ok' });
      case '/continue_generation':
        core.resume();
        return send(res, 200, { message: 'Generation continued successfully.', status: 'ok' });
      case '/update_weights_from_disk': {
        const body = parseBody(UpdateWeightsBodySchema, json);
        const version = body.weight_version == null ? undefined : String(body.weight_version);
        const { paused } = await core.updateWeights(
          { modelPath: body.model_path, weightVersion: version, abortAllRequests: body.abort_all_requests },
          closed,
        );
        return send(res, 200, {
          success: true,
          message: `Succeeded to update model weights.${version === undefined ? '' : ` Weight version updated to ${version}.`}`,
          num_paused_requests: paused,
        });
      }
      case '/flush_cache':
        return send(res, 200, {});
      case '/generate': {
        const body = parseBody(GenerateBodySchema, json);
        const ids = body.input_ids ? Int32Array.from(body.input_ids) : tokenizer.encode(body.text ?? '');
        const sp = body.sampling_params;
        const rid = body.rid ?? newRequestId('standin');
        const skip = sp.skip_special_tokens ?? true;
        let stream: StreamWriter | undefined;
        const g = await core.generate(
          {
            path,
            inputIds: ids,
            maxTokens: sp.max_new_tokens ?? 128,
            temperature: sp.temperature,
            rid,
            routingKey: headerValue(req.headers['x-smg-routing-key']),
            ...(body.stream
              ? {
                  onTokens: (out: Int32Array, lps: Float32Array, total: number) => {
                    stream ??= sglangStream(
                      res,
                      { rid, promptTokens: ids.length, weightVersion: () => core.weightVersion },
                      (x) => tokenizer.decode(x, { skipSpecialTokens: skip }),
                      { incremental, dropAfterHalf: () => core.disconnectAfter.delete(rid) },
                    );
                    stream.tokens(out, lps, total);
                  },
                }
              : {}),
          },
          closed,
        );
        const topP = sp.custom_params?.return_top_p_token_ids === true && (sp.top_p ?? 1) < 1;
        const out = sglangBody(g, skip, body.return_logprob ?? false, topP);
        if (body.stream) {
          if (closed.aborted) return;
          stream ??= sglangStream(
            res,
            { rid, promptTokens: ids.length, weightVersion: () => core.weightVersion },
            (x) => tokenizer.decode(x, { skipSpecialTokens: skip }),
            { incremental, dropAfterHalf: () => false },
          );
          return stream.finish(out);
        }
        return sendOrDrop(res, out, g.rid, closed);
      }
      case '/v1/completions':
        return completions(req, res, json, closed);
    }
    return send(res, 404, { error: { message: `no route POST ${path}` } });
  }

  async function completions(req: IncomingMessage, res: ServerResponse, json: unknown, closed: AbortSignal) {
    const body = parseBody(CompletionBodySchema, json);
    const ids =
      typeof body.prompt === 'string' ? tokenizer.encode(body.prompt) : Int32Array.from(body.prompt);
    const rid = body.request_id ?? newRequestId('standin');
    const decode = (x: Int32Array) =>
      tokenizer.decode(x, { skipSpecialTokens: body.skip_special_tokens ?? true });
    let stream: StreamWriter | undefined;
    const open = (drop: boolean) =>
      vllmStream(res, { id: `cmpl-${rid}`, model: modelName, promptIds: ids }, decode, {
        dropAfterHalf: () => drop && core.disconnectAfter.delete(rid),
      });
    const g = await core.generate(
      {
        path: '/v1/completions',
        inputIds: ids,
        maxTokens: body.max_tokens ?? 16,
        temperature: body.temperature ?? undefined,
        rid,
        routingKey: headerValue(req.headers['x-smg-routing-key']),
        ...(body.stream
          ? {
              onTokens: (out: Int32Array, lps: Float32Array, total: number) => {
                stream ??= open(true);
                stream.tokens(out, lps, total);
              },
            }
          : {}),
      },
      closed,
    );
    const text = decode(g.outputIds);
    const answer = {
      id: `cmpl-${g.rid}`,
      object: 'text_completion',
      created: Math.floor(Date.now() / 1000),
      model: modelName,
      choices: [
        {
          index: 0,
          text,
          logprobs:
            body.logprobs != null
              ? {
                  text_offset: [],
                  token_logprobs: Array.from(g.logprobs),
                  tokens: Array.from(g.outputIds, (id) => `token_id:${id}`),
                  top_logprobs: null,
                }
              : null,
          finish_reason: g.finishReason,
          stop_reason: g.finishReason === 'stop' ? g.outputIds[g.outputIds.length - 1] : null,
          ...(body.return_token_ids
            ? { token_ids: Array.from(g.outputIds), prompt_token_ids: Array.from(ids) }
            : {}),
        },
      ],
      usage: {
        prompt_tokens: ids.length,
        completion_tokens: g.outputIds.length,
        total_tokens: ids.length + g.outputIds.length,
      },
    };
    if (!body.stream) return sendOrDrop(res, answer, g.rid, closed);
    if (closed.aborted) return;
    stream ??= open(false);
    stream.finish(answer);
  }

  function sendOrDrop(res: ServerResponse, body: unknown, rid: string, closed: AbortSignal) {
    if (closed.aborted) return;
    if (core.disconnectAfter.delete(rid)) {
      const text = JSON.stringify(body);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(text.length) });
      res.write(text.slice(0, Math.floor(text.length / 2)));
      res.socket?.destroy();
      return;
    }
    send(res, 200, body);
  }

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

  const server = createServer((req, res) => {
    const closer = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) closer.abort(new Error('client disconnected'));
    });
    handle(req, res, closer.signal).catch((error: unknown) => {
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

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function parseBody<S extends z.ZodType>(schema: S, json: unknown): z.output<S> {
  const r = schema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw new HttpFailure(400, `invalid request: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return r.data;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    throw new HttpFailure(400, 'request body is not JSON');
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
