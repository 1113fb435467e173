import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EventEmitter } from 'eventemitter3';
import { z } from 'zod';
import { newRequestId } from '../engine/request-id.js';
import type { EngineFinishReason } from '../engine/types.js';
import { ConfigError } from '../errors.js';
import type { ChatTokenizer } from '../tokenizer/tokenizer.js';
import { sleep } from '../util/sleep.js';
import { type Job, Scheduler, type ServiceModel } from './scheduler.js';

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
}

export interface StandInEvents {
  /** An SGLang-format log line (decode batches). */
  log: (line: string) => void;
  request: (info: { rid: string; path: string }) => void;
  finish: (info: { rid: string; finishReason: EngineFinishReason; outputTokens: number }) => void;
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
      skip_special_tokens: z.boolean().optional(),
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
});

const AbortBodySchema = z.looseObject({ rid: z.string().optional(), abort_all: z.boolean().optional() });

interface Generation {
  rid: string;
  outputIds: Int32Array;
  logprobs: Float32Array;
  finishReason: EngineFinishReason;
  promptTokens: number;
  latencyS: number;
}

class HttpFailure extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const LATENCY_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/**
 * Start a stand-in engine: an HTTP server with SGLang's and vLLM's token-in/token-out wire, a real
 * tokenizer, a scripted policy, a throughput/slot service model and fault injection. It is a test
 * double for an inference engine, not a model: every output is what the policy scripted.
 */
