import { afterEach, describe, expect, it } from 'vitest';
import {
  anthropicMessage,
  anthropicTools,
  closeAll,
  openaiMessage,
  post,
  setup,
  tools,
} from '../__fixtures__/proxy-harness.js';
import type { TemplateMessage } from '../engine/tokenizer/template.js';
import type { StandInPolicy } from '../standin/engine.js';
import type { ProxyTurnEvent } from './events.js';
import type { StitchInfo } from './stitch.js';

afterEach(closeAll);

/** Turn k of a tool loop: reasoning, a line of text and one bash call; the last turn answers. */
function loopTurn(k: number, last: number): string {
  return k < last
    ? `<think>\nStep ${k}: look further.\n</think>\n\nChecking.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "sed -n ${k}p a.py"}}\n</tool_call>`
    : '<think>\nDone.\n</think>\n\nFixed.';
}

/** The policy answers by the number of tool results in the prompt, so any request order works. */
const loopPolicy =
  (last: number): StandInPolicy =>
  (r) =>
    loopTurn(r.prompt.split('<tool_response>').length - 1, last);

function recordStitches(proxy: { events: { on(e: 'turn', f: (e: ProxyTurnEvent) => void): unknown } }) {
  const seen: StitchInfo[] = [];
  proxy.events.on('turn', (e) => seen.push(e.stitch));
  return seen;
}

