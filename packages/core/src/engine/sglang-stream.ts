/**
 * SGLang `/generate` with `stream: true`: SSE `data: {...}` chunks, then `data: [DONE]`. Each chunk's
 * `meta_info.output_token_logprobs` holds every output token so far (SGLang's default) or only the new
 * ones (`--incremental-streaming-output`); `completion_tokens` tells which, so both are read.
 */
import { EngineError } from '../errors.js';
import { type HttpClient, jsonWithIds } from '../utils/http.js';
import { parseWith } from '../validate.js';
import { readSglangNucleus, wantsNucleus } from './nucleus.js';
import { newRequestId } from './request-id.js';
import { readSglangRoutes, routingRequest } from './routing.js';
import type {
  readLogprobs,
  SglangGenerateResponseSchema,
  sglangTopLogprobsField,
  toSglangSampling,
} from './sglang.js';
import { sseData } from './sse.js';
import { readSglangTopLogprobs, wantsTopLogprobs } from './topk.js';
import type { EngineFinishReason, GenerateRequest, GenerateResult, GenerateStreamOptions } from './types.js';

/** The non-streamed client's wire pieces, handed in (`sglang.ts` imports this file). */
export interface SglangWire {
  schema: typeof SglangGenerateResponseSchema;
  readLogprobs: typeof readLogprobs;
  sampling: typeof toSglangSampling;
  topLogprobsField: typeof sglangTopLogprobsField;
  abort: (rid: string) => Promise<void>;
}

export async function sglangGenerateStream(
  http: HttpClient,
  request: GenerateRequest,
  options: GenerateStreamOptions,
  wire: SglangWire,
): Promise<GenerateResult> {
  const { schema, readLogprobs, abort } = wire;
  const rid = request.rid ?? newRequestId();
  const { signal, onTokens } = options;
  // SGLang ends a streamed request when its client goes away; the explicit abort frees the slot at once.
  const onAbort = () => void abort(rid).catch(() => {});
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const { url, body } = await http.open({
      method: 'POST',
      path: '/generate',
      body: jsonWithIds('input_ids', request.inputIds, {
        sampling_params: wire.sampling(request.sampling),
        return_logprob: true,
        logprob_start_len: -1,
        ...wire.topLogprobsField(request.sampling),
        rid,
        stream: true,
        ...routingRequest('sglang', request),
      }),
      signal,
      headers: request.routingKey ? { 'x-smg-routing-key': request.routingKey } : undefined,
    });
    const ids: Int32Array[] = [];
    const lps: Float32Array[] = [];
    const wantTop = wantsTopLogprobs(request.sampling);
    // Each chunk's top-k rows, as its output_token_logprobs: all so far, or only the new ones.
    const topRows: unknown[] = [];
    let produced = 0;
    let last: ReturnType<typeof schema.parse> | undefined;
    let text = '';
    for await (const data of sseData(body)) {
      if (data === '[DONE]') break;
      const chunk = parseWith(schema, parseJson(data, url), `a chunk of ${url}/generate`);
      const meta = chunk.meta_info;
      const entries = meta.output_token_logprobs;
      // cumulative: the whole output so far; incremental: only the tokens after `produced`
      const cumulative = entries.length === meta.completion_tokens;
      const fresh = cumulative ? entries.slice(produced) : entries;
      text = cumulative ? chunk.text : text + chunk.text;
      if (produced + fresh.length !== meta.completion_tokens) {
        throw new EngineError(
          `${url}/generate stream: ${produced} tokens read, then a chunk of ${entries.length} entries with completion_tokens ${meta.completion_tokens}`,
          { url },
        );
      }
      last = chunk;
      if (wantTop) {
        const rows = (meta as Record<string, unknown>).output_top_logprobs;
        if (!Array.isArray(rows) || rows.length !== entries.length) {
          throw new EngineError(
            `${url}/generate stream: top-k log probs: a chunk has ${entries.length} output_token_logprobs but output_top_logprobs ${JSON.stringify(rows)?.slice(0, 60)}; serve with an SGLang that honours top_logprobs_num`,
            { url, isRetryable: false },
          );
        }
        topRows.push(...(cumulative ? rows.slice(produced) : rows));
      }
      if (fresh.length === 0) continue;
      const { outputIds, logprobs } = readLogprobs(fresh, url);
      produced += outputIds.length;
      ids.push(outputIds);
      lps.push(logprobs);
      const weightVersion = meta.weight_version != null ? String(meta.weight_version) : undefined;
      onTokens({ outputIds, logprobs, weightVersion });
    }
    if (!last?.meta_info.finish_reason) {
      throw new EngineError(`${url}/generate stream ended before a finish_reason (${produced} tokens)`, {
        url,
        isRetryable: true,
      });
    }
    const meta = last.meta_info;
    return {
      rid,
      outputIds: concat(ids, Int32Array),
      logprobs: concat(lps, Float32Array),
      finishReason: finishReason(meta.finish_reason?.type),
      text,
      ...(meta.weight_version != null ? { weightVersion: String(meta.weight_version) } : {}),
      promptTokens: meta.prompt_tokens,
      cachedTokens: meta.cached_tokens,
      // The top-p patch sends every token's nucleus in the last chunk's meta_info.
      ...(wantsNucleus(request.sampling)
        ? { topP: readSglangNucleus(meta as Record<string, unknown>, produced, url) }
        : {}),
      ...(wantTop
        ? { topK: readSglangTopLogprobs(topRows, produced, request.sampling.topLogprobs!, url) }
        : {}),
      // Like the nucleus, the routing of the whole request comes with the last chunk.
      ...(request.routedExperts
        ? {
            routes: readSglangRoutes(
              meta as Record<string, unknown>,
              { promptTokens: meta.prompt_tokens, outputTokens: produced, start: 0 },
              request.routedExperts,
              http.url,
            ),
          }
        : {}),
      // Counted over the whole request: the last chunk's meta_info.spec_verify_ct.
      specVerifyPasses: meta.spec_verify_ct ?? undefined,
    };
  } catch (error) {
    if (signal?.aborted) throw signal.reason;
    throw streamError(error, http.url);
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
}

export function finishReason(type: string | null | undefined): EngineFinishReason {
  return type === 'length' ? 'length' : type === 'abort' ? 'abort' : 'stop';
}

/** A chunk's JSON; an engine's error chunk (`{"error": {"message"}}`, as SGLang and vLLM send) throws. */
export function parseJson(data: string, url: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch (cause) {
    throw new EngineError(`${url} streamed a chunk that is not JSON: ${JSON.stringify(data.slice(0, 200))}`, {
      cause,
      url,
    });
  }
  const error = (value as { error?: { message?: unknown } | string | undefined } | null)?.error;
  if (error !== undefined && error !== null) {
    const message = typeof error === 'string' ? error : String(error.message ?? JSON.stringify(error));
    throw new EngineError(`${url} streamed an error: ${message}`, { url });
  }
  return value;
}

/** A connection that broke mid-stream is retryable, like one that failed to connect. */
export function streamError(error: unknown, url: string): unknown {
  if (error instanceof EngineError) return error;
  return new EngineError(`the stream from ${url} broke: ${(error as Error).message}`, {
    cause: error,
    isRetryable: true,
    url,
  });
}

export function concat<T extends Int32Array | Float32Array>(parts: T[], Kind: { new (n: number): T }): T {
  if (parts.length === 1) return parts[0]!;
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Kind(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
