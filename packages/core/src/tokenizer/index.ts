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
export {
  ChatTokenizer,
  type LoadTokenizerOptions,
  loadTokenizer,
  type RenderOptions,
  type TemplateMessage,
  type TemplateToolCall,
  type ToolDefinition,
} from './tokenizer.js';
