/**
 * A generated turn on the Responses wire: the `response` object (JSON answers) and the SSE event
 * stream, built from event builders (`begin`, `reasoning*`, `message*`, `toolCall`, `end`) that the
 * Responses `StreamEncoder` drives token by token. Each event carries a `sequence_number`; items carry ids.
 */
import type { ParsedToolCall } from '../engine/tokenizer/parsers.js';
import type { TurnReply } from './dialects.js';
import type { ResponsesEcho, ResponsesTool } from './responses.js';
import { playTurn, type StreamEncoder, type StreamMeta } from './sse.js';

type Item = Record<string, unknown>;

export interface ResponsesUsage {
  inputTokens: number;
  outputTokens: number;
}

/** Builds one response's SSE events, in the order the Responses API sends them. */
export class ResponsesEvents {
  #seq = 0;
  readonly #output: Item[] = [];
  readonly #created = Math.floor(Date.now() / 1000);
  #open: { item: Item; index: number; text: string } | undefined;

  constructor(
    readonly id: string,
    readonly model: string,
    readonly echo: ResponsesEcho,
  ) {}

  #event(type: string, data: Record<string, unknown>): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.#seq++, ...data })}\n\n`;
  }

  /** The `response` object as it stands (`status` and `usage` given at the end). */
  response(
    status: 'in_progress' | 'completed' | 'incomplete' | 'failed',
    usage?: ResponsesUsage,
    reason?: string,
  ): Record<string, unknown> {
    const e = this.echo;
    return {
      id: this.id,
      object: 'response',
      created_at: this.#created,
      status,
      background: false,
      error: null,
      incomplete_details: status === 'incomplete' ? { reason } : null,
      instructions: e.instructions,
      max_output_tokens: e.maxOutputTokens,
      model: this.model,
      output: status === 'in_progress' || status === 'failed' ? [] : structuredClone(this.#output),
      parallel_tool_calls: e.parallelToolCalls,
      previous_response_id: null,
      reasoning: { effort: e.reasoningEffort, summary: null },
      store: false,
      temperature: e.temperature,
      text: { format: { type: 'text' } },
      tool_choice: e.toolChoice,
      tools: e.tools,
      top_p: e.topP,
      truncation: 'disabled',
      usage: usage
        ? {
            input_tokens: usage.inputTokens,
            input_tokens_details: { cached_tokens: 0 },
            output_tokens: usage.outputTokens,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: usage.inputTokens + usage.outputTokens,
          }
        : null,
      metadata: {},
    };
  }

  begin(): string {
    const r = this.response('in_progress');
    return (
      this.#event('response.created', { response: r }) + this.#event('response.in_progress', { response: r })
    );
  }

  #add(item: Item): string {
    this.#open = { item, index: this.#output.length, text: '' };
    this.#output.push(item);
    return this.#event('response.output_item.added', {
      output_index: this.#open.index,
      item: structuredClone(item),
    });
  }

  #done(): string {
    const open = this.#open!;
    this.#open = undefined;
    return this.#event('response.output_item.done', {
      output_index: open.index,
      item: structuredClone(open.item),
    });
  }

  reasoningStart(): string {
    const id = `rs_${this.id.slice(5)}_${this.#output.length}`;
    let out = this.#add({ id, type: 'reasoning', summary: [], content: [] });
    out += this.#event('response.content_part.added', {
      item_id: id,
      output_index: this.#open!.index,
      content_index: 0,
      part: { type: 'reasoning_text', text: '' },
    });
    return out;
  }

  reasoningDelta(delta: string): string {
    const open = this.#open!;
    open.text += delta;
    return this.#event('response.reasoning_text.delta', {
      item_id: open.item.id,
      output_index: open.index,
      content_index: 0,
      delta,
    });
  }

  reasoningEnd(): string {
    const open = this.#open!;
    const part = { type: 'reasoning_text', text: open.text };
    open.item.content = [part];
    const ids = { item_id: open.item.id, output_index: open.index, content_index: 0 };
    return (
      this.#event('response.reasoning_text.done', { ...ids, text: open.text }) +
      this.#event('response.content_part.done', { ...ids, part }) +
      this.#done()
    );
  }

  messageStart(): string {
    const id = `msg_${this.id.slice(5)}_${this.#output.length}`;
    let out = this.#add({ id, type: 'message', status: 'in_progress', role: 'assistant', content: [] });
    out += this.#event('response.content_part.added', {
      item_id: id,
      output_index: this.#open!.index,
      content_index: 0,
      part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
    });
    return out;
  }

  textDelta(delta: string): string {
    const open = this.#open!;
    open.text += delta;
    return this.#event('response.output_text.delta', {
      item_id: open.item.id,
      output_index: open.index,
      content_index: 0,
      delta,
      logprobs: [],
    });
  }

  messageEnd(): string {
    const open = this.#open!;
    const part = { type: 'output_text', text: open.text, annotations: [], logprobs: [] };
    open.item.content = [part];
    open.item.status = 'completed';
    const ids = { item_id: open.item.id, output_index: open.index, content_index: 0 };
    return (
      this.#event('response.output_text.done', { ...ids, text: open.text, logprobs: [] }) +
      this.#event('response.content_part.done', { ...ids, part }) +
      this.#done()
    );
  }

  /** A whole tool call: a `function_call` (namespaced or not) or a `custom_tool_call` for a freeform tool. */
  toolCall(callId: string, call: ParsedToolCall, tool: ResponsesTool | undefined): string {
    const item = toolCallItem(`${this.id.slice(5)}_${this.#output.length}`, callId, call, tool);
    const custom = item.type === 'custom_tool_call';
    const text = (custom ? item.input : item.arguments) as string;
    let out = this.#add({ ...item, status: 'in_progress', ...(custom ? { input: '' } : { arguments: '' }) });
    const ids = { item_id: item.id, output_index: this.#open!.index };
    if (custom) {
      out += this.#event('response.custom_tool_call_input.delta', { ...ids, delta: text });
      out += this.#event('response.custom_tool_call_input.done', { ...ids, input: text });
    } else {
      out += this.#event('response.function_call_arguments.delta', { ...ids, delta: text });
      out += this.#event('response.function_call_arguments.done', {
        ...ids,
        name: item.name,
        arguments: text,
      });
    }
    this.#open!.item = item;
    this.#output[this.#open!.index] = item;
    return out + this.#done();
  }

  /** `response.failed`: the turn failed after the stream started (5xx engine trouble, 4xx the request). */
  failed(status: number, message: string): string {
    const code = status >= 500 ? 'server_error' : 'invalid_request';
    const response = { ...this.response('failed'), error: { code, message } };
    return this.#event('response.failed', { response });
  }

  /** `response.completed`, or `response.incomplete` when the turn hit its token cap. */
  end(finishReason: TurnReply['finishReason'], usage: ResponsesUsage): string {
    if (finishReason === 'stop') {
      return this.#event('response.completed', { response: this.response('completed', usage) });
    }
    const reason = finishReason === 'length' ? 'max_output_tokens' : 'interrupted';
    return this.#event('response.incomplete', { response: this.response('incomplete', usage, reason) });
  }
}

