export {
  hermesToolParser,
  type ParsedResponse,
  type ParsedToolCall,
  parseResponse,
  pythonJson,
  type ReasoningParser,
  type ToolCallParser,
  thinkReasoningParser,
} from './parsers.js';
export { type ChatRenderer, nativeRenderer, qwen3Renderer, templateJson } from './renderers.js';
export type { RenderOptions, TemplateMessage, TemplateToolCall, ToolDefinition } from './template.js';
export {
  ChatTokenizer,
  type LoadTokenizerOptions,
  loadTokenizer,
} from './tokenizer.js';
