/**
 * A harness's conversation in one of the proxy's four dialects (the history it sends back each turn), and
 * the tool loop the proxy tests drive through it.
 */
import type { TemplateMessage } from '../engine/tokenizer/template.js';
import {
  anthropicMessage,
  anthropicTools,
  geminiAnswer,
  geminiTools,
  geminiURL,
  OBSERVATIONS,
  openaiMessage,
  post,
  sse,
  tools,
} from './proxy-harness.js';

export type Dialect = 'openai' | 'anthropic' | 'responses' | 'gemini';
export const DIALECTS: Dialect[] = ['openai', 'anthropic', 'responses', 'gemini'];

const responsesTools = [{ type: 'function', ...tools[0]!.function }];

export class DialectConversation {
  readonly #openai: TemplateMessage[];
  readonly #anthropic: Array<{ role: string; content: unknown }>;
  readonly #input: Array<Record<string, unknown>>;
  readonly #contents: Array<{ role: string; parts: Array<Record<string, unknown>> }>;
  /** Where the tool results sit in the history, to rewrite one (a fork). */
  readonly #observations: Array<() => Record<string, unknown>> = [];

  constructor(
    readonly dialect: Dialect,
    readonly baseURL: string,
    readonly apiKey: string,
    readonly stream: boolean,
    opening = 'Fix the failing test.',
  ) {
    this.#openai = [{ role: 'user', content: opening }];
    this.#anthropic = [{ role: 'user', content: opening }];
    this.#input = [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: opening }] }];
    this.#contents = [{ role: 'user', parts: [{ text: opening }] }];
  }

  /**
   * Send the history; keep the answer and, after a tool call, `observation` as its result. `kept` is false
   * when the answer was an error (a status, or an error event in a stream) and nothing was kept.
   */
  async turn(observation?: string): Promise<{ status: number; text: string; kept: boolean }> {
    try {
      return await this.#exchange(observation);
    } catch (error) {
      if (error instanceof Answered) return { ...error.res, kept: false };
      throw error;
    }
  }

