/**
 * The stand-in engine's HTTP routes: SGLang's `/generate`, health, model info, weight-update and pause
 * controls, and vLLM's `/v1/completions`, each answered from the generation core (`generation.ts`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { newRequestId } from '../engine/request-id.js';
import type { ChatTokenizer } from '../engine/tokenizer/tokenizer.js';
import { type Generation, HttpFailure, type StandInCore } from './generation.js';
import { metricsText, type ThroughputMeter } from './metrics.js';
import { standInNucleusMeta } from './nucleus.js';
import { type StandInRouting, sglangRoutesMeta, vllmRoutesField } from './routing.js';
import { type StreamWriter, sglangStream, vllmStream } from './stream.js';
import { sglangTopRows, vllmTopMaps } from './topk.js';

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
  top_logprobs_num: z.number().int().nonnegative().optional(),
  logprob_start_len: z.number().int().optional(),
  rid: z.string().optional(),
  stream: z.boolean().optional(),
  return_routed_experts: z.boolean().optional(),
  routed_experts_start_len: z.number().int().nonnegative().optional(),
});

const TokenizeBodySchema = z.looseObject({
  prompt: z.union([z.string(), z.array(z.string())]),
  add_special_tokens: z.boolean().optional(),
});
const DetokenizeBodySchema = z.looseObject({
  tokens: z.array(z.number().int()),
  skip_special_tokens: z.boolean().optional(),
});

const CompletionBodySchema = z.looseObject({
  model: z.string().optional(),
  prompt: z.union([z.string(), z.array(z.number().int())]),
  max_tokens: z.number().int().nonnegative().nullish(),
  temperature: z.number().nullish(),
  logprobs: z.number().int().nullish(),
  return_tokens_as_token_ids: z.boolean().nullish(),
  return_token_ids: z.boolean().nullish(),
  skip_special_tokens: z.boolean().nullish(),
  request_id: z.string().nullish(),
  stream: z.boolean().nullish(),
  routed_experts_prompt_start: z.number().int().nonnegative().nullish(),
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

export interface StandInRoutesOptions {
  tokenizer: ChatTokenizer;
  modelName: string;
  /** Streamed `/generate` chunks carry only their new tokens (`incrementalStreamingOutput`). */
  incremental: boolean;
  throughput: ThroughputMeter;
  /** Whose `/tokenize` and `/detokenize` answers it gives, or `none`. */
  tokenizeWire: 'sglang' | 'vllm' | 'none';
  /** Simulated speculation's verification passes per answer (`StandInEngineOptions.specVerifyPasses`). */
  specVerifyPasses: ((generation: { rid: string; outputTokens: number }) => number) | undefined;
  /** vLLM's `--max-logprobs`: a completions request asking for more is refused with 400 (default 20). */
  maxLogprobs: number;
  /** The MoE routing it reports (`StandInEngineOptions.routedExperts`). */
  routedExperts?: StandInRouting | undefined;
}

export class StandInRoutes {
  readonly #core: StandInCore;
  readonly #o: StandInRoutesOptions;

  constructor(core: StandInCore, options: StandInRoutesOptions) {
    this.#core = core;
    this.#o = options;
  }

  /** Answer one request; `closed` aborts when its client disconnects. */
  async handle(req: IncomingMessage, res: ServerResponse, closed: AbortSignal): Promise<void> {
    const path = (req.url ?? '/').split('?')[0]!;
    if (req.method === 'GET') return this.#get(path, res);
    if (req.method !== 'POST') return send(res, 405, { error: { message: `${req.method} not allowed` } });
    const json = await readJson(req);
    const core = this.#core;
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
      case '/update_weights_from_disk':
        return this.#updateWeights(res, json, closed);
      case '/flush_cache':
        return send(res, 200, {});
      case '/generate':
        return this.#generate(req, res, json, closed);
      case '/v1/completions':
        return this.#completions(req, res, json, closed);
      case '/tokenize':
      case '/detokenize':
        if (this.#o.tokenizeWire !== 'none') return this.#tokenize(res, path, json);
    }
    return send(res, 404, { error: { message: `no route POST ${path}` } });
  }

  #get(path: string, res: ServerResponse) {
    const core = this.#core;
    const { modelName } = this.#o;
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
        return send(res, 200, this.#modelInfo());
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
          max_running_requests: core.scheduler.slots,
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
        core.scheduler.tick();
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
        res.end(metricsText(core, modelName, this.#o.throughput));
        return;
      case '/flush_cache':
        return send(res, 200, {});
    }
    return send(res, 404, { error: { message: `no route GET ${path}` } });
  }

  #modelInfo() {
    return {
      model_path: this.#core.modelPath,
      tokenizer_path: this.#o.modelName,
      is_generation: true,
      preferred_sampling_params: null,
      weight_version: this.#core.weightVersion,
      has_image_understanding: false,
      has_audio_understanding: false,
      model_type: 'standin',
      architectures: ['StandIn'],
    };
  }

