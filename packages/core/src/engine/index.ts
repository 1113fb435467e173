/**
 * Inference engine clients (SGLang, vLLM), the tokenizer and chat templates.
 *
 * @module @vime/core/engine
 */

export {
  type EngineHealthState,
  type EngineHealthStatus,
  type EngineTarget,
  HEALTH_PATHS,
  type WaitForEnginesOptions,
  waitForEngines,
} from './health.js';
export {
  type NucleusCheck,
  type NucleusReplay,
  nucleusProblem,
  readSglangNucleus,
  wantsNucleus,
} from './nucleus.js';
export {
  encodeNpy,
  parseNpy,
  type RoutedExperts,
  type RoutingShape,
  readSglangRoutes,
  readVllmRoutes,
  routeRows,
} from './routing.js';
export { sglangEngine } from './sglang.js';
export {
  IncrementalDecoder,
  IncrementalParser,
  type IncrementalParserOptions,
  type StreamDelta,
} from './tokenizer/incremental.js';
export {
  hermesToolParser,
  type ParsedResponse,
  type ParsedToolCall,
  parseResponse,
  type ReasoningParser,
  type ToolCallParser,
  thinkReasoningParser,
} from './tokenizer/parsers.js';
export type { ChatRenderer } from './tokenizer/renderers.js';
export type {
  RenderOptions,
  TemplateMessage,
  TemplateToolCall,
  ToolDefinition,
} from './tokenizer/template.js';
export {
  ChatTokenizer,
  type EncodeChatOptions,
  INLINE_ENCODE_CHARS,
  type LoadTokenizerOptions,
  loadTokenizer,
  type SpecialTokenText,
} from './tokenizer/tokenizer.js';
export {
  addToolCallHealth,
  NO_TOOL_CALLS,
  type ToolCallHealth,
  toolCallHealth,
} from './tokenizer/tool-health.js';
export {
  checkEngineTokenizer,
  type TokenizerCheck,
  type TokenizerCheckOptions,
  tokenizerProbe,
} from './tokenizer-check.js';
export {
  readSglangTopLogprobs,
  readVllmTopLogprobs,
  type TopLogprobs,
  topLogprobsProblem,
  VLLM_DEFAULT_MAX_LOGPROBS,
  wantsTopLogprobs,
} from './topk.js';
export type {
  Engine,
  EngineFinishReason,
  EngineKind,
  EngineOptions,
  GenerateRequest,
  GenerateResult,
  GenerateStreamOptions,
  ModelInfo,
  PauseMode,
  Sampling,
  TokenChunk,
  WeightControl,
  WeightUpdateRequest,
} from './types.js';
export { type VllmEngineOptions, vllmEngine } from './vllm.js';
