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
export {
  ChatTokenizer,
  type LoadTokenizerOptions,
  loadTokenizer,
  type RenderOptions,
  type TemplateMessage,
  type TemplateToolCall,
  type ToolDefinition,
} from './tokenizer.js';
