/**
 * A streamed turn: the engine's tokens go out as SSE while they are generated. Tokens become text
 * (`IncrementalDecoder`), text becomes reasoning / content / tool-call deltas (`IncrementalParser`), and
 * the dialect's `StreamEncoder` writes them. The head is sent with the first token, so a turn that fails
 * before any token is an ordinary error status the client's SDK can retry; after it, a failure is an
 * error event. The turn is captured by the same path as a non-streamed one, so the tokens are the same.
 */

import { IncrementalDecoder, IncrementalParser } from '../engine/tokenizer/incremental.js';
import type { ChatTokenizer } from '../engine/tokenizer/tokenizer.js';
import type { TokenChunk } from '../engine/types.js';
import { EngineError } from '../errors.js';
import { type Dialect, RequestError, type TurnReply } from './dialects.js';
import type { StreamEncoder, StreamMeta } from './sse.js';

/** What the turn machinery tells a streamed answer. */
export interface LiveTurn {
  /** The turn has its ids: called once, before any token. */
  begin(info: { rid: string; id: string; model: string; promptIds: Int32Array }): void;
  /** New output tokens (on any engine, continuations included), in order. */
  tokens(chunk: TokenChunk): void;
}

export interface StreamTurnOptions<R extends TurnReply> {
  dialect: Dialect;
  /** The request's wire: an encoder for the turn's answer. */
  encoder: (meta: StreamMeta) => StreamEncoder;
  tokenizer: ChatTokenizer;
  /** Runs the turn, calling `live` as it goes; resolves with the reply the non-streamed path would send. */
  run: (live: LiveTurn) => Promise<R>;
  /** The streamed parse could not match the final one (the opening reasoning guess was wrong). */
  onInexact?: ((reason: string) => void) | undefined;
  /**
   * The turn succeeded and its whole SSE text was read from the stream (called before the stream says
   * it is done). Not called for a turn that failed, nor for a stream its reader left early.
   */
  onComplete?: ((sse: string, reply: R) => void) | undefined;
}

/**
 * Start a streamed turn. Resolves with the SSE text as an async iterable once the first token is out
 * (or the turn ended); rejects with the turn's error when it failed before sending anything.
 */
export function streamTurn<R extends TurnReply>(
  options: StreamTurnOptions<R>,
): Promise<AsyncIterable<string>> {
  const { tokenizer } = options;
  let done: R | undefined;
  const channel = new Channel((sse) => {
    if (done) options.onComplete?.(sse, done);
  });
  let encoder: StreamEncoder | undefined;
  let decoder: IncrementalDecoder | undefined;
  let parser: IncrementalParser | undefined;
  let rid = '';
  let started = false;
  return new Promise((resolve, reject) => {
    const startOnce = () => {
      if (started) return;
      started = true;
      channel.push(encoder!.start());
      resolve(channel);
    };
    const send = (deltas: ReturnType<IncrementalParser['push']>) => {
      for (const d of deltas) {
        if (d.kind === 'reasoning') channel.push(encoder!.reasoningDelta(d.text));
        else if (d.kind === 'text') channel.push(encoder!.textDelta(d.text));
        else {
          const id = `${options.dialect === 'anthropic' ? 'toolu' : 'call'}_${rid}_${d.index}`;
          channel.push(encoder!.toolCall({ id, name: d.call.name, arguments: d.call.arguments }, d.index));
        }
      }
    };
    const live: LiveTurn = {
      begin(info) {
        rid = info.rid;
        encoder = options.encoder({ id: info.id, model: info.model, promptTokens: info.promptIds.length });
        decoder = new IncrementalDecoder(tokenizer);
        parser = new IncrementalParser({ reasoningOpen: opensReasoning(tokenizer, info.promptIds) });
      },
      tokens(chunk) {
        startOnce();
        send(parser!.push(decoder!.push(chunk.outputIds)));
      },
    };
    options.run(live).then(
      (reply) => {
        startOnce();
        send(parser!.push(decoder!.end()));
        const { deltas, exact } = parser!.finish(reply.parsed);
        send(deltas);
        const streamedIds = reply.parsed.toolCalls.map(
          (_, i) => `${options.dialect === 'anthropic' ? 'toolu' : 'call'}_${rid}_${i}`,
        );
        if (!exact) options.onInexact?.('the streamed reasoning/content split differs from the final parse');
        else if (streamedIds.some((id, i) => id !== reply.toolCallIds[i]))
          options.onInexact?.('streamed tool-call ids differ from the recorded ones');
        channel.push(encoder!.finish(reply));
        done = reply;
        channel.end();
      },
      (error: unknown) => {
        if (!started) return reject(error);
        // a request error keeps its status (409: the session was finished during the turn)
        const status =
          error instanceof RequestError
            ? error.status
            : error instanceof EngineError
              ? error.isRetryable
                ? 503
                : 502
              : 500;
        channel.push(encoder!.error(status, (error as Error).message));
        channel.end();
      },
    );
  });
}

/** Whether the rendered prompt ends inside an open `<think>` (the template opened the reasoning block). */
function opensReasoning(tokenizer: ChatTokenizer, promptIds: Int32Array): boolean {
  const tail = tokenizer.decode(promptIds.subarray(Math.max(0, promptIds.length - 8)));
  const open = tail.lastIndexOf('<think>');
  return open >= 0 && open > tail.lastIndexOf('</think>') && tail.slice(open + 7).trim() === '';
}

/**
 * A one-reader queue of strings, read as an async iterable; `end` finishes it. `drained` gets all the
 * text once the reader has taken the last of it.
 */
class Channel implements AsyncIterable<string> {
  #items: string[] = [];
  #sent: string[] = [];
  #ended = false;
  #wake: (() => void) | undefined;

  constructor(private readonly drained: (all: string) => void) {}

  push(item: string): void {
    if (this.#ended || item === '') return;
    this.#items.push(item);
    this.#wake?.();
  }

  end(): void {
    this.#ended = true;
    this.#wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<string> {
    for (;;) {
      if (this.#items.length > 0) {
        // everything queued goes out as one write
        const out = this.#items.join('');
        this.#items = [];
        this.#sent.push(out);
        yield out;
        continue;
      }
      if (this.#ended) return this.drained(this.#sent.join(''));
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
      this.#wake = undefined;
    }
  }
}
