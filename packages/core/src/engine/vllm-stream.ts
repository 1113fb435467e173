/**
 * vLLM's `/v1/completions` request in token-in/token-out mode, and its streamed form: SSE chunks whose
 * `choices[0]` carries the new `token_ids` and `logprobs.token_logprobs` (vLLM ≥ 0.10.2), then
 * `data: [DONE]`. vLLM aborts a streamed request when its connection closes.
 */
import { z } from 'zod';
import { EngineError } from '../errors.js';
import { type HttpClient, type JsonText, jsonWithIds } from '../utils/http.js';
import { parseWith } from '../validate.js';
import { newRequestId } from './request-id.js';
import { routingRequest } from './routing.js';
import { concat, finishReason, parseJson, streamError } from './sglang-stream.js';
import { sseData } from './sse.js';
import { checkTopLogprobs, readVllmTopLogprobs, type TopLogprobs, wantsTopLogprobs } from './topk.js';
import type { GenerateRequest, GenerateResult, GenerateStreamOptions } from './types.js';

const VllmChunkSchema = z.looseObject({
  choices: z.array(
    z.looseObject({
      text: z.string().default(''),
      finish_reason: z.string().nullish(),
      token_ids: z.array(z.number().int()).nullish(),
      logprobs: z
        .looseObject({ token_logprobs: z.array(z.number().nullable()), top_logprobs: z.unknown().optional() })
        .nullish(),
    }),
  ),
  usage: z.looseObject({ prompt_tokens: z.number().int() }).nullish(),
});

/** The `/v1/completions` body for a token-in request (`stream` adds vLLM's streamed form). */
export function completionBody(
  model: string,
  request: GenerateRequest,
  rid: string,
  stream = false,
  maxLogprobs?: number | undefined,
): JsonText {
  const s = request.sampling;
  const top = wantsTopLogprobs(s);
  if (top) checkTopLogprobs(s.topLogprobs, maxLogprobs, 'vLLM (its --max-logprobs)');
  return jsonWithIds('prompt', request.inputIds, {
    model,
    return_token_ids: true,
    // Top-k capture: k log probs per token, keyed by token id rather than text.
    ...(top ? { logprobs: s.topLogprobs, return_tokens_as_token_ids: true } : { logprobs: 1 }),
    skip_special_tokens: false,
    include_stop_str_in_output: true,
    request_id: rid,
    ...routingRequest('vllm', request),
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    ...(s.maxTokens !== undefined ? { max_tokens: s.maxTokens } : {}),
    ...(s.temperature !== undefined ? { temperature: s.temperature } : {}),
    ...(s.topP !== undefined ? { top_p: s.topP } : {}),
    ...(s.topK !== undefined ? { top_k: s.topK } : {}),
    ...(s.minP !== undefined ? { min_p: s.minP } : {}),
    ...(s.stop !== undefined ? { stop: s.stop } : {}),
    ...(s.stopTokenIds !== undefined ? { stop_token_ids: s.stopTokenIds } : {}),
    ...(s.seed !== undefined ? { seed: s.seed } : {}),
    ...(s.repetitionPenalty !== undefined ? { repetition_penalty: s.repetitionPenalty } : {}),
    ...(s.presencePenalty !== undefined ? { presence_penalty: s.presencePenalty } : {}),
    ...(s.frequencyPenalty !== undefined ? { frequency_penalty: s.frequencyPenalty } : {}),
  });
}

export async function vllmGenerateStream(
  http: HttpClient,
  model: string,
  request: GenerateRequest,
  options: GenerateStreamOptions,
  maxLogprobs?: number | undefined,
): Promise<GenerateResult> {
  const rid = request.rid ?? newRequestId();
  const { signal, onTokens } = options;
  const k = wantsTopLogprobs(request.sampling) ? request.sampling.topLogprobs! : 0;
  const requestBody = completionBody(model, request, rid, true, maxLogprobs);
  try {
    const { url, body } = await http.open({
      method: 'POST',
      path: '/v1/completions',
      body: requestBody,
      signal,
      headers: request.routingKey ? { 'x-smg-routing-key': request.routingKey } : undefined,
    });
    const ids: Int32Array[] = [];
    const lps: Float32Array[] = [];
    const tops: TopLogprobs[] = [];
    let text = '';
    let finish: string | undefined;
    let promptTokens = request.inputIds.length;
    for await (const data of sseData(body)) {
      if (data === '[DONE]') break;
      const chunk = parseWith(VllmChunkSchema, parseJson(data, url), `a chunk of ${url}/v1/completions`);
      if (chunk.usage) promptTokens = chunk.usage.prompt_tokens;
      const choice = chunk.choices[0];
      if (!choice) continue;
      text += choice.text;
      if (choice.finish_reason) finish = choice.finish_reason;
      const tokenIds = choice.token_ids ?? [];
      const logprobs = choice.logprobs?.token_logprobs ?? [];
      if (tokenIds.length !== logprobs.length) {
        throw new EngineError(
          `${url}/v1/completions streamed ${tokenIds.length} token ids with ${logprobs.length} logprobs in one chunk; vLLM ≥ 0.10.2 is needed for return_token_ids`,
          { url },
        );
      }
      if (tokenIds.length === 0) continue;
      const chunkIds = Int32Array.from(tokenIds);
      const chunkLps = Float32Array.from(logprobs, (x) => x ?? 0);
      if (k > 0) tops.push(readVllmTopLogprobs(choice.logprobs?.top_logprobs, tokenIds.length, k, url));
      ids.push(chunkIds);
      lps.push(chunkLps);
      onTokens({ outputIds: chunkIds, logprobs: chunkLps });
    }
    if (finish === undefined) {
      throw new EngineError(`${url}/v1/completions stream ended before a finish_reason`, {
        url,
        isRetryable: true,
      });
    }
    return {
      rid,
      outputIds: concat(ids, Int32Array),
      logprobs: concat(lps, Float32Array),
      finishReason: finishReason(finish),
      text,
      promptTokens,
      ...(k > 0 ? { topK: joinTop(tops, k) } : {}),
    };
  } catch (error) {
    if (signal?.aborted) throw signal.reason;
    throw streamError(error, http.url);
  }
}

/** The streamed chunks' heads as one (none when the stream carried no token). */
function joinTop(parts: TopLogprobs[], k: number): TopLogprobs {
  const ids = concat(
    parts.map((p) => p.ids),
    Int32Array,
  );
  const logprobs = concat(
    parts.map((p) => p.logprobs),
    Float32Array,
  );
  return { k, ids, logprobs };
}
