/**
 * A capture session as an AI SDK language model: the AI SDK's OpenAI-compatible provider, pointed at the
 * session, so every `generateText` / `streamText` / `ToolLoopAgent` step is one turn the trajectory
 * manager records token-exactly.
 */
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import type { LanguageModelV4 } from '@ai-sdk/provider';
import { ConfigError } from '@vime/core';
import { type CaptureSession, captureFetch } from '@vime/core/proxy';

/** Options of `captureModel`. */
export interface CaptureModelOptions {
  /** Model name sent to the proxy (it serves whatever its engine runs). Default `vime-policy`. */
  modelId?: string | undefined;
  /**
   * `in-process` (the default) runs each turn through the session's own `fetch`, with no HTTP hop;
   * `http` posts to the session's URL, as a client in another process would.
   */
  transport?: 'in-process' | 'http' | undefined;
  /** Called once per model request the agent sends (a turn), before it is sent. */
  onRequest?: ((url: string) => void) | undefined;
}

/**
 * An AI SDK `LanguageModel` whose every call is a turn of `session` (Chat Completions wire): pass it as
 * the `model` of `generateText`, `streamText` or a `ToolLoopAgent`; nothing else in the agent changes.
 */
export function captureModel(session: CaptureSession, options: CaptureModelOptions = {}): LanguageModelV4 {
  const transport = options.transport ?? 'in-process';
  if (transport !== 'in-process' && transport !== 'http') {
    throw new ConfigError(
      `captureModel: transport ${JSON.stringify(transport)} is not one of 'in-process', 'http'; pass one of them or leave it out`,
    );
  }
  const send: typeof fetch = transport === 'http' ? globalThis.fetch : captureFetch(session);
  const onRequest = options.onRequest;
  const provider = createOpenAICompatible({
    name: 'vime',
    baseURL: session.baseURL,
    apiKey: session.apiKey,
    // The usage block of a streamed answer, so `streamText` reports token counts as `generateText` does.
    includeUsage: true,
    fetch: onRequest
      ? (input, init) => {
          onRequest(input instanceof Request ? input.url : String(input));
          return send(input, init);
        }
      : send,
  });
  return provider.chatModel(options.modelId ?? 'vime-policy');
}
