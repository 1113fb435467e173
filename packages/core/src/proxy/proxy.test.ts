import { afterEach, describe, expect, it } from 'vitest';
import {
  anthropicMessage,
  anthropicTools,
  closeAll,
  expectExactRow,
  OBSERVATIONS,
  openaiMessage,
  post,
  script,
  setup,
  TOOL_LOOP,
  tools,
} from '../__fixtures__/proxy-harness.js';
import { qwen3 } from '../__fixtures__/tokenizer.js';
import type { TemplateMessage } from '../engine/tokenizer/template.js';

afterEach(closeAll);

describe('capture proxy: token-exact multi-turn capture', () => {
  for (const stream of [false, true]) {
    it(`OpenAI Chat Completions (${stream ? 'SSE' : 'JSON'}): a tool loop packs into one exact row`, async () => {
      const { tokenizer, proxy, calls, drift } = await setup(script(...TOOL_LOOP));
      const session = proxy.openSession('oa-1', { sampling: { temperature: 1 } });
      const messages: TemplateMessage[] = [
        { role: 'system', content: 'You are a coding agent.' },
        { role: 'user', content: 'Fix the failing test.' },
      ];
      const rendered: string[] = [];
      for (let k = 0; k < 3; k++) {
        rendered.push(tokenizer.render(messages, { tools }));
        const res = await post(
          `${proxy.url}/v1/chat/completions`,
          {
            model: 'policy',
            messages,
            tools,
            stream,
            ...(stream ? { stream_options: { include_usage: true } } : {}),
          },
          { authorization: `Bearer ${session.apiKey}` },
        );
        expect(res.status).toBe(200);
        expect(res.type).toBe(stream ? 'text/event-stream' : 'application/json');
        const { message, finish } = openaiMessage(res.text, stream);
        messages.push(message as unknown as TemplateMessage);
        if (k < 2) {
          expect(finish).toBe('tool_calls');
          const call = (message.tool_calls as Array<{ id: string; function: { arguments: string } }>)[0]!;
          expect(call.function.arguments).toBe(k === 0 ? '{"cmd": "ls"}' : '{"cmd": "cat a.py"}');
          messages.push({ role: 'tool', tool_call_id: call.id, content: OBSERVATIONS[k]! });
        } else {
          expect(finish).toBe('stop');
          expect(message.content).toBe('The bug is in a.py: `return 1` should be `return 2`.');
          expect(message.reasoning_content).toBe('The fix is clear.');
        }
      }
      const samples = proxy.finishSession('oa-1', { reward: 1, baseSample: { index: 3, group_index: 1 } });
      expect(samples).toHaveLength(1);
      expectExactRow(samples[0]!, calls, tokenizer, rendered);
      expect(samples[0]).toMatchObject({
        status: 'completed',
        reward: 1,
        session_id: 'oa-1',
        index: 3,
        group_index: 1,
      });
      expect(samples[0]!.weight_versions).toEqual(['default']);
      expect(drift).toEqual([
        { sessionId: 'oa-1', turns: 3, rows: 1, forks: 0, realigns: 0, retokenizedTokens: 0 },
      ]);
    });

    it(`Anthropic Messages (${stream ? 'SSE' : 'JSON'}): tool_use/tool_result turns pack into one exact row`, async () => {
      const { tokenizer, proxy, calls, drift } = await setup(script(...TOOL_LOOP));
      const session = proxy.openSession('an-1');
      const system = 'You are a coding agent.';
      const messages: Array<{ role: string; content: unknown }> = [
        { role: 'user', content: 'Fix the failing test.' },
      ];
      // what the template sees, kept alongside to check the observations' tokens
      const chat: TemplateMessage[] = [
        { role: 'system', content: system },
        { role: 'user', content: 'Fix the failing test.' },
      ];
      const rendered: string[] = [];
      for (let k = 0; k < 3; k++) {
        rendered.push(tokenizer.render(chat, { tools }));
        const res = await post(
          `${session.baseURL}/messages`,
          { model: 'policy', max_tokens: 1024, system, messages, tools: anthropicTools, stream },
          { 'x-api-key': 'ignored-when-the-path-names-the-session' },
        );
        expect(res.status).toBe(200);
        const { content, stop } = anthropicMessage(res.text, stream);
        messages.push({ role: 'assistant', content });
        const thinking = content.find((b) => b.type === 'thinking')!.thinking as string;
        const text = (content.find((b) => b.type === 'text')?.text as string | undefined) ?? '';
        const use = content.find((b) => b.type === 'tool_use');
        chat.push({
          role: 'assistant',
          content: text,
          reasoning_content: thinking,
          ...(use
            ? {
                tool_calls: [
                  {
                    type: 'function',
                    function: { name: 'bash', arguments: use.input as Record<string, unknown> },
                  },
                ],
              }
            : {}),
        });
        if (k < 2) {
          expect(stop).toBe('tool_use');
          expect(use!.input).toEqual({ cmd: k === 0 ? 'ls' : 'cat a.py' });
          messages.push({
            role: 'user',
            content: [{ type: 'tool_result', tool_use_id: use!.id, content: OBSERVATIONS[k] }],
          });
          chat.push({ role: 'tool', content: OBSERVATIONS[k]! });
        } else expect(stop).toBe('end_turn');
      }
      const samples = proxy.finishSession('an-1', { reward: 0 });
      expect(samples).toHaveLength(1);
      expectExactRow(samples[0]!, calls, tokenizer, rendered);
      expect(samples[0]!.reward).toBe(0);
      expect(drift[0]).toMatchObject({ forks: 0, realigns: 0 });
    });
  }

  it('keeps one row when Qwen3 would drop earlier <think> blocks after a new user message (the history is reused)', async () => {
    const { proxy, calls, drift } = await setup(script(TOOL_LOOP[0]!, TOOL_LOOP[2]!, 'Added a test.'));
    const session = proxy.openSession('think-1');
    const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix the failing test.' }];
    for (const followUp of [null, null, 'Now add a regression test.']) {
      if (followUp) messages.push({ role: 'user', content: followUp });
      const res = await post(`${session.baseURL}/chat/completions`, { messages, tools });
      const { message } = openaiMessage(res.text, false);
      messages.push(message as unknown as TemplateMessage);
      const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
      if (call) messages.push({ role: 'tool', tool_call_id: call.id, content: 'a.py' });
    }
    const samples = proxy.finishSession('think-1', {
      reward: 1,
      rewardSplit: 'divide',
      baseSample: { rollout_id: 9 },
    });
    expect(drift[0]).toMatchObject({ turns: 3, rows: 1, forks: 0, realigns: 0 });
    expect(samples.map((s) => [s.rollout_id, s.session_id, s.reward])).toEqual([[9, 'think-1', 1]]);
    // the row holds every turn's output as sampled, the first turn's reasoning included
    const [first, second, third] = calls;
    const row = samples[0]!;
    expect(Array.from(row.tokens)).toEqual([...third!.inputIds, ...third!.result.outputIds]);
    for (const call of [first!, second!]) {
      const history = call.inputIds.length + call.result.outputIds.length;
      expect(Array.from(third!.inputIds.subarray(0, history))).toEqual([
        ...call.inputIds,
        ...call.result.outputIds,
      ]);
    }
    expect(row.response).toContain('I should list the files.');
    expect(row.prompt).toContain('Fix the failing test.');
  });

  it('keeps a sampled tokenization that re-rendering would merge differently (the history is reused, not re-tokenized)', async () => {
    const tok = await qwen3();
    // "Done." sampled as "Do" + "ne" + "."; the template re-tokenizes it as "Done" + "."
    const sampled = [...tok.encode('Do'), ...tok.encode('ne'), ...tok.encode('.'), tok.eosTokenId];
    expect(Array.from(tok.encode('Done.'))).not.toEqual(sampled.slice(0, 3));
    const { proxy, calls, drift } = await setup(script({ ids: sampled }, 'Continuing.'));
    const session = proxy.openSession('reuse-1');
    const messages: TemplateMessage[] = [{ role: 'user', content: 'Say done.' }];
    const first = openaiMessage(
      (await post(`${session.baseURL}/chat/completions`, { messages })).text,
      false,
    );
    expect(first.message.content).toBe('Done.');
    messages.push(first.message as unknown as TemplateMessage, { role: 'user', content: 'Continue.' });
    await post(`${session.baseURL}/chat/completions`, { messages });
    const [sample] = proxy.finishSession('reuse-1', { reward: 1 });
    expect(drift[0]).toMatchObject({ rows: 1, forks: 0, realigns: 0, retokenizedTokens: 0 });
    const p0 = calls[0]!.inputIds.length;
    expect(Array.from(calls[1]!.inputIds.subarray(0, p0 + sampled.length))).toEqual([
      ...calls[0]!.inputIds,
      ...sampled,
    ]);
    // the sampled tokens stay trained (mask 1), the new user message is an observation
    const mask = Array.from(sample!.loss_mask!);
    expect(mask.slice(0, sampled.length)).toEqual(sampled.map(() => 1));
    expect(Array.from(sample!.tokens)).toEqual([...calls[1]!.inputIds, ...calls[1]!.result.outputIds]);
    expect(sample!.metadata.lineage).toMatchObject({
      id: 'reuse-1',
      thread: 0,
      parent: null,
      threads: 1,
      stitch: { retokenized_tokens: 0, turns: { first: 1, reused: 1 } },
    });
  });

  it('realigns when the client edits the last answer a little (short drift in the last output)', async () => {
    const tok = await qwen3();
    const sampled = [...tok.encode('Do'), ...tok.encode('ne'), ...tok.encode('.'), tok.eosTokenId];
    const { proxy, calls, drift } = await setup(script({ ids: sampled }, 'Continuing.'));
    const session = proxy.openSession('realign-1');
    const messages: TemplateMessage[] = [{ role: 'user', content: 'Say done.' }];
    await post(`${session.baseURL}/chat/completions`, { messages });
    const stitches: unknown[] = [];
    proxy.events.on('turn', (e) => stitches.push(e.stitch));
    messages.push({ role: 'assistant', content: 'Done!' }, { role: 'user', content: 'Continue.' });
    await post(`${session.baseURL}/chat/completions`, { messages });
    const [sample] = proxy.finishSession('realign-1', { reward: 1 });
    expect(stitches).toEqual([
      expect.objectContaining({
        kind: 'changed',
        reusedTokens: 0,
        retokenizedTokens: calls[0]!.inputIds.length + 4,
      }),
    ]);
    expect(drift[0]).toMatchObject({ rows: 1, forks: 0, realigns: 1, retokenizedTokens: 4 });
    const p0 = calls[0]!.inputIds.length;
    // tokens follow the second prompt exactly; the overwritten first output and the observation are masked
    expect(Array.from(sample!.tokens)).toEqual([...calls[1]!.inputIds, ...calls[1]!.result.outputIds]);
    const mask = Array.from(sample!.loss_mask!);
    expect(mask.slice(0, calls[1]!.inputIds.length - p0).every((m) => m === 0)).toBe(true);
    expect(mask.slice(calls[1]!.inputIds.length - p0).every((m) => m === 1)).toBe(true);
  });
});
