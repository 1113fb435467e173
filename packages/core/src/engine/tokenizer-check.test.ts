// The engine's tokenizer against the local one, over each engine's real wire (a stand-in engine serving
// a chosen vocabulary, labelled as a stand-in): the same vocabulary matches on every path; a vocabulary
// one release apart (Qwen2.5's, without Qwen3's <think> tokens) is caught on every path.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { QWEN3_DIR, qwen3 } from '../__fixtures__/tokenizer.js';
import { EngineError } from '../errors.js';
import { type StandInEngine, type StandInEngineOptions, startStandInEngine } from '../standin/engine.js';
import { type ChatTokenizer, loadTokenizer } from './tokenizer/tokenizer.js';
import { checkEngineTokenizer, tokenizerProbe } from './tokenizer-check.js';

const dir = mkdtempSync(join(tmpdir(), 'vime-tokenizer-check-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Qwen3's files without the added tokens Qwen3 brought (ids 151665+): the Qwen2.5 vocabulary. */
function olderVocabulary(): Promise<ChatTokenizer> {
  const json = JSON.parse(readFileSync(join(QWEN3_DIR, 'tokenizer.json'), 'utf8'));
  json.added_tokens = json.added_tokens.filter((t: { id: number }) => t.id < 151665);
  const config = JSON.parse(readFileSync(join(QWEN3_DIR, 'tokenizer_config.json'), 'utf8'));
  config.added_tokens_decoder = Object.fromEntries(
    Object.entries(config.added_tokens_decoder).filter(([id]) => Number(id) < 151665),
  );
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(json));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(config));
  return loadTokenizer(dir);
}

const open: StandInEngine[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((e) => e.close()));
});
async function standIn(options: Partial<StandInEngineOptions>): Promise<StandInEngine> {
  const engine = await startStandInEngine({ tokenizer: await qwen3(), policy: () => 'ok', ...options });
  open.push(engine);
  return engine;
}

describe('checkEngineTokenizer', () => {
  it.each([
    ['sglang', 'sglang', 'tokenize'],
    ['vllm', 'vllm', 'tokenize'],
    ['sglang', 'none', 'generate'],
  ] as const)('matches the same vocabulary (%s engine, %s /tokenize): via %s', async (kind, wire, via) => {
    const local = await qwen3();
    const engine = await standIn({ tokenizeWire: wire });
    const generations: string[] = [];
    engine.events.on('request', (r) => generations.push(r.rid));
    const check = await checkEngineTokenizer(engine.url, local, { kind });
    expect(check).toMatchObject({ status: 'match', via, differences: [] });
    expect(check.probeTokens).toBe(local.encode(tokenizerProbe(local)).length);
    expect(check.model).toBe('vime-standin');
    // The /tokenize path costs the engine no generation; the fallback costs one, named as the probe.
    expect(generations).toEqual(via === 'generate' ? [expect.stringMatching(/^vime-tokenizer-probe-/)] : []);
  });

  it.each([
    ['sglang', 'sglang', 'tokenize'],
    ['vllm', 'vllm', 'tokenize'],
    ['sglang', 'none', 'generate'],
  ] as const)(
    'catches an engine one vocabulary release apart (%s engine, %s /tokenize)',
    async (kind, wire, via) => {
      const local = await qwen3();
      const engine = await standIn({ tokenizer: await olderVocabulary(), tokenizeWire: wire });
      const check = await checkEngineTokenizer(engine.url, local, { kind });
      expect(check.status).toBe('mismatch');
      expect(check.via).toBe(via);
      // The ids part at `<tool_response>`, the first token the older vocabulary lacks (or at the space
      // before it, which joins the pieces there).
      const first = local.encode(tokenizerProbe(local)).indexOf(151665);
      const m =
        /^the probe tokenizes differently from token (\d+) on \(at ".*<tool_response>.*"\): the engine has id \d+ where the local tokenizer has \d+; the probe is (\d+) tokens there and (\d+) here$/.exec(
          check.differences[0]!,
        );
      expect(m, check.differences[0]).not.toBeNull();
      expect(Number(m![1])).toBeGreaterThanOrEqual(first - 1);
      expect(Number(m![1])).toBeLessThanOrEqual(first);
      expect(Number(m![2])).toBeGreaterThan(Number(m![3]));
      if (via === 'tokenize')
        expect(check.differences).toContain(
          `vocabulary: id 151668, the last here ("</think>"), is "" there: the engine's vocabulary is smaller than the local 151669`,
        );
    },
  );

  it('is unchecked where the engine offers no way (a vLLM without /tokenize), and says why', async () => {
    const engine = await standIn({ tokenizeWire: 'none' });
    const check = await checkEngineTokenizer(engine.url, await qwen3(), { kind: 'vllm' });
    expect(check).toMatchObject({ status: 'unchecked', reason: `${engine.url} serves no /tokenize` });
  });

  it('throws an EngineError naming the URL when the engine fails the check request', async () => {
    const engine = await standIn({ tokenizeWire: 'sglang' });
    const local = await qwen3();
    // An engine that tokenizes nothing (a broken deployment answering 500) is no match and no "unchecked".
    const server = await import('node:http').then(({ createServer }) =>
      createServer((req, res) => {
        if (req.url === '/tokenize') {
          res.writeHead(500, { 'content-type': 'application/json' });
          res.end('{"error": {"message": "tokenizer crashed"}}');
        } else
          fetch(`${engine.url}${req.url}`).then(async (r) => res.writeHead(r.status).end(await r.text()));
      }),
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as { port: number };
    try {
      const error = await checkEngineTokenizer(`http://127.0.0.1:${port}`, local, { kind: 'sglang' }).catch(
        (e: unknown) => e,
      );
      expect(EngineError.isInstance(error)).toBe(true);
      expect((error as Error).message).toMatch(/\/tokenize answered 500: .*tokenizer crashed/);
    } finally {
      server.close();
    }
  });
});
