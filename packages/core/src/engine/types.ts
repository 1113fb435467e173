import type { HttpClientOptions } from '../utils/http.js';
import type { NucleusReplay } from './nucleus.js';
import type { RoutedExperts, RoutingShape } from './routing.js';
import type { TopLogprobs } from './topk.js';

/** The engines Vime speaks to: their HTTP wires differ (see `sglangEngine`, `vllmEngine`). */
export type EngineKind = 'sglang' | 'vllm';

/** Sampling parameters, engine-neutral (mapped to SGLang's `sampling_params` or vLLM's request fields). */
export interface Sampling {
  temperature?: number | undefined;
  topP?: number | undefined;
  topK?: number | undefined;
  minP?: number | undefined;
  /** Most tokens to generate in one call. */
  maxTokens?: number | undefined;
  stop?: string[] | undefined;
  stopTokenIds?: number[] | undefined;
  seed?: number | undefined;
  repetitionPenalty?: number | undefined;
  presencePenalty?: number | undefined;
  frequencyPenalty?: number | undefined;
  /**
   * Capture the top-k log probs of every output token (score centering), k = this: SGLang's
   * `top_logprobs_num`, vLLM's `logprobs`. At most the engine's limit (`Engine.maxTopLogprobs`).
   */
  topLogprobs?: number | undefined;
}

/** A generation request in token ids. */
export interface GenerateRequest {
  inputIds: Int32Array | readonly number[];
  sampling: Sampling;
  /** Request id; used to abort the request on the engine. Generated when absent. */
  rid?: string | undefined;
  /** Session affinity key for routers (`X-SMG-Routing-Key`). */
  routingKey?: string | undefined;
  /**
   * Routing replay (R3): ask the engine for the routed experts of every forwarded token (the whole
   * sequence, from position 0) of a model with this many MoE layers and experts per token.
   */
  routedExperts?: RoutingShape | undefined;
}

/** Why an engine stopped generating: a stop token, the length limit, or an abort. */
export type EngineFinishReason = 'stop' | 'length' | 'abort';

/** What an engine generated for one request: token ids, log probs, finish reason and weight version. */
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
  weightVersion?: string | undefined;
  promptTokens: number;
  cachedTokens?: number | undefined;
  /** The nucleus of every output token, when sampling used top-p < 1 (sampler replay). */
  topP?: NucleusReplay | undefined;
  /** The top-k log probs of every output token, when sampling asked for them (`Sampling.topLogprobs`). */
  topK?: TopLogprobs | undefined;
  /** The routed experts of every forwarded position, when the request asked for them (`routedExperts`). */
  routes?: RoutedExperts | undefined;
  /**
   * Verification forward passes of speculative decoding (SGLang's `meta_info.spec_verify_ct`), when the
   * engine reports them: absent with speculation off, and from an engine whose answers carry no count (vLLM).
   */
  specVerifyPasses?: number | undefined;
}

/** New output tokens of a streamed generation, as the engine produced them. */
export interface TokenChunk {
  outputIds: Int32Array;
  logprobs: Float32Array;
  /** The weight version the engine reported with them, when it reports one. */
  weightVersion?: string | undefined;
}

/** Options of a streamed generation. */
export interface GenerateStreamOptions {
  signal?: AbortSignal | undefined;
  /** Called with each run of new tokens, in order; their concatenation is the result's `outputIds`. */
  onTokens: (chunk: TokenChunk) => void;
}

/** What an engine reports about the model it serves. */
export interface ModelInfo {
  modelPath: string;
  weightVersion?: string | undefined;
  raw: Record<string, unknown>;
}

/** SGLang's `/pause_generation` modes: `abort` ends in-flight requests (with their partial output); the others freeze them. */
export type PauseMode = 'abort' | 'retract' | 'in_place';

/** A request to load new weights from disk. */
export interface WeightUpdateRequest {
  /** The checkpoint directory the engine loads. */
  modelPath: string;
  /** The version the engine reports afterwards (`meta_info.weight_version`). */
  weightVersion?: string | undefined;
  /** End in-flight requests before loading (default false: the update waits for them). */
  abortAllRequests?: boolean | undefined;
  flushCache?: boolean | undefined;
  loadFormat?: string | undefined;
}

/** Weight-update controls on SGLang's wire (`/pause_generation`, `/update_weights_from_disk`, …). */
export interface WeightControl {
  /** Pause generation (for a weight update). */
  pauseGeneration(options?: {
    mode?: PauseMode | undefined;
    signal?: AbortSignal | undefined;
  }): Promise<void>;
  /** Resume generation after a pause. */
  continueGeneration(options?: { signal?: AbortSignal | undefined }): Promise<void>;
  /** Resolves once the engine loaded the weights; a refused update is an `EngineError`. */
  updateWeightsFromDisk(
    request: WeightUpdateRequest,
    options?: { signal?: AbortSignal | undefined },
  ): Promise<{ message: string; numPausedRequests: number }>;
  /** The version the engine serves now (`/model_info`'s `weight_version`). */
  weightVersion(options?: { signal?: AbortSignal | undefined }): Promise<string | undefined>;
}

/** A running inference engine, token ids in and token ids + log probs out. */
export interface Engine {
  readonly url: string;
  readonly kind: 'sglang' | 'vllm';
  /** The most top log probs per token the engine returns (`Sampling.topLogprobs`), when it caps them. */
  readonly maxTopLogprobs?: number | undefined;
  /** Generate from the given token ids with the given sampling. */
  generate(request: GenerateRequest, options?: { signal?: AbortSignal | undefined }): Promise<GenerateResult>;
  /** `generate` streamed: the same result, with `onTokens` called as the engine produces tokens. */
  generateStream?(request: GenerateRequest, options: GenerateStreamOptions): Promise<GenerateResult>;
  /** Abort one request by id (SGLang `/abort_request`); resolves once the engine acknowledged. */
  abort(rid: string, options?: { signal?: AbortSignal | undefined }): Promise<void>;
  /** True when the engine answers its health endpoint with 200; rejects, naming why, when it cannot be reached. */
  health(options?: { signal?: AbortSignal | undefined }): Promise<boolean>;
  /** The served model's path and weight version. */
  modelInfo(options?: { signal?: AbortSignal | undefined }): Promise<ModelInfo>;
  /** Weight-update controls, where the engine has them (SGLang). */
  readonly weights?: WeightControl | undefined;
  /** Close the connection pool. */
  close(): Promise<void>;
}

/** Connection options of an engine client: those of the shared `HttpClient` (dispatcher, timeout, retries, logger). */
export type EngineOptions = HttpClientOptions;
