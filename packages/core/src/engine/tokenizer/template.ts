// The chat-template data model: what a model's chat template consumes (shared by tokenizer and renderers).

/** A tool call inside an assistant message, in OpenAI's shape (what chat templates expect). */
export interface TemplateToolCall {
  id?: string;
  type?: 'function';
  function: { name: string; arguments: string | Record<string, unknown> };
}

/** One chat message as the model's chat template consumes it. */
export interface TemplateMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | (string & {});
  content: string;
  reasoning_content?: string;
  tool_calls?: TemplateToolCall[];
  tool_call_id?: string;
  name?: string;
}

/** A tool definition in OpenAI's function-tool shape. */
export interface ToolDefinition {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

export interface RenderOptions {
  tools?: readonly ToolDefinition[] | undefined;
  /** Append the assistant header so the model continues as the assistant (default true). */
  addGenerationPrompt?: boolean;
  /** Extra template variables, e.g. `{ enable_thinking: false }`. */
  templateKwargs?: Record<string, unknown> | undefined;
}
