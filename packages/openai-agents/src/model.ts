/**
 * A capture session as the OpenAI Agents SDK's model: its own Chat Completions or Responses model over
 * an OpenAI client pointed at the session, so every model call of an agent run is one turn the trajectory
 * manager records token-exactly.
 */
import {
  type Model,
  type ModelProvider,
  OpenAIChatCompletionsModel,
  OpenAIResponsesModel,
} from '@openai/agents';
import { ConfigError } from '@vime/core';
import { type CaptureSession, captureFetch } from '@vime/core/proxy';
import OpenAI from 'openai';

/** The wire an Agents SDK model speaks to the proxy. */
export type AgentsApi = 'chat-completions' | 'responses';

/** Options of `captureAgentsModel` and `captureModelProvider`. */
export interface CaptureAgentsModelOptions {
  /** `chat-completions` (the default) or `responses`; the proxy serves both. */
  api?: AgentsApi | undefined;
  /** Model name sent to the proxy (it serves whatever its engine runs). Default `vime-policy`. */
  modelId?: string | undefined;
  /** `in-process` (the default): the session's own `fetch`, no HTTP hop; `http`: post to the session's URL. */
  transport?: 'in-process' | 'http' | undefined;
  /** Called with the URL of each model request (one per turn), before it is sent. */
  onRequest?: ((url: string) => void) | undefined;
}

const APIS: readonly AgentsApi[] = ['chat-completions', 'responses'];

/** The OpenAI client of a session: its key, its URL, its fetch; no retries of its own (the proxy's are safe). */
function sessionClient(session: CaptureSession, options: CaptureAgentsModelOptions): OpenAI {
  const transport = options.transport ?? 'in-process';
  if (transport !== 'in-process' && transport !== 'http') {
    throw new ConfigError(
      `captureAgentsModel: transport ${JSON.stringify(transport)} is not one of 'in-process', 'http'; pass one of them or leave it out`,
    );
  }
  const send: typeof fetch = transport === 'http' ? globalThis.fetch : captureFetch(session);
  const onRequest = options.onRequest;
  return new OpenAI({
    baseURL: session.baseURL,
    apiKey: session.apiKey,
    maxRetries: 0,
    fetch: onRequest
      ? (input, init) => {
          onRequest(input instanceof Request ? input.url : String(input));
          return send(input, init);
        }
      : send,
  });
}

/** An Agents SDK `Model` whose every call is a turn of `session`: pass it as an `Agent`'s `model`. */
export function captureAgentsModel(session: CaptureSession, options: CaptureAgentsModelOptions = {}): Model {
  const api = options.api ?? 'chat-completions';
  if (!APIS.includes(api)) {
    throw new ConfigError(
      `captureAgentsModel: api ${JSON.stringify(api)} is not one of ${APIS.map((a) => `'${a}'`).join(', ')}; pass one of them or leave it out`,
    );
  }
  const client = sessionClient(session, options);
  const modelId = options.modelId ?? 'vime-policy';
  return api === 'responses'
    ? new OpenAIResponsesModel(client, modelId)
    : new OpenAIChatCompletionsModel(client, modelId);
}

/**
 * A `ModelProvider` for a `Runner` (`new Runner({ modelProvider })`): every agent of the run, whatever
 * model name it names, runs its turns in `session`.
 */
export function captureModelProvider(
  session: CaptureSession,
  options: CaptureAgentsModelOptions = {},
): ModelProvider {
  const model = captureAgentsModel(session, options);
  return { getModel: async () => model };
}
