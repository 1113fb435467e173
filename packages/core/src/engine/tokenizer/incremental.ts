/**
 * Incremental output parsing for streamed answers: token ids become text deltas (`IncrementalDecoder`),
 * and text deltas become reasoning, content and tool-call deltas (`IncrementalParser`) for the built-in
 * `<think>` and Qwen3/Hermes `<tool_call>` parsers. A delta is only sent once no later text can change
 * it under the non-streamed rules (`parseResponse`): text that may start a tag, an open tool-call block
 * and trailing whitespace are held back. `finish` checks the result against the non-streamed parse and
 * sends what is left, so both are equal whenever the reasoning guess made at the start holds.
 */
import { type ParsedResponse, type ParsedToolCall, parseHermesCall } from './parsers.js';

/** A piece of streamed output: reasoning text, visible text or a finished tool call. */
export type StreamDelta =
  | { kind: 'reasoning'; text: string }
  | { kind: 'text'; text: string }
  | { kind: 'toolCall'; index: number; call: ParsedToolCall };

const THINK_OPEN = '<think>';
const THINK_CLOSE = '</think>';
const CALL_OPEN = '<tool_call>';
const CALL_CLOSE = '</tool_call>';
const CALL = /^<tool_call>\s*([\s\S]*?)\s*<\/tool_call>$/;

/** Length of the longest end of `text` that is a proper start of `tag` (text a later token may complete). */
function partialTag(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) {
    if (tag.startsWith(text.slice(text.length - n))) return n;
  }
  return 0;
}

/** Options of `IncrementalParser`. */
export interface IncrementalParserOptions {
  /** The prompt ends inside an open `<think>` (templates that open the reasoning block themselves). */
  reasoningOpen?: boolean | undefined;
}

/**
 * Splits streamed text into reasoning, visible text and tool calls as it arrives, as the whole-text parsers
 * would.
 */
export class IncrementalParser {
  #mode: 'start' | 'reasoning' | 'content';
  /** Text not yet assigned to a part. */
  #buffer = '';
  #reasoning = '';
  /** A reasoning part was opened (it may be empty: `<think>\n\n</think>`). */
  #hasReasoning = false;
  #reasoningHeld = '';
  #content = '';
  #contentHeld = '';
  /** Content right after `</think>`: its leading newlines are markup. */
  #afterThink = false;
  readonly #calls: ParsedToolCall[] = [];

  constructor(options: IncrementalParserOptions = {}) {
    this.#mode = options.reasoningOpen ? 'reasoning' : 'start';
  }

