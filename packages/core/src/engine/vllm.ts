import { z } from 'zod';
import { EngineError } from '../errors.js';
import { HttpClient } from '../utils/http.js';
import { newRequestId } from './request-id.js';
import { readVllmRoutes } from './routing.js';
import { readVllmTopLogprobs, VLLM_DEFAULT_MAX_LOGPROBS, wantsTopLogprobs } from './topk.js';
import type { Engine, EngineFinishReason, EngineOptions, GenerateResult } from './types.js';
import { completionBody, vllmGenerateStream } from './vllm-stream.js';

/** vLLM `POST /v1/completions` answer with `return_token_ids` and `logprobs`. */
export const VllmCompletionResponseSchema = z.looseObject({
  id: z.string().optional(),
  choices: z
    .array(
      z.looseObject({
        text: z.string(),
        finish_reason: z.string().nullable(),
        token_ids: z.array(z.number().int()).nullish(),
        prompt_token_ids: z.array(z.number().int()).nullish(),
        logprobs: z
          .looseObject({
            token_logprobs: z.array(z.number().nullable()),
            top_logprobs: z.unknown().optional(),
          })
          .nullable(),
        // base64 `.npy` of every forwarded position's experts (`--enable-return-routed-experts`); see routing.ts
        routed_experts: z.unknown().optional(),
      }),
    )
    .min(1),
  usage: z.looseObject({ prompt_tokens: z.number().int() }).optional(),
});

const ModelsSchema = z.looseObject({
  data: z.array(z.looseObject({ id: z.string(), root: z.string().nullish() })).min(1),
});

/** Options of `vllmEngine`. */
export interface VllmEngineOptions extends EngineOptions {
  /** The served model name (`--served-model-name`); read from `/v1/models` when absent. */
  model?: string | undefined;
  /**
   * The engine's `--max-logprobs` (default 20, vLLM's): the largest `Sampling.topLogprobs` it serves. A
   * larger one is refused before the request is sent.
   */
  maxLogprobs?: number | undefined;
}

function finishReason(reason: string | null): EngineFinishReason {
  return reason === 'length' ? 'length' : reason === 'abort' ? 'abort' : 'stop';
}

/**
 * A client for vLLM's OpenAI completions endpoint in token-in/token-out mode: the prompt is sent as
 * token ids, and `return_token_ids` + `logprobs` bring back the sampled ids and their log probs
 * (vLLM ≥ 0.10.2). vLLM aborts a request when its connection closes, so an aborted call frees the slot.
 */
export function vllmEngine(url: string, options: VllmEngineOptions = {}): Engine {
  const http = new HttpClient(url, { service: 'engine', ...options });
  let model: Promise<string> | undefined = options.model ? Promise.resolve(options.model) : undefined;
  const modelName = (signal?: AbortSignal) => {
    model ??= http
      .json({ method: 'GET', path: '/v1/models', schema: ModelsSchema, signal })
      .then((r) => r.data[0]!.id);
    model.catch(() => {
      model = undefined;
    });
    return model;
  };

  const maxLogprobs = options.maxLogprobs ?? VLLM_DEFAULT_MAX_LOGPROBS;
  const engine: Engine = {
    url: http.url,
    kind: 'vllm',
    maxTopLogprobs: maxLogprobs,
    async generate(request, opts = {}): Promise<GenerateResult> {
      const rid = request.rid ?? newRequestId();
      const body = completionBody(await modelName(opts.signal), request, rid, false, maxLogprobs);
      const res = await http.json({
        method: 'POST',
        path: '/v1/completions',
        body,
        schema: VllmCompletionResponseSchema,
        signal: opts.signal,
        headers: request.routingKey ? { 'x-smg-routing-key': request.routingKey } : undefined,
      });
      const choice = res.choices[0]!;
      if (!choice.token_ids || !choice.logprobs) {
        throw new EngineError(
          `${http.url}/v1/completions returned no token_ids/logprobs; vLLM ≥ 0.10.2 is needed for return_token_ids`,
          { url: http.url },
        );
      }
      const outputIds = Int32Array.from(choice.token_ids);
      const logprobs = Float32Array.from(choice.logprobs.token_logprobs, (x) => x ?? 0);
      if (logprobs.length !== outputIds.length) {
        throw new EngineError(
          `${http.url}: ${outputIds.length} token ids but ${logprobs.length} logprobs in one choice`,
          { url: http.url },
        );
      }
      const promptTokens = res.usage?.prompt_tokens ?? request.inputIds.length;
      return {
        rid,
        outputIds,
        logprobs,
        finishReason: finishReason(choice.finish_reason),
        text: choice.text,
        promptTokens,
        ...(wantsTopLogprobs(request.sampling)
          ? {
              topK: readVllmTopLogprobs(
                choice.logprobs.top_logprobs,
                outputIds.length,
                request.sampling.topLogprobs!,
                http.url,
              ),
            }
          : {}),
        ...(request.routedExperts
          ? {
              routes: readVllmRoutes(
                choice.routed_experts,
                { promptTokens, outputTokens: outputIds.length, start: 0 },
                request.routedExperts,
                http.url,
              ),
            }
          : {}),
      };
    },
    async generateStream(request, opts) {
      // vLLM's streamed chunks carry no routed experts: a turn that replays routing is generated
      // unstreamed and handed over as one run of tokens (its top-k heads, when asked, come with the result).
      if (request.routedExperts) {
        const result = await engine.generate(request, { signal: opts.signal });
        if (result.outputIds.length > 0)
          opts.onTokens({ outputIds: result.outputIds, logprobs: result.logprobs });
        return result;
      }
      return vllmGenerateStream(http, await modelName(opts.signal), request, opts, maxLogprobs);
    },
    async abort() {
      // vLLM aborts on disconnect; aborting the `generate` signal is the way to cancel.
    },
    health: (opts = {}) => http.ok('/health', opts.signal),
    async modelInfo(opts = {}) {
      const raw = await http.json({
        method: 'GET',
        path: '/v1/models',
        schema: ModelsSchema,
        signal: opts.signal,
      });
      const first = raw.data[0]!;
      return { modelPath: first.root ?? first.id, raw };
    },
    close: () => http.close(),
  };
  return engine;
}