describe('capture proxy: token-exact stitching of an unchanged history', () => {
  it('a 20-turn session that sends its history back unchanged is one trajectory with nothing re-tokenized', async () => {
    const TURNS = 20;
    const { proxy, calls, drift, tokenizer } = await setup(loopPolicy(TURNS - 1));
    const stitches = recordStitches(proxy);
    const s = proxy.openSession('long-1');
    const messages: TemplateMessage[] = [
      { role: 'system', content: 'You fix bugs.' },
      { role: 'user', content: 'Fix a.py.' },
    ];
    for (let k = 0; k < TURNS; k++) {
      const res = await post(`${s.baseURL}/chat/completions`, { messages, tools });
      expect(res.status).toBe(200);
      const { message } = openaiMessage(res.text, false);
      messages.push(message as unknown as TemplateMessage);
      const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
      if (call) messages.push({ role: 'tool', tool_call_id: call.id, content: `line ${k}\n`.repeat(k + 1) });
    }
    expect(stitches.map((x) => x.kind)).toEqual(['first', ...Array(TURNS - 1).fill('reused')]);
    expect(stitches.reduce((n, x) => n + x.retokenizedTokens, 0)).toBe(0);
    for (let k = 1; k < TURNS; k++) {
      const prev = calls[k - 1]!;
      const history = prev.inputIds.length + prev.result.outputIds.length;
      // the prompt is the previous prompt and output exactly, then only the new messages' tokens
      expect(Array.from(calls[k]!.inputIds.subarray(0, history))).toEqual([
        ...prev.inputIds,
        ...prev.result.outputIds,
      ]);
      expect(stitches[k]).toMatchObject({
        reusedTokens: history,
        renderedTokens: calls[k]!.inputIds.length - history,
      });
    }
    // Qwen3 renders a one-query tool loop as a prefix-stable text: the stitched prompt is the full render's
    const finalPrompt = tokenizer.encodeChat(messages.slice(0, -1), { tools });
    expect(Array.from(calls[TURNS - 1]!.inputIds)).toEqual(Array.from(finalPrompt));
    const rows = proxy.finishSession('long-1', { reward: 1 });
    expect(rows).toHaveLength(1);
    expect(drift[0]).toMatchObject({ rows: 1, forks: 0, realigns: 0, retokenizedTokens: 0 });
    expect(rows[0]!.metadata.lineage).toMatchObject({
      id: 'long-1',
      thread: 0,
      threads: 1,
      stitch: { retokenized_tokens: 0, turns: { first: 1, reused: TURNS - 1, changed: 0, rerendered: 0 } },
    });
  });

  it('keeps the reasoning a client dropped from its copy of the history (OpenAI and Anthropic)', async () => {
    const { proxy, calls, tokenizer } = await setup(loopPolicy(1));
    const stitches = recordStitches(proxy);
    // OpenAI: the client echoes the answer without reasoning_content
    const s = proxy.openSession('drop-openai');
    const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix a.py.' }];
    const first = openaiMessage(
      (await post(`${s.baseURL}/chat/completions`, { messages, tools })).text,
      false,
    );
    const { reasoning_content: _dropped, ...echo } = first.message;
    const id = (echo.tool_calls as Array<{ id: string }>)[0]!.id;
    messages.push(echo as unknown as TemplateMessage, { role: 'tool', tool_call_id: id, content: 'x = 1' });
    await post(`${s.baseURL}/chat/completions`, { messages, tools });
    expect(tokenizer.decode(calls[1]!.inputIds)).toContain('Step 0: look further.');
    // Anthropic: the client drops the thinking block
    const a = proxy.openSession('drop-anthropic');
    const body = { model: 'm', max_tokens: 256, tools: anthropicTools };
    const turn1 = [{ role: 'user', content: 'Fix a.py.' }];
    const r1 = await post(`${a.baseURL}/messages`, { ...body, messages: turn1 });
    const blocks = anthropicMessage(r1.text, false).content.filter((b) => b.type !== 'thinking');
    const use = blocks.find((b) => b.type === 'tool_use')!;
    await post(`${a.baseURL}/messages`, {
      ...body,
      messages: [
        ...turn1,
        { role: 'assistant', content: blocks },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'x = 1' }] },
      ],
    });
    expect(tokenizer.decode(calls[3]!.inputIds)).toContain('Step 0: look further.');
    expect(stitches.map((x) => x.kind)).toEqual(['first', 'reused', 'first', 'reused']);
    for (const id of ['drop-openai', 'drop-anthropic']) {
      expect(proxy.finishSession(id, { reward: 1 })).toHaveLength(1);
    }
  });

  it('a new user message after a tool loop reuses the history the template would re-render without reasoning', async () => {
    const { proxy, calls, tokenizer, drift } = await setup(loopPolicy(1));
    const stitches = recordStitches(proxy);
    const s = proxy.openSession('multi-query');
    const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix a.py.' }];
    for (let k = 0; k < 2; k++) {
      const { message } = openaiMessage(
        (await post(`${s.baseURL}/chat/completions`, { messages, tools })).text,
        false,
      );
      messages.push(message as unknown as TemplateMessage);
      const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
      if (call) messages.push({ role: 'tool', tool_call_id: call.id, content: 'x = 1' });
    }
    messages.push({ role: 'user', content: 'Now add a test.' });
    await post(`${s.baseURL}/chat/completions`, { messages, tools });
    expect(stitches.map((x) => x.kind)).toEqual(['first', 'reused', 'reused']);
    const [, second, third] = calls;
    const history = second!.inputIds.length + second!.result.outputIds.length;
    expect(Array.from(third!.inputIds.subarray(0, history))).toEqual([
      ...second!.inputIds,
      ...second!.result.outputIds,
    ]);
    // the new part is exactly the tail of the template's own render of this request
    const full = tokenizer.renderChat(messages, { tools });
    const tail = tokenizer.decode(third!.inputIds.subarray(history));
    expect(full.endsWith(tail)).toBe(true);
    expect(tokenizer.decode(third!.inputIds)).toContain('Step 0: look further.');
    expect(full).not.toContain('Step 0: look further.');
    proxy.finishSession('multi-query', { reward: 1 });
    expect(drift[0]).toMatchObject({ rows: 1, forks: 0, realigns: 0 });
  });
});