  /** Reasoning, content and tool calls sent so far. */
  get sent(): ParsedResponse {
    return {
      content: this.#content,
      reasoning: this.#hasReasoning ? this.#reasoning : undefined,
      toolCalls: [...this.#calls],
    };
  }

  /** The deltas that the new text completes, in order. */
  push(text: string): StreamDelta[] {
    this.#buffer += text;
    const out: StreamDelta[] = [];
    for (;;) {
      if (this.#mode === 'start') {
        if (THINK_OPEN.startsWith(this.#buffer)) return out;
        if (this.#buffer.startsWith(THINK_OPEN)) {
          this.#buffer = this.#buffer.slice(THINK_OPEN.length);
          this.#mode = 'reasoning';
        } else this.#mode = 'content';
      }
      if (this.#mode === 'reasoning') {
        const close = this.#buffer.indexOf(THINK_CLOSE);
        if (close < 0) {
          const keep = partialTag(this.#buffer, THINK_CLOSE);
          this.#addReasoning(this.#buffer.slice(0, this.#buffer.length - keep), out);
          this.#buffer = this.#buffer.slice(this.#buffer.length - keep);
          return out;
        }
        this.#addReasoning(this.#buffer.slice(0, close), out);
        // a closed block is reasoning even when empty, as the non-streamed parse has it
        if (!this.#hasReasoning) {
          this.#hasReasoning = true;
          out.push({ kind: 'reasoning', text: '' });
        }
        this.#buffer = this.#buffer.slice(close + THINK_CLOSE.length);
        this.#mode = 'content';
        this.#afterThink = true;
      }
      if (this.#afterThink) {
        this.#buffer = this.#buffer.replace(/^\n+/, '');
        if (this.#buffer === '') return out;
        this.#afterThink = false;
      }
      if (this.#buffer.startsWith(CALL_OPEN)) {
        const close = this.#buffer.indexOf(CALL_CLOSE);
        if (close < 0) return out;
        const block = this.#buffer.slice(0, close + CALL_CLOSE.length);
        this.#buffer = this.#buffer.slice(block.length);
        const call = parseHermesCall(CALL.exec(block)![1]!);
        if (call) {
          out.push({ kind: 'toolCall', index: this.#calls.length, call });
          this.#calls.push(call);
        } else this.#addContent(block, out);
        continue;
      }
      const open = this.#buffer.indexOf(CALL_OPEN);
      const end = open >= 0 ? open : this.#buffer.length - partialTag(this.#buffer, CALL_OPEN);
      this.#addContent(this.#buffer.slice(0, end), out);
      this.#buffer = this.#buffer.slice(end);
      if (open < 0) return out;
    }
  }

  /**
   * The deltas that complete the answer to `final`, the non-streamed parse of the whole text; `exact`
   * is false when what was already sent is not a prefix of it (then those parts are left as sent).
   */
  finish(final: ParsedResponse): { deltas: StreamDelta[]; exact: boolean } {
    const deltas: StreamDelta[] = [];
    let exact = true;
    const reasoning = final.reasoning;
    if (reasoning === undefined) exact = !this.#hasReasoning;
    else if (reasoning.startsWith(this.#reasoning)) {
      const rest = reasoning.slice(this.#reasoning.length);
      if (rest || !this.#hasReasoning) deltas.push({ kind: 'reasoning', text: rest });
      this.#reasoning = reasoning;
      this.#hasReasoning = true;
    } else exact = false;
    if (final.content.startsWith(this.#content)) {
      const rest = final.content.slice(this.#content.length);
      if (rest) deltas.push({ kind: 'text', text: rest });
      this.#content = final.content;
    } else exact = false;
    const sent = this.#calls.length;
    const same = this.#calls.every(
      (c, i) => c.name === final.toolCalls[i]?.name && c.arguments === final.toolCalls[i]?.arguments,
    );
    if (same && final.toolCalls.length >= sent) {
      final.toolCalls.slice(sent).forEach((call, i) => {
        deltas.push({ kind: 'toolCall', index: sent + i, call });
        this.#calls.push(call);
      });
    } else exact = false;
    this.#buffer = '';
    return { deltas, exact };
  }

  #addReasoning(text: string, out: StreamDelta[]): void {
    // `parseResponse` trims newlines at both ends of the reasoning
    let pending = this.#reasoningHeld + text;
    if (this.#reasoning === '') pending = pending.replace(/^\n+/, '');
    const body = pending.replace(/\n+$/, '');
    this.#reasoningHeld = pending.slice(body.length);
    if (body) {
      this.#reasoning += body;
      this.#hasReasoning = true;
      out.push({ kind: 'reasoning', text: body });
    }
  }

  #addContent(text: string, out: StreamDelta[]): void {
    // trailing whitespace goes when the answer has a tool call; it is sent once text follows it
    const pending = this.#contentHeld + text;
    const body = pending.replace(/\s+$/, '');
    this.#contentHeld = pending.slice(body.length);
    if (body) {
      this.#content += body;
      out.push({ kind: 'text', text: body });
    }
  }
}

/** Most tokens held back waiting for the rest of a UTF-8 character (a character is at most 4 bytes). */
const MAX_HELD = 8;

/**
 * Token ids to text deltas whose concatenation is the decode of all ids without the final stop token:
 * a token that ends mid-character waits for the next one, and a stop token waits to see if it is last.
 */
export class IncrementalDecoder {
  #held: number[] = [];
  constructor(private readonly tokenizer: { decode(ids: ArrayLike<number>): string; eosTokenId: number }) {}

  /** The text the new ids complete (possibly empty while a character or a stop token is held back). */
  push(ids: ArrayLike<number>): string {
    for (let i = 0; i < ids.length; i++) this.#held.push(ids[i]!);
    const last = this.#held.length - 1;
    const stop = last >= 0 && this.#held[last] === this.tokenizer.eosTokenId;
    const ready = stop ? this.#held.slice(0, last) : this.#held;
    if (ready.length === 0) return '';
    const text = this.tokenizer.decode(ready);
    if (text.endsWith('\uFFFD') && ready.length < MAX_HELD) return '';
    this.#held = stop ? [this.tokenizer.eosTokenId] : [];
    return text;
  }

  /** What is left at the end of the output (the final stop token is dropped). */
  end(): string {
    const held = this.#held;
    this.#held = [];
    const n =
      held.length > 0 && held[held.length - 1] === this.tokenizer.eosTokenId ? held.length - 1 : held.length;
    return n > 0 ? this.tokenizer.decode(held.slice(0, n)) : '';
  }
}
