/** Three-turn tool loops through each of the capture proxy's four dialects, as a harness drives them. */
import { expect } from 'vitest';
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

export type DialectName = 'openai' | 'anthropic' | 'responses' | 'gemini';
export const DIALECTS: DialectName[] = ['openai', 'anthropic', 'responses', 'gemini'];

type Item = Record<string, unknown> & { type: string };

/** The final `response` of a Responses answer (JSON, or the `response.completed` event of a stream). */
function responseOutput(text: string, stream: boolean): Item[] {
  if (!stream) return JSON.parse(text).output;
  const last = JSON.parse(sse(text).at(-1)!.data);
  expect(last.type).toBe('response.completed');
  return last.response.output;
}

/**
 * Drive `turns` turns of a tool loop through `dialect`, each answer's tool call followed by the next
 * observation; the HTTP statuses (stops at the first failure) and the last error body.
 */
export async function toolLoop(
  dialect: DialectName,
  session: { baseURL: string; apiKey: string },
  stream: boolean,
  options: { turns?: number | undefined; compactAt?: number | undefined } = {},
): Promise<{ statuses: number[]; error?: string | undefined }> {
  const turns = options.turns ?? 3;
  const auth = { authorization: `Bearer ${session.apiKey}` };
  const statuses: number[] = [];
  const openai: TemplateMessage[] = [{ role: 'user', content: 'Fix the failing test.' }];
  const anthropic: Array<{ role: string; content: unknown }> = [{ role: 'user', content: 'Fix the failing test.' }];
  const input: Item[] = [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Fix the failing test.' }] }];
  const contents: Array<{ role: string; parts: Array<Record<string, unknown>> }> = [
    { role: 'user', parts: [{ text: 'Fix the failing test.' }] },
  ];
  for (let k = 0; k < turns; k++) {
    if (k === options.compactAt) {
      // a compaction: the history is replaced by a summary, so this prompt extends no earlier one
      const summary = 'Summary of the work so far: a.py returns 1, the test wants 2. Continue.';
      openai.splice(0, openai.length, { role: 'user', content: summary });
      anthropic.splice(0, anthropic.length, { role: 'user', content: summary });
      input.splice(0, input.length, { type: 'message', role: 'user', content: [{ type: 'input_text', text: summary }] });
      contents.splice(0, contents.length, { role: 'user', parts: [{ text: summary }] });
    }
    const res =
      dialect === 'gemini'
        ? await post(
            geminiURL(session.baseURL, stream),
            { contents, tools: geminiTools },
            { 'x-goog-api-key': session.apiKey },
          )
        : dialect === 'openai'
        ? await post(`${session.baseURL}/chat/completions`, { messages: openai, tools, stream }, auth)
        : dialect === 'anthropic'
          ? await post(
              `${session.baseURL}/messages`,
              { max_tokens: 512, messages: anthropic, tools: anthropicTools, stream },
              auth,
            )
          : await post(
              `${session.baseURL}/responses`,
              { model: 'm', input, tools: [{ type: 'function', ...tools[0]!.function }], store: false, stream },
              auth,
            );
    statuses.push(res.status);
    if (res.status !== 200) return { statuses, error: res.text };
    // a streamed answer that had begun ends with an error event instead
    const failed = stream
      ? sse(res.text).find((e) => e.event === 'error' || e.event === 'response.failed' || e.data.startsWith('{"error"'))
      : undefined;
    if (failed) return { statuses, error: failed.data };
    const observation = OBSERVATIONS[k] ?? 'ok';
    if (dialect === 'openai') {
      const { message } = openaiMessage(res.text, stream);
      openai.push(message as unknown as TemplateMessage);
      const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
      if (call) openai.push({ role: 'tool', tool_call_id: call.id, content: observation });
    } else if (dialect === 'anthropic') {
      const { content } = anthropicMessage(res.text, stream);
      anthropic.push({ role: 'assistant', content });
      const use = content.find((b) => b.type === 'tool_use');
      if (use) {
        anthropic.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: observation }] });
      }
    } else if (dialect === 'gemini') {
      // the model's parts kept as answered, thought parts included
      const { parts } = geminiAnswer(res.text, stream);
      contents.push({ role: 'model', parts });
      const call = parts.find((p) => p.functionCall)?.functionCall as { id: string; name: string } | undefined;
      if (call) {
        const response = { output: observation };
        contents.push({ role: 'user', parts: [{ functionResponse: { id: call.id, name: call.name, response } }] });
      }
    } else {
      const output = responseOutput(res.text, stream);
      input.push(...output.map(({ id: _id, status: _status, ...rest }) => rest as Item));
      const call = output.find((o) => o.type === 'function_call');
      if (call) input.push({ type: 'function_call_output', call_id: call.call_id, output: observation });
    }
  }
  return { statuses };
}