  async #exchange(observation?: string): Promise<{ status: number; text: string; kept: boolean }> {
    const auth = { authorization: `Bearer ${this.apiKey}` };
    const { stream } = this;
    if (this.dialect === 'openai') {
      const res = await post(`${this.baseURL}/chat/completions`, { messages: this.#openai, tools, stream }, auth);
      failed(res);
      const { message } = openaiMessage(res.text, stream);
      this.#openai.push(message as unknown as TemplateMessage);
      const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
      if (call && observation !== undefined) {
        const m = { role: 'tool' as const, tool_call_id: call.id, content: observation };
        this.#openai.push(m);
        this.#observations.push(() => m as unknown as Record<string, unknown>);
      }
      return { ...res, kept: true };
    }
    if (this.dialect === 'anthropic') {
      const body = { max_tokens: 512, messages: this.#anthropic, tools: anthropicTools, stream };
      const res = await post(`${this.baseURL}/messages`, body, auth);
      failed(res);
      const { content } = anthropicMessage(res.text, stream);
      this.#anthropic.push({ role: 'assistant', content });
      const use = content.find((b) => b.type === 'tool_use');
      if (use && observation !== undefined) {
        const result = { type: 'tool_result', tool_use_id: use.id, content: observation };
        this.#anthropic.push({ role: 'user', content: [result] });
        this.#observations.push(() => result);
      }
      return { ...res, kept: true };
    }
    if (this.dialect === 'gemini') return this.#geminiExchange(observation);
    const body = { model: 'policy', input: this.#input, tools: responsesTools, store: false, stream };
    const res = await post(`${this.baseURL}/responses`, body, auth);
    failed(res);
    const response = stream
      ? sse(res.text)
          .map(({ data }) => JSON.parse(data))
          .at(-1).response
      : JSON.parse(res.text);
    const output = response.output as Array<Record<string, unknown>>;
    this.#input.push(...output.map(({ id: _id, status: _status, ...rest }) => rest));
    const call = output.find((o) => o.type === 'function_call');
    if (call && observation !== undefined) {
      const item = { type: 'function_call_output', call_id: call.call_id, output: observation };
      this.#input.push(item);
      this.#observations.push(() => item);
    }
    return { ...res, kept: true };
  }

  /**
   * A Gemini API turn (`generateContent`, or `streamGenerateContent?alt=sse`), the model's parts kept as
   * answered (thought parts included) and a tool result sent as a `functionResponse` with `output`.
   */
  async #geminiExchange(observation?: string): Promise<{ status: number; text: string; kept: boolean }> {
    const body = { contents: this.#contents, tools: geminiTools };
    const res = await post(geminiURL(this.baseURL, this.stream), body, { 'x-goog-api-key': this.apiKey });
    failed(res);
    const { parts } = geminiAnswer(res.text, this.stream);
    this.#contents.push({ role: 'model', parts });
    const call = parts.find((p) => p.functionCall)?.functionCall as { id: string; name: string } | undefined;
    if (call && observation !== undefined) {
      const response = { output: observation };
      const part = { functionResponse: { id: call.id, name: call.name, response } };
      this.#contents.push({ role: 'user', parts: [part] });
      this.#observations.push(() => response);
    }
    return { ...res, kept: true };
  }

  /** A compaction: the whole history becomes one user message, so the next prompt extends no earlier one. */
  compact(summary: string): void {
    this.#openai.splice(0, Infinity, { role: 'user', content: summary });
    this.#anthropic.splice(0, Infinity, { role: 'user', content: summary });
    this.#input.splice(0, Infinity, { type: 'message', role: 'user', content: [{ type: 'input_text', text: summary }] });
    this.#contents.splice(0, Infinity, { role: 'user', parts: [{ text: summary }] });
    this.#observations.length = 0;
  }

  /** Rewrite the `index`-th tool result in place, as a client that edits its history does. */
  editObservation(index: number, text: string): void {
    const item = this.#observations[index]!();
    if (this.dialect === 'responses' || this.dialect === 'gemini') item.output = text;
    else item.content = text;
  }
}

/**
 * Drive `turns` turns of a tool loop through `dialect`, each answer's tool call followed by the next
 * observation (compacted before turn `compactAt`); the HTTP statuses, stopping at the first error answer,
 * whose body is `error`.
 */
export async function toolLoop(
  dialect: Dialect,
  session: { baseURL: string; apiKey: string },
  stream: boolean,
  options: { turns?: number | undefined; compactAt?: number | undefined } = {},
): Promise<{ statuses: number[]; error?: string | undefined }> {
  const conversation = new DialectConversation(dialect, session.baseURL, session.apiKey, stream);
  const statuses: number[] = [];
  for (let k = 0; k < (options.turns ?? 3); k++) {
    if (k === options.compactAt)
      conversation.compact('Summary of the work so far: a.py returns 1, the test wants 2. Continue.');
    const res = await conversation.turn(OBSERVATIONS[k] ?? 'ok');
    statuses.push(res.status);
    if (!res.kept) return { statuses, error: res.text };
  }
  return { statuses };
}

/** An answer that is an error: a status other than 200, or a stream that ends in an error event. */
class Answered extends Error {
  constructor(readonly res: { status: number; text: string }) {
    super(`answered ${res.status}`);
  }
}

function failed(res: { status: number; text: string }): void {
  const streamed = res.text.startsWith('event:') || res.text.startsWith('data:');
  const streamedError = streamed && sse(res.text).some(({ event, data }) => event === 'error' || isError(data));
  if (res.status !== 200 || streamedError) throw new Answered(res);
}

function isError(data: string): boolean {
  if (data === '[DONE]') return false;
  const value = JSON.parse(data) as { type?: unknown; error?: unknown };
  // An error event (OpenAI, Anthropic) or the Responses API's `response.failed`.
  if (value.type === 'error' || value.type === 'response.failed') return true;
  return typeof value.error === 'object' && value.error !== null;
}
