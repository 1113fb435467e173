/** Shared harness of the capture-proxy tests: recording engines, stand-in setups, wire helpers. */
import { expect } from 'vitest';
import { qwen3 } from './tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { Engine, GenerateResult } from '../engine/types.js';
import { vllmEngine } from '../engine/vllm.js';
import { assertSampleInvariants, type Sample } from '../sample.js';
import { type StandInPolicy, startStandInEngine } from '../standin/engine.js';
import type { TemplateMessage, ToolDefinition } from '../engine/tokenizer/template.js';
import type { ChatTokenizer } from '../engine/tokenizer/tokenizer.js';
import type { DriftReport } from '../proxy/trajectory/manager.js';
import {
  type CaptureProxy,
  type CaptureProxyOptions,
  captureFetch,
  startCaptureProxy,
} from '../proxy/proxy.js';

/** Closers of what a test started; each test file drains them after each test (`closeAll`). */
export const closers: Array<() => Promise<void>> = [];
export async function closeAll(): Promise<void> {
  for (const c of closers.splice(0).reverse()) await c();
}

export interface Call {
  inputIds: Int32Array;
  result: GenerateResult;
}

/** An engine client that also keeps what the engine was sent and what it sampled. */
export function recording(engine: Engine): { engine: Engine; calls: Call[] } {
  const calls: Call[] = [];
  return {
    calls,
    engine: {
      ...engine,
      async generate(request, options) {
        const result = await engine.generate(request, options);
        calls.push({ inputIds: Int32Array.from(request.inputIds), result });
        return result;
      },
      ...(engine.generateStream
        ? {
            async generateStream(request, options) {
              const result = await engine.generateStream!(request, options);
              calls.push({ inputIds: Int32Array.from(request.inputIds), result });
              return result;
            },
          }
        : {}),
    },
  };
}

export async function setup(
  policy: StandInPolicy,
  opts: {
    service?: { tokensPerSecond?: number | undefined; slots?: number | undefined } | undefined;
    proxy?: Omit<CaptureProxyOptions, 'engine' | 'tokenizer'> | undefined;
    /** The engine client (default SGLang's). */
    engine?: 'sglang' | 'vllm' | undefined;
  } = {},
) {
  const tokenizer = await qwen3();
  const standIn = await startStandInEngine({
    tokenizer,
    policy,
    service: opts.service,
  });
  closers.push(() => standIn.close());
  const sg = opts.engine === 'vllm' ? vllmEngine(standIn.url) : sglangEngine(standIn.url);
  closers.push(() => sg.close());
  const rec = recording(sg);
  const proxy = await startCaptureProxy({ engine: rec.engine, tokenizer, ...opts.proxy });
  closers.push(() => proxy.close());
  const drift: DriftReport[] = [];
  proxy.trajectories.on('drift', (r) => drift.push(r));
  return { tokenizer, standIn, proxy, calls: rec.calls, drift };
}

/** A policy that plays a script: the n-th request gets the n-th text. */
export function script(...turns: Array<string | { ids: number[] }>): StandInPolicy {
  let i = 0;
  return () => turns[Math.min(i++, turns.length - 1)]!;
}

export const tools: ToolDefinition[] = [
  {
    type: 'function',
    function: {
      name: 'bash',
      description: 'Run a shell command',
      parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] },
    },
  },
];
export const anthropicTools = [
  { name: 'bash', description: 'Run a shell command', input_schema: tools[0]!.function.parameters },
];

export const TOOL_LOOP = [
  '<think>\nI should list the files.\n</think>\n\nLet me look.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>',
  '<think>\nRead a.py next.\n</think>\n\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "cat a.py"}}\n</tool_call>',
  '<think>\nThe fix is clear.\n</think>\n\nThe bug is in a.py: `return 1` should be `return 2`.',
];
export const OBSERVATIONS = ['a.py\nb.py', 'def f():\n    return 1\n'];

/**
 * The token-exactness check: rebuild the expected row from what the engine was sent and sampled, and
 * check every observation is exactly the tokenization of the newly rendered chat text.
 */
export function expectExactRow(sample: Sample, calls: Call[], tok: ChatTokenizer, rendered: string[]): void {
  assertSampleInvariants(sample);
  const tokens = Array.from(calls[0]!.inputIds);
  const promptLength = tokens.length;
  const mask: number[] = [];
  const logprobs: number[] = [];
  calls.forEach(({ inputIds, result }, k) => {
    if (k > 0) {
      expect(Array.from(inputIds.subarray(0, tokens.length))).toEqual(tokens);
      const observation = Array.from(inputIds.subarray(tokens.length));
      const before = tok.decode(tokens);
      expect(rendered[k]!.startsWith(before)).toBe(true);
      expect(Array.from(tok.encode(rendered[k]!.slice(before.length)))).toEqual(observation);
      tokens.push(...observation);
      mask.push(...observation.map(() => 0));
      logprobs.push(...observation.map(() => 0));
    } else {
      expect(Array.from(tok.encode(rendered[0]!))).toEqual(Array.from(inputIds));
    }
    tokens.push(...result.outputIds);
    mask.push(...result.outputIds.map(() => 1));
    logprobs.push(...result.logprobs);
  });
  expect(Array.from(sample.tokens)).toEqual(tokens);
  expect(sample.response_length).toBe(tokens.length - promptLength);
  expect(Array.from(sample.loss_mask!)).toEqual(mask);
  expect(Array.from(sample.rollout_log_probs!)).toEqual(Array.from(Float32Array.from(logprobs)));
}

