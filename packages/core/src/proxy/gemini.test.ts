import { afterEach, describe, expect, it } from 'vitest';
import {
  closeAll,
  expectExactRow,
  geminiAnswer,
  geminiTools,
  OBSERVATIONS,
  post,
  script,
  setup,
  tools,
} from '../__fixtures__/proxy-harness.js';
import type { TemplateMessage } from '../engine/tokenizer/template.js';

afterEach(closeAll);

type Part = Record<string, unknown>;

/**
 * A tool loop without thoughts (Gemini CLI keeps no thought part in its history). The first call's
 * arguments are written without spaces, unlike the template's JSON: re-rendered from `args`, they would
 * differ from what was sampled.
 */
const LOOP = [
  'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"cmd":"ls"}}\n</tool_call>',
  '<tool_call>\n{"name": "bash", "arguments": {"cmd": "cat a.py"}}\n</tool_call>',
  'The bug is in a.py: `return 1` should be `return 2`.',
];
/** The argument text of each call as the model wrote it: what the history must render. */
const RAW_ARGS = ['{"cmd":"ls"}', '{"cmd": "cat a.py"}'];

/**
 * The model turn as Gemini CLI 0.61.0 keeps it in its history (geminiChat.ts): thought parts dropped,
 * adjacent text parts joined, each function call's id renamed `<name>__<id>`.
 */
function asHistory(parts: Part[]): Part[] {
  const out: Part[] = [];
  for (const part of parts) {
    if (part.thought) continue;
    const call = part.functionCall as { id: string; name: string; args: unknown } | undefined;
    if (call) {
      out.push({ functionCall: { ...call, id: `${call.name}__${call.id}` } });
      continue;
    }
    const last = out.at(-1);
    if (typeof last?.text === 'string' && last.text !== '' && typeof part.text === 'string')
      last.text += part.text;
    else out.push({ ...part });
  }
  return out;
}

describe('capture proxy: the Gemini API (generateContent)', () => {
  for (const stream of [false, true]) {
    it(`a Gemini CLI-style tool loop (${stream ? 'streamGenerateContent, SSE' : 'generateContent'}) packs into one exact row`, async () => {
      const { tokenizer, proxy, calls, drift } = await setup(script(...LOOP));
      const session = proxy.openSession(`gemini-${stream}`);
      const system = 'You are Gemini CLI.';
      const contents: Array<{ role: string; parts: Part[] }> = [
        {
          role: 'user',
          parts: [{ text: '<session_context>linux</session_context>' }, { text: 'Fix the test.' }],
        },
      ];
      const chat: TemplateMessage[] = [
        { role: 'system', content: system },
        { role: 'user', content: '<session_context>linux</session_context>\nFix the test.' },
      ];
      const rendered: string[] = [];
      const method = stream ? 'streamGenerateContent?alt=sse' : 'generateContent';
      for (let k = 0; k < 3; k++) {
        rendered.push(tokenizer.render(chat, { tools }));
        const res = await post(
          `${proxy.url}/v1beta/models/vime-policy:${method}`,
          {
            contents,
            systemInstruction: { role: 'user', parts: [{ text: system }] },
            tools: geminiTools,
            generationConfig: {
              temperature: 1,
              topP: 0.95,
              topK: 64,
              thinkingConfig: { includeThoughts: true },
            },
          },
          { 'x-goog-api-key': session.apiKey },
        );
        expect(res.status, res.text).toBe(200);
        expect(res.type).toBe(stream ? 'text/event-stream' : 'application/json');
        const { parts, finish, usage } = geminiAnswer(res.text, stream);
        expect(finish).toBe('STOP');
        expect(usage).toEqual({
          promptTokenCount: calls[k]!.inputIds.length,
          candidatesTokenCount: calls[k]!.result.outputIds.length,
          totalTokenCount: calls[k]!.inputIds.length + calls[k]!.result.outputIds.length,
        });
        const history = asHistory(parts);
        contents.push({ role: 'model', parts: history });
        const text = history
          .map((p) => p.text)
          .filter((t) => typeof t === 'string')
          .join('');
        const call = history.find((p) => p.functionCall)?.functionCall as
          | { id: string; name: string; args: Record<string, unknown> }
          | undefined;
        chat.push({
          role: 'assistant',
          content: text,
          ...(call
            ? { tool_calls: [{ type: 'function', function: { name: 'bash', arguments: RAW_ARGS[k]! } }] }
            : {}),
        });
        if (k < 2) {
          expect(call).toMatchObject({ name: 'bash', args: { cmd: k === 0 ? 'ls' : 'cat a.py' } });
          expect(call!.id).toMatch(/^bash__call_/);
          contents.push({
            role: 'user',
            parts: [
              { functionResponse: { id: call!.id, name: 'bash', response: { output: OBSERVATIONS[k] } } },
            ],
          });
          chat.push({ role: 'tool', content: OBSERVATIONS[k]! });
        } else {
          expect(call).toBeUndefined();
          expect(text).toBe(LOOP[2]);
        }
      }
      const samples = proxy.finishSession(session.id, { reward: 1 });
      expect(samples).toHaveLength(1);
      expectExactRow(samples[0]!, calls, tokenizer, rendered);
      expect(drift).toEqual([
        { sessionId: session.id, turns: 3, rows: 1, forks: 0, realigns: 0, retokenizedTokens: 0 },
      ]);
    });
  }

  it('answers a bad key, an unsupported part and an unknown method in the Gemini error shape', async () => {
    const { proxy, calls } = await setup(script('unused'));
    const session = proxy.openSession('gemini-errors');
    const url = `${proxy.url}/v1beta/models/vime-policy`;
    const body = { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] };
    const denied = await post(`${url}:generateContent`, body, { 'x-goog-api-key': 'not-a-key' });
    expect(denied.status).toBe(401);
    expect(JSON.parse(denied.text)).toMatchObject({ error: { code: 401, status: 'UNAUTHENTICATED' } });
    const image = {
      contents: [{ role: 'user', parts: [{ inlineData: { mimeType: 'image/png', data: '' } }] }],
    };
    const refused = await post(`${url}:generateContent`, image, { 'x-goog-api-key': session.apiKey });
    expect(refused.status).toBe(400);
    expect(JSON.parse(refused.text)).toMatchObject({ error: { code: 400, status: 'INVALID_ARGUMENT' } });
    expect(JSON.parse(refused.text).error.message).toMatch(/part "inlineData" is not supported/);
    const many = { ...body, generationConfig: { candidateCount: 2 } };
    const two = await post(`${url}:generateContent`, many, { 'x-goog-api-key': session.apiKey });
    expect(two.status).toBe(400);
    expect(JSON.parse(two.text).error.message).toMatch(/candidateCount=2/);
    const unknown = await post(`${url}:countTokens`, body, { 'x-goog-api-key': session.apiKey });
    expect(unknown.status).toBe(404);
    expect(calls).toHaveLength(0);
  });
});
