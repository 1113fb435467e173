export { newRequestId } from './request-id.js';
export { SglangGenerateResponseSchema, sglangEngine, toSglangSampling } from './sglang.js';
export type {
  Engine,
  EngineFinishReason,
  EngineOptions,
  GenerateRequest,
  GenerateResult,
  ModelInfo,
  Sampling,
} from './types.js';
export { VllmCompletionResponseSchema, type VllmEngineOptions, vllmEngine } from './vllm.js';