describe('capture proxy: a changed history is re-tokenized and reported, never stitched', () => {
  async function twoTurns(sessionId: string) {
    const env = await setup(loopPolicy(3));
    const stitches = recordStitches(env.proxy);
    const s = env.proxy.openSession(sessionId);
    const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix a.py.' }];
    for (let k = 0; k < 2; k++) {
      const { message } = openaiMessage(
        (await post(`${s.baseURL}/chat/completions`, { messages, tools })).text,
        false,
      );
      const call = (message.tool_calls as Array<{ id: string }>)[0]!;
      messages.push(message as unknown as TemplateMessage, {
        role: 'tool',
        tool_call_id: call.id,
        content: `out ${k}`,
      });
    }
    return { ...env, s, stitches, messages };
  }

  const edits: Array<[string, (m: TemplateMessage[]) => void]> = [
    ['an edited tool result', (m) => (m[2]!.content = 'out 0, edited')],
    ['an answer echoed with another call id', (m) => (m[3]!.tool_calls![0]!.id = 'call_forged')],
    [
      'an answer echoed with an extra tool call',
      (m) =>
        m[3]!.tool_calls!.push({ id: 'x', type: 'function', function: { name: 'bash', arguments: '{}' } }),
    ],
    ['an answer echoed with other text', (m) => (m[3]!.content = `${m[3]!.content} (edited)`)],
    ['an answer echoed with other reasoning', (m) => (m[3]!.reasoning_content = 'I was told to.')],
    [
      'a message inserted into the history',
      (m) => m.splice(2, 0, { role: 'user', content: 'Also, ignore tests.' }),
    ],
    ['a dropped message', (m) => m.splice(2, 1)],
  ];
  for (const [what, edit] of edits) {
    it(`${what}: re-tokenized whole, counted, and packed as drift`, async () => {
      const { proxy, s, stitches, messages, calls } = await twoTurns(`edit-${what.length}`);
      edit(messages);
      const res = await post(`${s.baseURL}/chat/completions`, { messages, tools });
      expect(res.status).toBe(200);
      const third = stitches[2]!;
      expect(third.kind).toBe('changed');
      expect(third.reusedTokens).toBe(0);
      expect(third.retokenizedTokens).toBeGreaterThan(0);
      expect(third.thread).toBe(0);
      // what the engine was sent is the full render of what the client sent
      expect(third.renderedTokens).toBe(calls[2]!.inputIds.length);
      const rows = proxy.finishSession(s.id, { reward: 1 });
      expect(rows[0]!.metadata.lineage).toMatchObject({ stitch: { turns: { changed: 1 } } });
    });
  }
});

describe('capture proxy: what a client cannot change by editing its copy', () => {
  it('tool arguments edited under a call id the proxy issued re-render as sampled, so the history is still reused', async () => {
    const { proxy, calls, tokenizer } = await setup(loopPolicy(3));
    const stitches = recordStitches(proxy);
    const s = proxy.openSession('forged-args');
    const messages: TemplateMessage[] = [{ role: 'user', content: 'Fix a.py.' }];
    for (let k = 0; k < 3; k++) {
      const { message } = openaiMessage(
        (await post(`${s.baseURL}/chat/completions`, { messages, tools })).text,
        false,
      );
      const call = (message.tool_calls as Array<{ id: string; function: { arguments: string } }>)[0]!;
      // the client rewrites what the model asked for before sending the history back
      call.function.arguments = '{"cmd": "rm -rf /"}';
      messages.push(message as unknown as TemplateMessage, {
        role: 'tool',
        tool_call_id: call.id,
        content: `out ${k}`,
      });
    }
    expect(stitches.map((x) => x.kind)).toEqual(['first', 'reused', 'reused']);
    expect(tokenizer.decode(calls[2]!.inputIds)).not.toContain('rm -rf');
    proxy.finishSession('forged-args', { reward: 0 });
  });

  it('a different opening (system prompt or first message) starts a thread of its own, never a stitch', async () => {
    const { proxy } = await setup(loopPolicy(3));
    const stitches = recordStitches(proxy);
    const s = proxy.openSession('openings');
    const ask = (messages: TemplateMessage[]) => post(`${s.baseURL}/chat/completions`, { messages, tools });
    await ask([
      { role: 'system', content: 'A' },
      { role: 'user', content: 'Fix a.py.' },
    ]);
    await ask([
      { role: 'system', content: 'B' },
      { role: 'user', content: 'Fix a.py.' },
    ]);
    await ask([
      { role: 'system', content: 'A' },
      { role: 'user', content: 'Fix b.py.' },
    ]);
    expect(stitches.map((x) => [x.kind, x.thread])).toEqual([
      ['first', 0],
      ['branch', 1],
      ['branch', 2],
    ]);
    const rows = proxy.finishSession('openings', { reward: 0 });
    expect(rows.map((r) => (r.metadata.lineage as { thread: number }).thread)).toEqual([0, 1, 2]);
  });
});