/** Parse an SSE body into its `data:` payloads (and event names). */
export function sse(body: string): Array<{ event?: string | undefined; data: string }> {
  return body
    .split('\n\n')
    .filter((b) => b.trim())
    .map((block) => {
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)![1]!;
      return event ? { event, data } : { data };
    });
}

export async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, type: res.headers.get('content-type'), text: await res.text() };
}

/** Rebuild an OpenAI assistant message from a JSON answer or a stream of chunks. */
export function openaiMessage(text: string, stream: boolean): { message: Record<string, unknown>; finish: string } {
  if (!stream) {
    const json = JSON.parse(text);
    return { message: json.choices[0].message, finish: json.choices[0].finish_reason };
  }
  const events = sse(text);
  expect(events.at(-1)!.data).toBe('[DONE]');
  const message: Record<string, unknown> = { role: 'assistant', content: '' };
  let finish = '';
  for (const { data } of events.slice(0, -1)) {
    const chunk = JSON.parse(data);
    expect(chunk.object).toBe('chat.completion.chunk');
    const choice = chunk.choices[0];
    if (!choice) continue;
    const d = choice.delta;
    if (d.content) message.content = (message.content as string) + d.content;
    if (d.reasoning_content !== undefined)
      message.reasoning_content = ((message.reasoning_content as string | undefined) ?? '') + d.reasoning_content;
    if (d.tool_calls) {
      message.tool_calls ??= [];
      const calls = message.tool_calls as unknown[];
      for (const c of d.tool_calls) calls[c.index] = { id: c.id, type: c.type, function: c.function };
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { message, finish };
}

/** Rebuild an Anthropic message from JSON or from its event stream. */
export function anthropicMessage(
  text: string,
  stream: boolean,
): { content: Array<Record<string, unknown>>; stop: string } {
  if (!stream) {
    const json = JSON.parse(text);
    return { content: json.content, stop: json.stop_reason };
  }
  const content: Array<Record<string, unknown>> = [];
  let stop = '';
  const events = sse(text);
  expect(events[0]!.event).toBe('message_start');
  expect(events.at(-1)!.event).toBe('message_stop');
  for (const { event, data } of events) {
    const e = JSON.parse(data);
    expect(e.type).toBe(event);
    if (event === 'content_block_start') content[e.index] = { ...e.content_block };
    if (event === 'content_block_delta') {
      const block = content[e.index]!;
      if (e.delta.type === 'text_delta') block.text = (block.text as string) + e.delta.text;
      if (e.delta.type === 'thinking_delta') block.thinking = (block.thinking as string) + e.delta.thinking;
      if (e.delta.type === 'input_json_delta') block.input = JSON.parse(e.delta.partial_json);
    }
    if (event === 'message_delta') stop = e.delta.stop_reason;
  }
  return { content, stop };
}


/** The `bash` tool as Gemini API function declarations. */
export const geminiTools = [
  {
    functionDeclarations: [
      {
        name: 'bash',
        description: tools[0]!.function.description,
        parametersJsonSchema: tools[0]!.function.parameters,
      },
    ],
  },
];

/** A session's Gemini API turn URL: `generateContent`, or `streamGenerateContent?alt=sse`. */
export function geminiURL(baseURL: string, stream: boolean): string {
  const method = stream ? 'streamGenerateContent?alt=sse' : 'generateContent';
  return `${baseURL.replace(/\/v1$/, '')}/v1beta/models/vime-policy:${method}`;
}

/** A Gemini answer's parts, finish reason and usage, its SSE frames assembled as `@google/genai` does. */
export function geminiAnswer(
  text: string,
  stream: boolean,
): { parts: Array<Record<string, unknown>>; finish: string; usage: unknown } {
  type Answer = {
    candidates: Array<{ content?: { parts: Array<Record<string, unknown>> }; finishReason?: string }>;
    usageMetadata?: unknown;
  };
  const answers: Answer[] = stream
    ? sse(text).map(({ event, data }) => {
        expect(event).toBeUndefined();
        return JSON.parse(data) as Answer;
      })
    : [JSON.parse(text) as Answer];
  const parts = answers.flatMap((a) => a.candidates[0]!.content?.parts ?? []);
  const last = answers.at(-1)!;
  return { parts, finish: last.candidates[0]!.finishReason!, usage: last.usageMetadata };
}
