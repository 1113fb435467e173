import { describe, expect, it } from 'vitest';
import type { TurnReply } from './dialects.js';
import type { ResponsesEcho } from './responses.js';
import { responsesEncoder, responsesEvents, responsesJson } from './responses-output.js';
import { anthropicEncoder, openaiEncoder, playTurn, type StreamEncoder } from './sse.js';

const reply: TurnReply = {
  id: 'chatcmpl-turn-1',
  model: 'policy',
  parsed: {
    reasoning: 'Look first.',
    content: 'Let me look.',
    toolCalls: [{ name: 'bash', arguments: '{"cmd": "ls"}' }],
  },
  toolCallIds: ['call_turn-1_0'],
  finishReason: 'stop',
  promptTokens: 12,
  outputTokens: 30,
};

/** The reply written through an encoder, a piece per token-sized delta. */
function encode(encoder: StreamEncoder, r: TurnReply): string {
  let out = encoder.start();
  for (const piece of r.parsed.reasoning!.split(/(?<= )/)) out += encoder.reasoningDelta(piece);
  for (const piece of r.parsed.content.split(/(?<= )/)) out += encoder.textDelta(piece);
  r.parsed.toolCalls.forEach((c, i) => {
    out += encoder.toolCall({ id: r.toolCallIds[i]!, name: c.name, arguments: c.arguments }, i);
  });
  return out + encoder.finish(r);
}

const noCreated = (s: string) => s.replace(/"created":\d+/g, '"created":0');
interface WireEvent {
  type?: string;
  index?: number;
  delta?: Record<string, string>;
  choices?: Array<{ delta?: Record<string, string> }>;
  done?: boolean;
}

/** Merge consecutive delta events of one kind, to compare with a writer that sends each part whole. */
function merged(sse: string): WireEvent[] {
  const out: WireEvent[] = [];
  for (const block of sse.split('\n\n').filter(Boolean)) {
    const data = /^data: (.*)$/m.exec(block)![1]!;
    if (data === '[DONE]') {
      out.push({ done: true });
      continue;
    }
    const e = JSON.parse(data) as WireEvent;
    const prev = out.at(-1);
    const d = e.choices?.[0]?.delta;
    const pd = prev?.choices?.[0]?.delta;
    if (d?.content && pd?.content && !pd.tool_calls) pd.content += d.content;
    else if (
      e.type === 'content_block_delta' &&
      prev?.type === 'content_block_delta' &&
      prev.index === e.index
    ) {
      const key = e.delta!.type === 'text_delta' ? 'text' : 'thinking';
      prev.delta![key] = prev.delta![key]! + e.delta![key]!;
    } else out.push(e);
  }
  return out;
}

describe('StreamEncoder: the same events as a finished answer played whole, split into deltas', () => {
  it('OpenAI chat: role, reasoning (whole), content deltas, tool call, finish, usage, [DONE]', () => {
    const streamed = noCreated(encode(openaiEncoder(reply, { includeUsage: true }), reply));
    const whole = playTurn(openaiEncoder(reply, { includeUsage: true }), reply);
    expect(merged(streamed)).toEqual(merged(noCreated(whole)));
    expect(merged(streamed).at(-2)).toMatchObject({ usage: { prompt_tokens: 12, completion_tokens: 30 } });
    // the content went out token by token
    expect(streamed.match(/"content":"[^"]/g)!.length).toBe(3);
  });

  it('Anthropic: thinking and text blocks with their deltas, a tool_use block, message_delta, message_stop', () => {
    const streamed = encode(anthropicEncoder(reply), reply);
    expect(merged(streamed)).toEqual(merged(playTurn(anthropicEncoder(reply), reply)));
    expect(merged(streamed).map((e) => e.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(streamed.match(/"thinking_delta"/g)!.length).toBe(2);
  });

  it('error events in each dialect', () => {
    expect(JSON.parse(openaiEncoder(reply, { includeUsage: false }).error(503, 'down').slice(6))).toEqual({
      error: { message: 'down', type: 'server_error', code: 503 },
    });
    expect(anthropicEncoder(reply).error(503, 'down')).toBe(
      `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'api_error', message: 'down' } })}\n\n`,
    );
  });

  it('Responses API: items open and close as the deltas come; response.completed carries the JSON answer', () => {
    const echo: ResponsesEcho = {
      instructions: null,
      maxOutputTokens: null,
      temperature: null,
      topP: null,
      toolChoice: 'auto',
      parallelToolCalls: true,
      reasoningEffort: null,
      tools: [],
    };
    const tools = new Map();
    const streamed = encode(responsesEncoder(responsesEvents(reply, echo), tools), reply);
    const events = streamed
      .split('\n\n')
      .filter(Boolean)
      .map((b) => JSON.parse(/^data: (.*)$/m.exec(b)![1]!));
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.filter((e) => e.type === 'response.reasoning_text.delta')).toHaveLength(2);
    expect(events.filter((e) => e.type === 'response.output_text.delta')).toHaveLength(3);
    const done = events.filter((e) => e.type === 'response.output_item.done').map((e) => e.item);
    const last = events.at(-1)!;
    expect(last.type).toBe('response.completed');
    expect(done).toEqual(last.response.output);
    const json = responsesJson(reply, tools, echo) as { output: unknown[] };
    expect(last.response.output).toEqual(json.output);
    expect(done.map((i: { type: string }) => i.type)).toEqual(['reasoning', 'message', 'function_call']);
    const failed = JSON.parse(
      /^data: (.*)$/m.exec(responsesEncoder(responsesEvents(reply, echo), tools).error(503, 'down'))![1]!,
    );
    expect(failed).toMatchObject({
      type: 'response.failed',
      response: { status: 'failed', error: { code: 'server_error', message: 'down' } },
    });
  });
});