  /**
   * `/tokenize` and `/detokenize` with the served tokenizer: SGLang's answers (`{tokens, count,
   * max_model_len}`, `{text}`) or vLLM's (`{…, token_strs?}`, `{prompt}`).
   */
  #tokenize(res: ServerResponse, path: string, json: unknown) {
    const { tokenizer, tokenizeWire } = this.#o;
    if (path === '/detokenize') {
      const body = parseBody(DetokenizeBodySchema, json);
      // SGLang skips special tokens unless told not to; vLLM's detokenize keeps them.
      const skip = tokenizeWire === 'sglang' && (body.skip_special_tokens ?? true);
      const text = tokenizer.decode(body.tokens, { skipSpecialTokens: skip });
      return send(res, 200, tokenizeWire === 'vllm' ? { prompt: text } : { text });
    }
    const body = parseBody(TokenizeBodySchema, json);
    const encode = (text: string) => Array.from(tokenizer.encode(text));
    const tokens = typeof body.prompt === 'string' ? encode(body.prompt) : body.prompt.map(encode);
    const count = Array.isArray(tokens[0]) ? (tokens as number[][]).map((t) => t.length) : tokens.length;
    return send(res, 200, { tokens, count, max_model_len: 262_144 });
  }

  async #updateWeights(res: ServerResponse, json: unknown, closed: AbortSignal): Promise<void> {
    const body = parseBody(UpdateWeightsBodySchema, json);
    const version = body.weight_version == null ? undefined : String(body.weight_version);
    const { paused } = await this.#core.updateWeights(
      { modelPath: body.model_path, weightVersion: version, abortAllRequests: body.abort_all_requests },
      closed,
    );
    return send(res, 200, {
      success: true,
      message: `Succeeded to update model weights.${version === undefined ? '' : ` Weight version updated to ${version}.`}`,
      num_paused_requests: paused,
    });
  }

  /** SGLang's `/generate`: token ids (or text) in, the scripted output with `meta_info` out. */
  async #generate(req: IncomingMessage, res: ServerResponse, json: unknown, closed: AbortSignal) {
    const core = this.#core;
    const { tokenizer, incremental } = this.#o;
    const body = parseBody(GenerateBodySchema, json);
    const ids = body.input_ids ? Int32Array.from(body.input_ids) : tokenizer.encode(body.text ?? '');
    const sp = body.sampling_params;
    const topK = body.return_logprob ? (body.top_logprobs_num ?? 0) : 0;
    if (topK > tokenizer.vocabSize) {
      // SGLang's tokenizer manager refuses a top_logprobs_num past the vocabulary.
      return send(res, 400, {
        error: { message: `top_logprobs_num must be in [0, ${tokenizer.vocabSize}], got ${topK}` },
      });
    }
    const rid = body.rid ?? newRequestId('standin');
    const skip = sp.skip_special_tokens ?? true;
    let stream: StreamWriter | undefined;
    const open = (dropAfterHalf: () => boolean) =>
      sglangStream(
        res,
        { rid, promptTokens: ids.length, weightVersion: () => core.weightVersion },
        (x) => tokenizer.decode(x, { skipSpecialTokens: skip }),
        { incremental, dropAfterHalf, topK, vocabSize: tokenizer.vocabSize },
      );
    const g = await core.generate(
      {
        path: '/generate',
        inputIds: ids,
        maxTokens: sp.max_new_tokens ?? 128,
        temperature: sp.temperature,
        rid,
        routingKey: headerValue(req.headers['x-smg-routing-key']),
        sampling: sp,
        ...(body.stream
          ? {
              onTokens: (out: Int32Array, lps: Float32Array, total: number) => {
                stream ??= open(() => core.disconnectAfter.delete(rid));
                stream.tokens(out, lps, total);
              },
            }
          : {}),
      },
      closed,
    );
    const topP = sp.custom_params?.return_top_p_token_ids === true && (sp.top_p ?? 1) < 1;
    const out = this.#sglangBody(g, skip, body.return_logprob ?? false, topP);
    if (topK > 0) {
      Object.assign(out.meta_info, {
        output_top_logprobs: sglangTopRows(
          g.promptTokens,
          g.outputIds,
          g.logprobs,
          topK,
          tokenizer.vocabSize,
        ),
      });
    }
    Object.assign(out.meta_info, sglangRoutesMeta(this.#o.routedExperts, body, g, ids));
    // The prompt's ids as SGLang returns them from `logprob_start_len`; a stand-in has no log probs (null).
    const from = body.logprob_start_len ?? -1;
    if (body.return_logprob && from >= 0)
      Object.assign(out.meta_info, {
        input_token_logprobs: Array.from(ids.subarray(from), (id) => [null, id, null]),
      });
    if (!body.stream) return this.#sendOrDrop(res, out, g.rid, closed);
    if (closed.aborted) return;
    stream ??= open(() => false);
    return stream.finish(out);
  }

  #sglangBody(g: Generation, skipSpecial: boolean, returnLogprob: boolean, returnTopP = false) {
    const { tokenizer } = this.#o;
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
        ...this.#specMeta(g),
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

  /** SGLang's `spec_verify_ct`, scripted: a stand-in's figure (see `StandInEngineOptions.specVerifyPasses`). */
  #specMeta(g: Generation): { spec_verify_ct?: number } {
    const passes = this.#o.specVerifyPasses?.({ rid: g.rid, outputTokens: g.outputIds.length });
    return passes === undefined ? {} : { spec_verify_ct: passes };
  }

  /** vLLM's `/v1/completions`: a prompt (text or ids) in, a `text_completion` out. */
  async #completions(req: IncomingMessage, res: ServerResponse, json: unknown, closed: AbortSignal) {
    const core = this.#core;
    const { tokenizer, modelName } = this.#o;
    const body = parseBody(CompletionBodySchema, json);
    if ((body.logprobs ?? 0) > this.#o.maxLogprobs) {
      // As vLLM: a request for more log probs than --max-logprobs is a 400.
      return send(res, 400, {
        error: {
          message: `Requested sample logprobs of ${body.logprobs}, which is greater than max allowed: ${this.#o.maxLogprobs}`,
          type: 'BadRequestError',
          code: 400,
        },
      });
    }
    const ids =
      typeof body.prompt === 'string' ? tokenizer.encode(body.prompt) : Int32Array.from(body.prompt);
    const rid = body.request_id ?? newRequestId('standin');
    const decode = (x: Int32Array) =>
      tokenizer.decode(x, { skipSpecialTokens: body.skip_special_tokens ?? true });
    let stream: StreamWriter | undefined;
    const open = (drop: boolean) =>
      vllmStream(res, { id: `cmpl-${rid}`, model: modelName, promptIds: ids }, decode, {
        dropAfterHalf: () => drop && core.disconnectAfter.delete(rid),
        topMaps: (from, out, lps) => topMaps(body, from, out, lps, tokenizer.vocabSize),
      });
    const g = await core.generate(
      {
        path: '/v1/completions',
        inputIds: ids,
        maxTokens: body.max_tokens ?? 16,
        temperature: body.temperature ?? undefined,
        rid,
        routingKey: headerValue(req.headers['x-smg-routing-key']),
        sampling: Object.fromEntries(Object.entries(body).filter(([k]) => k !== 'prompt')),
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
    const answer = completionBody(g, ids, body, modelName, decode(g.outputIds), tokenizer.vocabSize);
    // vLLM sends routing only in a non-streamed answer (its stream chunks have no such field).
    if (!body.stream) Object.assign(answer.choices[0]!, vllmRoutesField(this.#o.routedExperts, body, g, ids));
    if (!body.stream) return this.#sendOrDrop(res, answer, g.rid, closed);
    if (closed.aborted) return;
    stream ??= open(false);
    stream.finish(answer);
  }

  /** Send the answer, or half of it and drop the connection when a `disconnect` fault asked for that. */
  #sendOrDrop(res: ServerResponse, body: unknown, rid: string, closed: AbortSignal) {
    if (closed.aborted) return;
    if (this.#core.disconnectAfter.delete(rid)) {
      const text = JSON.stringify(body);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(text.length) });
      res.write(text.slice(0, Math.floor(text.length / 2)));
      res.socket?.destroy();
      return;
    }
    send(res, 200, body);
  }
}

function completionBody(
  g: Generation,
  ids: Int32Array,
  body: z.output<typeof CompletionBodySchema>,
  modelName: string,
  text: string,
  vocabSize: number,
) {
  return {
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
                top_logprobs: topMaps(body, ids.length, g.outputIds, g.logprobs, vocabSize) ?? null,
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
}

/** vLLM's `top_logprobs` maps when the request asked for k > 1 by token id (the stand-in's head). */
function topMaps(
  body: z.output<typeof CompletionBodySchema>,
  position: number,
  ids: Int32Array,
  logprobs: Float32Array,
  vocabSize: number,
): Array<Record<string, number>> | undefined {
  const k = body.logprobs ?? 0;
  if (k < 1 || !body.return_tokens_as_token_ids) return undefined;
  return vllmTopMaps(position, ids, logprobs, k, vocabSize);
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

export function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
