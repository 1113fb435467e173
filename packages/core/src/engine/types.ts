import type { HttpClientOptions } from '../util/http.js';

/** Sampling parameters, engine-neutral (mapped to SGLang's `sampling_params` or vLLM's request fields). */
export interface Sampling {
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  /** Most tokens to generate in one call. */
  maxTokens?: number;
  stop?: string[];
  stopTokenIds?: number[];
  seed?: number;
  repetitionPenalty?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
}

export interface GenerateRequest {
  inputIds: Int32Array | readonly number[];
  sampling: Sampling;
  /** Request id; used to abort the request on the engine. Generated when absent. */
  rid?: string;
  /** Session affinity key for routers (`X-SMG-Routing-Key`). */
  routingKey?: string;
}

export type EngineFinishReason = 'stop' | 'length' | 'abort';

export interface GenerateResult {
  rid: string;
  /** Sampled token ids, including a final stop token when the engine stopped on one. */
  outputIds: Int32Array;
  /** Log prob of each sampled token. */
  logprobs: Float32Array;
  finishReason: EngineFinishReason;
  /** The engine's decoded text of the output (may differ from a local decode in special-token handling). */
  text: string;
  /** Weight version reported by the engine, when it reports one. */
  weightVersion?: string;
  promptTokens: number;
  cachedTokens?: number;
}

export interface ModelInfo {
  modelPath: string;
  weightVersion?: string;
  raw: Record<string, unknown>;
}

/** A running inference engine, token ids in and token ids + log probs out. */
export interface Engine {
  readonly url: string;
  readonly kind: 'sglang' | 'vllm';
  generate(request: GenerateRequest, options?: { signal?: AbortSignal }): Promise<GenerateResult>;
  /** Abort one request by id (SGLang `/abort_request`); resolves once the engine acknowledged. */
  abort(rid: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** True when the engine answers its health endpoint with 200. */
  health(options?: { signal?: AbortSignal }): Promise<boolean>;
  modelInfo(options?: { signal?: AbortSignal }): Promise<ModelInfo>;
  /** Close the connection pool. */
  close(): Promise<void>;
}

/** Connection options of an engine client: those of the shared `HttpClient` (dispatcher, timeout, retries, logger). */
export type EngineOptions = HttpClientOptions;
