import { z } from 'zod';
import { EngineError } from '../errors.js';
import { HttpClient, jsonWithIds } from '../utils/http.js';
import { readSglangNucleus, wantsNucleus } from './nucleus.js';
import { newRequestId } from './request-id.js';
import { readSglangRoutes, routingRequest } from './routing.js';
import { sglangGenerateStream } from './sglang-stream.js';
import { checkTopLogprobs, readSglangTopLogprobs, wantsTopLogprobs } from './topk.js';
import type {
  Engine,
  EngineFinishReason,
  EngineOptions,
  GenerateResult,
  ModelInfo,
  Sampling,
  WeightControl,
} from './types.js';

/** SGLang `POST /generate` answer (non-streaming, single input). */
export const SglangGenerateResponseSchema = z.looseObject({
  text: z.string(),
  meta_info: z.looseObject({
    id: z.string().optional(),
    finish_reason: z.looseObject({ type: z.string() }).nullable(),
    prompt_tokens: z.number().int(),
    completion_tokens: z.number().int(),
    cached_tokens: z.number().int().optional(),
    weight_version: z.union([z.string(), z.number()]).nullish(),
    // Speculative decoding's verification passes: SGLang's meta_info.spec_verify_ct, sent with speculation on.
    spec_verify_ct: z.number().int().nonnegative().nullish(),
    // `[logprob, token_id, text]` per output token; checked by `readLogprobs` (a zod tuple per token is slow)
    output_token_logprobs: z.array(z.unknown()),
  }),
});

const UpdateWeightsResponseSchema = z.looseObject({
  success: z.boolean(),
  message: z.string().default(''),
  num_paused_requests: z.number().int().nullish(),
});

const ModelInfoSchema = z.looseObject({
  model_path: z.string(),
  weight_version: z.union([z.string(), z.number()]).nullish(),
});

/** SGLang's `sampling_params` for engine-neutral sampling. */
export function toSglangSampling(s: Sampling): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (s.temperature !== undefined) out.temperature = s.temperature;
  if (s.topP !== undefined) out.top_p = s.topP;
  if (s.topK !== undefined) out.top_k = s.topK;
  if (s.minP !== undefined) out.min_p = s.minP;
  if (s.maxTokens !== undefined) out.max_new_tokens = s.maxTokens;
  if (s.stop !== undefined) out.stop = s.stop;
  if (s.stopTokenIds !== undefined) out.stop_token_ids = s.stopTokenIds;
  if (s.seed !== undefined) out.sampling_seed = s.seed;
  if (s.repetitionPenalty !== undefined) out.repetition_penalty = s.repetitionPenalty;
  if (s.presencePenalty !== undefined) out.presence_penalty = s.presencePenalty;
  if (s.frequencyPenalty !== undefined) out.frequency_penalty = s.frequencyPenalty;
  // Keep special tokens in the text so it matches the ids (the caller parses the raw output).
  out.skip_special_tokens = false;
  // A truncated distribution is replayed by the trainer: ask for every output token's nucleus.
  if (wantsNucleus(s)) out.custom_params = { return_top_p_token_ids: true };
  return out;
}

/** `top_logprobs_num` beside `return_logprob` when the turn captures top-k log probs (a k above 0). */
export function sglangTopLogprobsField(s: Sampling): { top_logprobs_num?: number } {
  if (!wantsTopLogprobs(s)) return {};
  checkTopLogprobs(s.topLogprobs, undefined, 'SGLang');
  return { top_logprobs_num: s.topLogprobs! };
}

function finishReason(type: string | undefined): EngineFinishReason {
  return type === 'length' ? 'length' : type === 'abort' ? 'abort' : 'stop';
}

/**
 * A client for SGLang's native API: `/generate` with `input_ids` and `return_logprob`, `/abort_request`,
 * `/health`, `/model_info`, and the weight-update controls. An aborted call also aborts the request on
 * the engine, freeing its slot.
 */
