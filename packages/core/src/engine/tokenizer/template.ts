// The chat-template data model: what a model's chat template consumes (shared by tokenizer and renderers).

/** A tool call inside an assistant message, in OpenAI's shape (what chat templates expect). */
export interface TemplateToolCall {
  id?: string | undefined;
  type?: 'function' | undefined;
  function: { name: string; arguments: string | Record<string, unknown> };
}

/** One chat message as the model's chat template consumes it. */
export interface TemplateMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | (string & {});
  content: string;
  reasoning_content?: string | undefined;
  tool_calls?: TemplateToolCall[] | undefined;
  tool_call_id?: string | undefined;
  name?: string | undefined;
}

/** A tool definition in OpenAI's function-tool shape. */
export interface ToolDefinition {
  type: 'function';
  function: {
    name: string;
    description?: string | undefined;
    parameters?: Record<string, unknown> | undefined;
  };
}

/** Options of rendering a conversation with a chat template. */
export interface RenderOptions {
  tools?: readonly ToolDefinition[] | undefined;
  /** Append the assistant header so the model continues as the assistant (default true). */
  addGenerationPrompt?: boolean | undefined;
  /** Extra template variables, e.g. `{ enable_thinking: false }`. */
  templateKwargs?: Record<string, unknown> | undefined;
}