function toolCallItem(
  suffix: string,
  callId: string,
  call: ParsedToolCall,
  tool: ResponsesTool | undefined,
): Item {
  if (tool?.kind === 'custom') {
    return {
      id: `ctc_${suffix}`,
      type: 'custom_tool_call',
      status: 'completed',
      call_id: callId,
      name: tool.name,
      input: customInput(call.arguments),
    };
  }
  return {
    id: `fc_${suffix}`,
    type: 'function_call',
    status: 'completed',
    call_id: callId,
    name: tool?.name ?? call.name,
    ...(tool?.namespace !== undefined ? { namespace: tool.namespace } : {}),
    arguments: call.arguments,
  };
}

/** A freeform tool's raw input: the model's `input` argument, or its whole argument text when it sent none. */
function customInput(args: string): string {
  try {
    const value = JSON.parse(args) as unknown;
    if (value && typeof value === 'object' && typeof (value as { input?: unknown }).input === 'string') {
      return (value as { input: string }).input;
    }
  } catch {
    // not JSON: the model wrote the raw input itself
  }
  return args;
}

/**
 * The Responses API's `StreamEncoder`: reasoning and text deltas open (and close) their output items
 * as they come; an answer with no text and no tool call still gets its (empty) message item.
 */
export function responsesEncoder(events: ResponsesEvents, tools: Map<string, ResponsesTool>): StreamEncoder {
  let open: 'reasoning' | 'message' | undefined;
  let message = false;
  const close = () => {
    const out = open === 'reasoning' ? events.reasoningEnd() : open === 'message' ? events.messageEnd() : '';
    open = undefined;
    return out;
  };
  const into = (kind: 'reasoning' | 'message') => {
    if (open === kind) return '';
    const out = close();
    open = kind;
    if (kind === 'message') message = true;
    return out + (kind === 'reasoning' ? events.reasoningStart() : events.messageStart());
  };
  return {
    start: () => events.begin(),
    reasoningDelta: (text) => into('reasoning') + events.reasoningDelta(text),
    textDelta: (text) => into('message') + events.textDelta(text),
    toolCall: (call) => close() + events.toolCall(call.id, call, tools.get(call.name)),
    finish(r) {
      let out = close();
      if (!message && r.parsed.toolCalls.length === 0) out += events.messageStart() + events.messageEnd();
      return out + events.end(r.finishReason, { inputTokens: r.promptTokens, outputTokens: r.outputTokens });
    },
    error: (status, text) => events.failed(status, text),
  };
}

/** The builders of a turn's response (its id is the turn's, `resp_` for `chatcmpl-`). */
export function responsesEvents(meta: StreamMeta, echo: ResponsesEcho): ResponsesEvents {
  return new ResponsesEvents(`resp_${meta.id.replace(/^chatcmpl-/, '')}`, meta.model, echo);
}

export function responsesJson(r: TurnReply, tools: Map<string, ResponsesTool>, echo: ResponsesEcho): unknown {
  const events = responsesEvents(r, echo);
  playTurn(responsesEncoder(events, tools), r);
  const usage = { inputTokens: r.promptTokens, outputTokens: r.outputTokens };
  if (r.finishReason === 'stop') return events.response('completed', usage);
  return events.response(
    'incomplete',
    usage,
    r.finishReason === 'length' ? 'max_output_tokens' : 'interrupted',
  );
}