export function sglangEngine(url: string, options: EngineOptions = {}): Engine {
  const http = new HttpClient(url, { service: 'engine', ...options });

  async function abort(rid: string, opts: { signal?: AbortSignal | undefined } = {}): Promise<void> {
    await http.text({ method: 'POST', path: '/abort_request', body: { rid }, signal: opts.signal });
  }

  async function modelInfo(opts: { signal?: AbortSignal | undefined } = {}): Promise<ModelInfo> {
    const raw = await http.json({
      method: 'GET',
      path: '/model_info',
      schema: ModelInfoSchema,
      signal: opts.signal,
    });
    return {
      modelPath: raw.model_path,
      ...(raw.weight_version != null ? { weightVersion: String(raw.weight_version) } : {}),
      raw,
    };
  }

  const weights: WeightControl = {
    async pauseGeneration(opts = {}) {
      const body = { mode: opts.mode ?? 'abort' };
      await http.text({ method: 'POST', path: '/pause_generation', body, signal: opts.signal });
    },
    async continueGeneration(opts = {}) {
      await http.text({ method: 'POST', path: '/continue_generation', body: {}, signal: opts.signal });
    },
    async updateWeightsFromDisk(request, opts = {}) {
      const res = await http.json({
        method: 'POST',
        path: '/update_weights_from_disk',
        body: {
          model_path: request.modelPath,
          ...(request.weightVersion !== undefined ? { weight_version: request.weightVersion } : {}),
          abort_all_requests: request.abortAllRequests ?? false,
          flush_cache: request.flushCache ?? true,
          ...(request.loadFormat !== undefined ? { load_format: request.loadFormat } : {}),
        },
        schema: UpdateWeightsResponseSchema,
        signal: opts.signal,
      });
      if (!res.success) {
        throw new EngineError(`${http.url}/update_weights_from_disk refused the update: ${res.message}`, {
          url: http.url,
        });
      }
      return { message: res.message, numPausedRequests: res.num_paused_requests ?? 0 };
    },
    async weightVersion(opts = {}) {
      return (await modelInfo(opts)).weightVersion;
    },
  };

  return {
    url: http.url,
    kind: 'sglang',
    async generate(request, opts = {}): Promise<GenerateResult> {
      const rid = request.rid ?? newRequestId();
      const body = jsonWithIds('input_ids', request.inputIds, {
        sampling_params: toSglangSampling(request.sampling),
        return_logprob: true,
        logprob_start_len: -1,
        ...sglangTopLogprobsField(request.sampling),
        rid,
        ...routingRequest('sglang', request),
      });
      const signal = opts.signal;
      const onAbort = () => {
        // Dropping the connection alone does not stop a non-streaming SGLang request.
        abort(rid, { signal: AbortSignal.timeout(5_000) }).catch(() => {});
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        const res = await http.json({
          method: 'POST',
          path: '/generate',
          body,
          schema: SglangGenerateResponseSchema,
          signal,
          headers: request.routingKey ? { 'x-smg-routing-key': request.routingKey } : undefined,
        });
        const meta = res.meta_info;
        const nucleus = wantsNucleus(request.sampling);
        const { outputIds, logprobs } = readLogprobs(meta.output_token_logprobs, http.url, nucleus);
        return {
          rid,
          outputIds,
          logprobs,
          finishReason: finishReason(meta.finish_reason?.type),
          text: res.text,
          ...(meta.weight_version != null ? { weightVersion: String(meta.weight_version) } : {}),
          promptTokens: meta.prompt_tokens,
          cachedTokens: meta.cached_tokens,
          ...(nucleus ? { topP: readSglangNucleus(meta, outputIds.length, http.url) } : {}),
          ...(wantsTopLogprobs(request.sampling)
            ? {
                topK: readSglangTopLogprobs(
                  meta.output_top_logprobs,
                  outputIds.length,
                  request.sampling.topLogprobs!,
                  http.url,
                ),
              }
            : {}),
          ...(request.routedExperts
            ? {
                routes: readSglangRoutes(
                  meta,
                  { promptTokens: meta.prompt_tokens, outputTokens: outputIds.length, start: 0 },
                  request.routedExperts,
                  http.url,
                ),
              }
            : {}),
          specVerifyPasses: meta.spec_verify_ct ?? undefined,
        };
      } finally {
        signal?.removeEventListener('abort', onAbort);
      }
    },
    generateStream: (request, opts) =>
      sglangGenerateStream(http, request, opts, {
        schema: SglangGenerateResponseSchema,
        readLogprobs,
        sampling: toSglangSampling,
        topLogprobsField: sglangTopLogprobsField,
        abort: (rid) => abort(rid, { signal: AbortSignal.timeout(5_000) }),
      }),
    abort,
    health: (opts = {}) => http.ok('/health', opts.signal),
    modelInfo,
    weights,
    close: () => http.close(),
  };
}

/** Split SGLang's `output_token_logprobs` (`[logprob, token_id, text?]` per token) into typed arrays. */
export function readLogprobs(
  entries: unknown[],
  url: string,
  requireLogprobs = false,
): { outputIds: Int32Array; logprobs: Float32Array } {
  const outputIds = new Int32Array(entries.length);
  const logprobs = new Float32Array(entries.length);
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i] as [unknown, unknown] | undefined;
    const lp = Array.isArray(e) ? e[0] : undefined;
    const id = Array.isArray(e) ? e[1] : undefined;
    // A replayed (top-p) turn is trained on every log prob: a missing one is an error, not 0.
    if (
      !Number.isInteger(id) ||
      (lp !== null && typeof lp !== 'number') ||
      (requireLogprobs && lp === null)
    ) {
      throw new EngineError(
        `${url}/generate: meta_info.output_token_logprobs[${i}]: expected [logprob, token_id, text], found ${JSON.stringify(e)}`,
        { url },
      );
    }
    outputIds[i] = id as number;
    logprobs[i] = (lp as number | null) ?? 0;
  }
  return { outputIds, logprobs };
}
