/**
 * The stand-in engine's streamed answers: tokens leave as the service model decodes them (at its
 * configured speed), on SGLang's `/generate` stream wire (cumulative chunks, or incremental ones as
 * with `--incremental-streaming-output`) and vLLM's `/v1/completions` stream wire.
 */
import type { ServerResponse } from 'node:http';
import type { Job, Scheduler } from './scheduler.js';
import { sglangTopRows } from './topk.js';

export interface TokenFeed {
  /** Send what is left up to `n` tokens (the request finished with `n`) and stop. */
  end(n: number): void;
  stop(): void;
}

/** Polls the job's progress and hands on each newly decoded run of tokens with its log probs. */
export function tokenFeed(
  scheduler: Scheduler,
  job: Job,
  ids: Int32Array,
  position: number,
  emit: (ids: Int32Array, logprobs: Float32Array, total: number) => void,
  logprob: (position: number, id: number) => number,
): TokenFeed {
  let sent = 0;
  const send = (upTo: number) => {
    // one chunk per token, as SGLang streams with its default `stream_interval` of 1
    const n = Math.min(upTo, ids.length);
    for (; sent < n; sent++) {
      emit(ids.slice(sent, sent + 1), Float32Array.of(logprob(position + sent, ids[sent]!)), ids.length);
    }
  };
  // a poll per token at the request's own speed, between 1 ms and 20 ms
  const rate = Math.min(scheduler.perRequest, scheduler.tokensPerSecond);
  const every = Math.min(20, Math.max(1, 1000 / rate));
  const timer = Number.isFinite(rate)
    ? setInterval(() => {
        scheduler.tick();
        send(Math.floor(job.done + 1e-6));
      }, every)
    : undefined;
  const stop = () => {
    if (timer) clearInterval(timer);
  };
  return {
    end(n) {
      stop();
      send(n);
    },
    stop,
  };
}

export interface StreamWriter {
  tokens(ids: Int32Array, logprobs: Float32Array, total: number): void;
  /** The last chunk (with the finish reason) and `[DONE]`. */
  finish(final: Record<string, unknown>): void;
}

/**
 * SGLang's stream: the head at once, then one `data:` chunk per run of tokens with `text`,
 * `meta_info.output_token_logprobs` and `completion_tokens` (all so far, or only the new ones when
 * `incremental`), the finish reason in the last chunk, then `data: [DONE]`.
 */
export function sglangStream(
  res: ServerResponse,
  meta: { rid: string; promptTokens: number; weightVersion: () => string },
  decode: (ids: Int32Array) => string,
  options: { incremental: boolean; dropAfterHalf: () => boolean; topK?: number; vocabSize?: number },
): StreamWriter {
  const topK = options.topK ?? 0;
  const allTop: unknown[] = [];
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const all: Array<[number, number, null]> = [];
  let ids = new Int32Array(0);
  let dropping = false;
  const chunk = (
    fresh: Array<[number, number, null]>,
    text: string,
    finish: unknown,
    extra: Record<string, unknown> = {},
    freshTop: unknown[] = [],
  ) =>
    `data: ${JSON.stringify({
      text,
      meta_info: {
        ...extra,
        id: meta.rid,
        finish_reason: finish,
        prompt_tokens: meta.promptTokens,
        completion_tokens: all.length,
        cached_tokens: 0,
        weight_version: meta.weightVersion(),
        output_token_logprobs: options.incremental ? fresh : all,
        ...(topK > 0 ? { output_top_logprobs: options.incremental ? freshTop : allTop } : {}),
      },
    })}\n\n`;
  return {
    tokens(fresh, logprobs, total) {
      if (res.destroyed || dropping) return;
      const entries = Array.from(fresh, (id, i): [number, number, null] => [logprobs[i]!, id, null]);
      const top =
        topK > 0
          ? sglangTopRows(meta.promptTokens + all.length, fresh, logprobs, topK, options.vocabSize!)
          : [];
      all.push(...entries);
      allTop.push(...top);
      const grown = new Int32Array(ids.length + fresh.length);
      grown.set(ids);
      grown.set(fresh, ids.length);
      const text = options.incremental ? decode(fresh) : decode(grown);
      ids = grown;
      // The drop comes once the half is on the wire (a busy machine may write it and drop in one tick).
      dropping = all.length * 2 >= total && options.dropAfterHalf();
      res.write(chunk(entries, text, null, {}, top), dropping ? () => res.socket?.destroy() : undefined);
    },
    finish(final) {
      if (res.destroyed || dropping) return;
      const info = final.meta_info as Record<string, unknown>;
      // The top-p patch's fields (the nucleus of every output token) come with the finish reason.
      // So does speculation's count of verification passes, over the whole request, and the routed experts.
      const lastOnly = Object.fromEntries(
        Object.entries(info).filter(
          ([k]) => k.startsWith('top_p_') || k === 'spec_verify_ct' || k === 'routed_experts',
        ),
      );
      res.write(chunk([], options.incremental ? '' : decode(ids), info.finish_reason, lastOnly));
      res.end('data: [DONE]\n\n');
    },
  };
}

/** vLLM's completions stream: one chunk per run of tokens (`text`, `token_ids`, `logprobs`), then `[DONE]`. */
export function vllmStream(
  res: ServerResponse,
  meta: { id: string; model: string; promptIds: Int32Array },
  decode: (ids: Int32Array) => string,
  options: {
    dropAfterHalf: () => boolean;
    /** The `top_logprobs` maps of tokens from a position, when the request asked for them. */
    topMaps?: (position: number, ids: Int32Array, logprobs: Float32Array) => unknown[] | undefined;
  },
): StreamWriter {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const created = Math.floor(Date.now() / 1000);
  let sent = 0;
  let first = true;
  let dropping = false;
  const chunk = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({ id: meta.id, object: 'text_completion', created, model: meta.model, choices: [{ index: 0, ...choice }], ...extra })}\n\n`;
  return {
    tokens(fresh, logprobs, total) {
      if (res.destroyed || dropping) return;
      const top = options.topMaps?.(meta.promptIds.length + sent, fresh, logprobs);
      sent += fresh.length;
      // The drop comes once the half is on the wire (a busy machine may write it and drop in one tick).
      dropping = sent * 2 >= total && options.dropAfterHalf();
      res.write(
        chunk(
          {
            text: decode(fresh),
            logprobs: {
              token_logprobs: Array.from(logprobs),
              tokens: Array.from(fresh, (id) => `token_id:${id}`),
              ...(top ? { top_logprobs: top } : {}),
            },
            finish_reason: null,
            token_ids: Array.from(fresh),
          },
          first ? { prompt_token_ids: Array.from(meta.promptIds) } : {},
        ),
        dropping ? () => res.socket?.destroy() : undefined,
      );
      first = false;
    },
    finish(final) {
      if (res.destroyed || dropping) return;
      const choice = (final.choices as Array<Record<string, unknown>>)[0]!;
      res.write(
        chunk({
          text: '',
          logprobs: { token_logprobs: [], tokens: [] },
          finish_reason: choice.finish_reason,
          stop_reason: choice.stop_reason,
          token_ids: [],
        }),
      );
      res.write(
        `data: ${JSON.stringify({ id: meta.id, object: 'text_completion', created, model: meta.model, choices: [], usage: final.usage })}\n\n`,
      );
      res.end('data: [DONE]\n\n');
    },
  };
}
