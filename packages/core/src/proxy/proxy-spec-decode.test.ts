/**
 * Speculative-decoding counts through the capture proxy, per dialect (Chat Completions, Anthropic
 * Messages, Responses), streamed and not: a stand-in engine answers like SGLang with speculation on
 * (`meta_info.spec_verify_ct`, a scripted figure: nothing is drafted), and the turn, the turn log and
 * the rollout's rows carry the verification passes and the accepted draft tokens; an engine that reports
 * no count leaves them absent, never 0.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import { sglangEngine } from '../engine/sglang.js';
import type { GenerateResult } from '../engine/types.js';
import type { Turn } from '../rollout.js';
import { startStandInEngine } from '../standin/engine.js';
import type { Dialect } from './dialects.js';
import { startCaptureProxy } from './proxy.js';
import { capturedTurnRecord } from './trajectory/turn-log.js';
import { turnSpec } from './turn.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

const TEXT = 'The fix is to check the bounds of the index before reading the list, then return early.';

const REQUESTS: Record<Dialect, { path: string; body: Record<string, unknown> }> = {
  openai: {
    path: 'chat/completions',
    body: { model: 'm', messages: [{ role: 'user', content: 'Fix it.' }] },
  },
  anthropic: {
    path: 'messages',
    body: { model: 'm', max_tokens: 256, messages: [{ role: 'user', content: 'Fix it.' }] },
  },
  responses: { path: 'responses', body: { model: 'm', input: 'Fix it.', store: false } },
  // Gemini streams by its method (`streamGenerateContent`), not a body field.
  gemini: {
    path: 'models/m:generateContent',
    body: { contents: [{ role: 'user', parts: [{ text: 'Fix it.' }] }] },
  },
};

/** A stand-in engine (scripted policy), an SGLang client on it, and a capture proxy on that. */
async function setup(options: { passes?: (n: number) => number; incremental?: boolean } = {}) {
  const tokenizer = await qwen3();
  const standIn = await startStandInEngine({
    tokenizer,
    policy: () => TEXT,
    incrementalStreamingOutput: options.incremental ?? false,
    specVerifyPasses: options.passes && ((g) => options.passes!(g.outputTokens)),
  });
  const engine = sglangEngine(standIn.url);
  const proxy = await startCaptureProxy({ engine, tokenizer });
  closers.push(
    () => standIn.close(),
    () => engine.close(),
    () => proxy.close(),
  );
  const turns: Turn[] = [];
  proxy.events.on('turn', (e) => turns.push(e.turn));
  return { proxy, turns };
}

async function ask(
  proxy: Awaited<ReturnType<typeof setup>>['proxy'],
  id: string,
  dialect: Dialect,
  stream: boolean,
) {
  const session = proxy.openSession(id);
  const { path, body } = REQUESTS[dialect];
  const route =
    stream && dialect === 'gemini' ? path.replace(':generateContent', ':streamGenerateContent') : path;
  const res = await fetch(`${session.baseURL}/${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${session.apiKey}` },
    body: JSON.stringify({ ...body, ...(stream ? { stream: true } : {}) }),
  });
  expect(res.status).toBe(200);
  const text = await res.text();
  if (stream) expect(text).toContain('data:');
  return session;
}

describe('speculative-decoding counts per dialect', () => {
  for (const dialect of ['openai', 'anthropic', 'responses', 'gemini'] as Dialect[]) {
    for (const stream of [false, true]) {
      it(`${dialect}${stream ? ', streamed' : ''}: the turn, its log record and the rows carry spec_verify_ct's counts`, async () => {
        const { proxy, turns } = await setup({ passes: (n) => Math.ceil(n / 3) });
        const session = await ask(proxy, `spec-${dialect}-${stream}`, dialect, stream);
        expect(turns).toHaveLength(1);
        const output = turns[0]!.outputIds.length;
        const verifyPasses = Math.ceil(output / 3);
        expect(output).toBeGreaterThan(10);
        expect(turns[0]!.spec).toEqual({ verifyPasses, acceptedTokens: output - verifyPasses });
        const record = capturedTurnRecord(session.id, turns[0]!);
        expect(record.spec_verify_passes).toBe(verifyPasses);
        expect(record.spec_accepted_tokens).toBe(output - verifyPasses);
        const rows = proxy.finishSession(session.id, { reward: 1 });
        expect(rows.map((r) => r.metadata.spec_decode)).toEqual([
          { verify_passes: verifyPasses, accepted_tokens: output - verifyPasses },
        ]);
      });

      it(`${dialect}${stream ? ', streamed' : ''}: an engine that reports no count leaves them absent`, async () => {
        const { proxy, turns } = await setup();
        const session = await ask(proxy, `plain-${dialect}-${stream}`, dialect, stream);
        expect(turns[0]!.spec).toBeUndefined();
        expect('spec_verify_passes' in capturedTurnRecord(session.id, turns[0]!)).toBe(false);
        const rows = proxy.finishSession(session.id, { reward: 1 });
        expect('spec_decode' in rows[0]!.metadata).toBe(false);
      });
    }
  }

  it('an incremental stream (only new tokens per chunk) reads the last chunk count too', async () => {
    const { proxy, turns } = await setup({ passes: () => 5, incremental: true });
    const session = await ask(proxy, 'incremental', 'openai', true);
    const output = turns[0]!.outputIds.length;
    expect(turns[0]!.spec).toEqual({ verifyPasses: 5, acceptedTokens: output - 5 });
    proxy.finishSession(session.id, { reward: 1 });
  });

  it('the rows of a session sum its turns', async () => {
    const { proxy, turns } = await setup({ passes: (n) => Math.ceil(n / 2) });
    const session = proxy.openSession('two-turns');
    const messages: Array<Record<string, unknown>> = [{ role: 'user', content: 'Fix it.' }];
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${session.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${session.apiKey}` },
        body: JSON.stringify({ model: 'm', messages }),
      });
      const body = (await res.json()) as { choices: Array<{ message: Record<string, unknown> }> };
      messages.push(body.choices[0]!.message, { role: 'user', content: 'Again.' });
    }
    expect(turns).toHaveLength(2);
    const passes = turns.reduce((s, t) => s + t.spec!.verifyPasses, 0);
    const accepted = turns.reduce((s, t) => s + t.spec!.acceptedTokens, 0);
    const rows = proxy.finishSession(session.id, { reward: 1 });
    expect(rows[0]!.metadata.spec_decode).toEqual({ verify_passes: passes, accepted_tokens: accepted });
  });
});

describe('turnSpec', () => {
  const result = (tokens: number, passes: number | undefined) =>
    ({ outputIds: new Int32Array(tokens), specVerifyPasses: passes }) as GenerateResult;

  it('sums the generations of a continued turn: accepted = output tokens − passes', () => {
    expect(turnSpec([result(12, 4), result(9, 3)])).toEqual({ verifyPasses: 7, acceptedTokens: 14 });
  });

  it('is absent when any generation of the turn reported no count (a partial sum would understate it)', () => {
    expect(turnSpec([result(12, 4), result(9, undefined)])).toBeUndefined();
    expect(turnSpec([])).toBeUndefined();
  });
});