export async function startStandInEngine(options: StandInEngineOptions): Promise<StandInEngine> {
  const { tokenizer, policy } = options;
  if (typeof policy !== 'function') {
    throw new ConfigError(
      'startStandInEngine: `policy` must be a function (request) => text of the next turn',
    );
  }
  const modelName = options.modelName ?? 'vime-standin';
  let weightVersion = options.weightVersion ?? 'default';
  let healthy = true;
  const scheduler = new Scheduler(options.service);
  const events = new EventEmitter<StandInEvents>();
  const inflight = new Map<string, AbortController>();
  const stats = {
    completed: 0,
    aborted: 0,
    failed: 0,
    promptTokens: 0,
    generationTokens: 0,
    peakRunning: 0,
    peakQueued: 0,
  };
  const latency = { buckets: LATENCY_BUCKETS.map(() => 0), sum: 0, count: 0 };
  let requestIndex = 0;
  /** Requests whose answer is cut off halfway (the `disconnect` fault). */
  const disconnectAfter = new Set<string>();
  function faultFor(rid: string, index: number, path: string): StandInFault | undefined {
    const fault = options.fault?.({ rid, requestIndex: index, path });
    if (fault?.kind === 'disconnect') disconnectAfter.add(rid);
    return fault;
  }

  async function generate(
    path: string,
    inputIds: Int32Array,
    maxTokens: number,
    temperature: number | undefined,
    ridIn: string | undefined,
    closed: AbortSignal,
  ): Promise<Generation> {
    const rid = ridIn ?? newRequestId('standin');
    const index = requestIndex++;
    const controller = new AbortController();
    inflight.set(rid, controller);
    const signal = AbortSignal.any([controller.signal, closed]);
    const started = performance.now();
    events.emit('request', { rid, path });
    try {
      const fault = faultFor(rid, index, path);
      if (fault?.kind === 'error') {
        stats.failed++;
        throw new HttpFailure(fault.status ?? 503, fault.message ?? 'injected fault');
      }
      if (fault?.kind === 'stall') await sleep(fault.ms, signal);
      let prompt: string | undefined;
      const scripted = await policy({
        rid,
        requestIndex: index,
        inputIds,
        // decoded only when the policy reads it (decoding a long prompt costs more than the rest)
        get prompt() {
          prompt ??= tokenizer.decode(inputIds);
          return prompt;
        },
        maxTokens,
        temperature,
        signal,
      });
      let ids: Int32Array;
      if (typeof scripted === 'string') {
        const text = tokenizer.encode(scripted);
        ids = new Int32Array(text.length + 1);
        ids.set(text);
        ids[text.length] = tokenizer.eosTokenId;
      } else ids = Int32Array.from(scripted.ids);
      let finishReason = 'stop' as EngineFinishReason;
      if (ids.length > maxTokens) {
        ids = ids.slice(0, maxTokens);
        finishReason = 'length';
      }
      stats.promptTokens += inputIds.length;
      const job: Job = { tokens: ids.length, promptTokens: inputIds.length, done: 0, onDone: () => {} };
      let decoded = ids.length;
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => {
          scheduler.cancel(job);
          decoded = Math.floor(job.done);
          reject(signal.reason);
        };
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
        job.onDone = () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        scheduler.submit(job);
        stats.peakRunning = Math.max(stats.peakRunning, scheduler.running.size);
        stats.peakQueued = Math.max(stats.peakQueued, scheduler.queue.length);
      }).catch((reason) => {
        // `/abort_request` ends the request with what was decoded so far; a closed client just drops it.
        if (controller.signal.aborted && !closed.aborted) {
          ids = ids.slice(0, decoded);
          finishReason = 'abort';
          return;
        }
        throw reason;
      });
      const logprobs = new Float32Array(ids.length);
      for (let i = 0; i < ids.length; i++) logprobs[i] = fakeLogprob(inputIds.length + i, ids[i]!);
      stats.generationTokens += ids.length;
      const latencyS = (performance.now() - started) / 1000;
      if (finishReason === 'abort') stats.aborted++;
      else {
        stats.completed++;
        latency.sum += latencyS;
        latency.count++;
        LATENCY_BUCKETS.forEach((b, i) => {
          if (latencyS <= b) latency.buckets[i]!++;
        });
      }
      events.emit('finish', { rid, finishReason, outputTokens: ids.length });
      return { rid, outputIds: ids, logprobs, finishReason, promptTokens: inputIds.length, latencyS };
    } catch (error) {
      if (closed.aborted) stats.aborted++;
      throw error;
    } finally {
      inflight.delete(rid);
    }
  }

  function sglangBody(g: Generation, skipSpecial: boolean, returnLogprob: boolean) {
    const matched = g.finishReason === 'stop' ? g.outputIds[g.outputIds.length - 1] : undefined;
    return {
      text: tokenizer.decode(g.outputIds, { skipSpecialTokens: skipSpecial }),
      meta_info: {
        id: g.rid,
        finish_reason:
          g.finishReason === 'length'
            ? { type: 'length', length: g.outputIds.length }
            : g.finishReason === 'abort'
              ? { type: 'abort', message: 'Abort before prefill' }
              : { type: 'stop', matched },
        prompt_tokens: g.promptTokens,
        completion_tokens: g.outputIds.length,
        cached_tokens: 0,
        e2e_latency: g.latencyS,
        weight_version: weightVersion,
        ...(returnLogprob
          ? { output_token_logprobs: Array.from(g.outputIds, (id, i) => [g.logprobs[i], id, null]) }
          : {}),
      },
    };
  }

  async function handle(req: IncomingMessage, res: ServerResponse, closed: AbortSignal): Promise<void> {
    const path = (req.url ?? '/').split('?')[0]!;
    if (req.method === 'GET') {
      switch (path) {
        case '/health':
        case '/health_generate':
          return send(
            res,
            healthy ? 200 : 503,
            healthy ? {} : { error: { message: 'unhealthy (injected)' } },
          );
        case '/model_info':
        case '/get_model_info':
          return send(res, 200, {
            model_path: modelName,
            tokenizer_path: modelName,
            is_generation: true,
            preferred_sampling_params: null,
            weight_version: weightVersion,
            has_image_understanding: false,
            has_audio_understanding: false,
            model_type: 'standin',
            architectures: ['StandIn'],
          });
        case '/server_info':
        case '/get_server_info':
          return send(res, 200, {
            model_path: modelName,
            tp_size: 1,
            dp_size: 1,
            pp_size: 1,
            max_running_requests: scheduler.slots,
            disaggregation_mode: 'null',
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
          res.end(metricsText());
          return;
      }
      return send(res, 404, { error: { message: `no route GET ${path}` } });
    }
    if (req.method !== 'POST') return send(res, 405, { error: { message: `${req.method} not allowed` } });
    const json = await readJson(req);
    if (path === '/abort_request') {
      const body = AbortBodySchema.parse(json);
      if (body.abort_all) for (const c of inflight.values()) c.abort();
      else if (body.rid) inflight.get(body.rid)?.abort();
      return send(res, 200, {});
    }
    if (path === '/generate') {
      const body = parseBody(GenerateBodySchema, json);
      const ids = body.input_ids ? Int32Array.from(body.input_ids) : tokenizer.encode(body.text ?? '');
      const sp = body.sampling_params;
      const g = await generate(path, ids, sp.max_new_tokens ?? 128, sp.temperature, body.rid, closed);
      const out = sglangBody(g, sp.skip_special_tokens ?? true, body.return_logprob ?? false);
      if (body.stream) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`data: ${JSON.stringify(out)}\n\n`);
        res.end('data: [DONE]\n\n');
        return;
      }
      return sendOrDrop(res, out, g.rid, closed);
    }
    if (path === '/v1/completions') {
      const body = parseBody(CompletionBodySchema, json);
      const ids =
        typeof body.prompt === 'string' ? tokenizer.encode(body.prompt) : Int32Array.from(body.prompt);
      const g = await generate(
        path,
        ids,
        body.max_tokens ?? 16,
        body.temperature ?? undefined,
        body.request_id ?? undefined,
        closed,
      );
      const text = tokenizer.decode(g.outputIds, { skipSpecialTokens: body.skip_special_tokens ?? true });
      return sendOrDrop(
        res,
        {
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
        },
        g.rid,
        closed,
      );
    }
    return send(res, 404, { error: { message: `no route POST ${path}` } });
  }

  function sendOrDrop(res: ServerResponse, body: unknown, rid: string, closed: AbortSignal) {
    if (closed.aborted) return;
    if (disconnectAfter.delete(rid)) {
      const text = JSON.stringify(body);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(text.length) });
      res.write(text.slice(0, Math.floor(text.length / 2)));
      res.socket?.destroy();
      return;
    }
    send(res, 200, body);
  }

  function metricsText(): string {
    const labels = `model_name="${modelName}",engine_type="unified",tp_rank="0",pp_rank="0"`;
    const lines: string[] = [];
    const metric = (name: string, type: string, help: string, value: number) => {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, `${name}{${labels}} ${value}`);
    };
    metric('sglang:num_running_reqs', 'gauge', 'The number of running requests.', scheduler.running.size);
    metric(
      'sglang:num_queue_reqs',
      'gauge',
      'The number of requests in the waiting queue.',
      scheduler.queue.length,
    );
    metric('sglang:num_used_tokens', 'gauge', 'The number of used tokens.', scheduler.usedTokens);
    metric('sglang:token_usage', 'gauge', 'The token usage.', scheduler.usedTokens / scheduler.kvTokens);
    metric('sglang:gen_throughput', 'gauge', 'The generation throughput (token/s).', currentThroughput());
    metric('sglang:cache_hit_rate', 'gauge', 'The prefix cache hit rate.', 0);
    metric(
      'sglang:prompt_tokens_total',
      'counter',
      'Number of prefill tokens processed.',
      stats.promptTokens,
    );
    metric(
      'sglang:generation_tokens_total',
      'counter',
      'Number of generation tokens processed.',
      Math.floor(scheduler.generated),
    );
    const h = 'sglang:e2e_request_latency_seconds';
    lines.push(`# HELP ${h} Histogram of End-to-end request latency in seconds`, `# TYPE ${h} histogram`);
    LATENCY_BUCKETS.forEach((b, i) => {
      lines.push(`${h}_bucket{${labels},le="${b}"} ${latency.buckets[i]}`);
    });
    lines.push(`${h}_bucket{${labels},le="+Inf"} ${latency.count}`);
    lines.push(`${h}_sum{${labels}} ${latency.sum}`, `${h}_count{${labels}} ${latency.count}`);
    return `${lines.join('\n')}\n`;
  }

  let lastGenerated = 0;
  let lastLogAt = performance.now();
  let throughput = 0;
  function currentThroughput(): number {
    const now = performance.now();
    if (now - lastLogAt >= 100) {
      throughput = ((scheduler.generated - lastGenerated) * 1000) / (now - lastLogAt);
      lastGenerated = scheduler.generated;
      lastLogAt = now;
    }
    return throughput;
  }

  let batch = 0;
  const logTimer =
    options.decodeLogIntervalMs && options.decodeLogIntervalMs > 0
      ? setInterval(() => {
          scheduler.tick();
          if (scheduler.running.size === 0 && scheduler.queue.length === 0) return;
          const used = scheduler.usedTokens;
          events.emit(
            'log',
            `[${logStamp()} ${options.logTag ?? 'TP0'}] Decode batch [${batch++}], #running-req: ${scheduler.running.size}, ` +
              `#token: ${used}, token usage: ${(used / scheduler.kvTokens).toFixed(2)}, cuda graph: False, ` +
              `gen throughput (token/s): ${currentThroughput().toFixed(2)}, #queue-req: ${scheduler.queue.length}, `,
          );
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
      return { ...stats, running: scheduler.running.size, queued: scheduler.queue.length };
    },
    setWeightVersion(v) {
      weightVersion = v;
    },
    setHealthy(h) {
      healthy = h;
    },
    close: () =>
      new Promise<void>((resolve) => {
        if (logTimer) clearInterval(logTimer);
        scheduler.stop();
        for (const c of inflight.values()) c.abort();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
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
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new HttpFailure(400, 'request body is not JSON');
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** A deterministic log prob in (-4, 0] for a (position, token) pair, exactly representable in float32. */
function fakeLogprob(position: number, id: number): number {
  let h = Math.imul(position ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(id, 0xc2b2ae35);
  h ^= h >>> 13;
  h = Math.imul(h, 0x27d4eb2f);
  h ^= h >>> 16;
  return Math.fround(-((h >>> 0) / 2 ** 32) * 4);
}

function logStamp(): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}