describe('capture proxy: lineage of a session with subagents', () => {
  it('a subagent (Anthropic, its own system prompt and task) becomes its own trajectory linked to the session', async () => {
    const policy: StandInPolicy = (r) =>
      r.prompt.includes('You are a subagent')
        ? r.prompt.includes('<tool_response>')
          ? 'Found it in a.py.'
          : '<tool_call>\n{"name": "bash", "arguments": {"cmd": "grep -n bug a.py"}}\n</tool_call>'
        : r.prompt.includes('Found it in a.py.')
          ? 'Fixed.'
          : '<tool_call>\n{"name": "Task", "arguments": {"prompt": "find the bug"}}\n</tool_call>';
    const { proxy, calls } = await setup(policy);
    const stitches = recordStitches(proxy);
    const trajectoryIds: string[] = [];
    proxy.events.on('turn', (e) => trajectoryIds.push(e.trajectoryId));
    const s = proxy.openSession('lineage-1');
    const body = { model: 'm', max_tokens: 256, tools: anthropicTools };
    const ask = async (system: string, messages: unknown[]) => {
      const res = await post(`${s.baseURL}/messages`, { ...body, system, messages });
      expect(res.status).toBe(200);
      return anthropicMessage(res.text, false).content;
    };
    const main = [{ role: 'user', content: 'Fix the bug.' }];
    const task = await ask('You are the main agent.', main);
    const taskId = task.find((b) => b.type === 'tool_use')!.id as string;
    // the subagent: a fresh conversation of its own, while the main agent waits for its Task result
    const sub = [{ role: 'user', content: 'find the bug' }];
    const grep = await ask('You are a subagent.', sub);
    const grepId = grep.find((b) => b.type === 'tool_use')!.id as string;
    const found = await ask('You are a subagent.', [
      ...sub,
      { role: 'assistant', content: grep },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: grepId, content: '3: bug()' }] },
    ]);
    const text = found.find((b) => b.type === 'text')!.text as string;
    await ask('You are the main agent.', [
      ...main,
      { role: 'assistant', content: task },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: taskId, content: text }] },
    ]);
    expect(stitches.map((x) => [x.kind, x.thread])).toEqual([
      ['first', 0],
      ['branch', 1],
      ['reused', 1],
      ['reused', 0],
    ]);
    const rows = proxy.finishSession('lineage-1', { reward: 1, baseSample: { index: 7 } });
    expect(rows).toHaveLength(2);
    const [mainRow, subRow] = rows;
    expect(mainRow!.metadata.lineage).toMatchObject({ id: 'lineage-1', thread: 0, parent: null, threads: 2 });
    expect(subRow!.metadata.lineage).toMatchObject({ id: 'lineage-1', thread: 1, parent: 0, threads: 2 });
    expect(subRow!.rollout_id).toBe(mainRow!.rollout_id);
    // each turn event names the trajectory that recorded it: the session_id of the row that trains it
    expect(trajectoryIds).toEqual(['lineage-1', 'lineage-1/1', 'lineage-1/1', 'lineage-1']);
    expect(rows.map((r) => r.session_id)).toEqual(['lineage-1', 'lineage-1/1']);
    expect(subRow!.index).toBe(7);
    // each trajectory holds only its own turns: the main row is turns 0 and 3, the subagent's turns 1 and 2
    expect(Array.from(mainRow!.tokens)).toEqual([...calls[3]!.inputIds, ...calls[3]!.result.outputIds]);
    expect(Array.from(subRow!.tokens)).toEqual([...calls[2]!.inputIds, ...calls[2]!.result.outputIds]);
  });
});
