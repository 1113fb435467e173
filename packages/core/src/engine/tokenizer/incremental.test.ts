import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { qwen3 } from '../../__fixtures__/tokenizer.js';
import { IncrementalDecoder, IncrementalParser, type StreamDelta } from './incremental.js';
import { type ParsedResponse, parseResponse } from './parsers.js';

/** What a client rebuilds from the deltas. */
function rebuild(deltas: StreamDelta[]): ParsedResponse {
  const out: ParsedResponse = { content: '', reasoning: undefined, toolCalls: [] };
  for (const d of deltas) {
    if (d.kind === 'reasoning') out.reasoning = (out.reasoning ?? '') + d.text;
    else if (d.kind === 'text') out.content += d.text;
    else {
      expect(d.index).toBe(out.toolCalls.length);
      out.toolCalls.push(d.call);
    }
  }
  return out;
}

/** Feed `text` in the given pieces; the deltas sent before the end, and all of them. */
function stream(pieces: string[], options: { reasoningOpen?: boolean } = {}) {
  const parser = new IncrementalParser(options);
  const live: StreamDelta[] = [];
  for (const p of pieces) live.push(...parser.push(p));
  const { deltas, exact } = parser.finish(parseResponse(pieces.join('')));
  return { live, all: [...live, ...deltas], exact };
}

/** Cut `text` at the given fractions. */
function split(text: string, cuts: number[]): string[] {
  const at = [...new Set(cuts.map((c) => Math.floor(c * (text.length + 1))))].sort((a, b) => a - b);
  const out: string[] = [];
  let last = 0;
  for (const a of at) {
    out.push(text.slice(last, a));
    last = a;
  }
  out.push(text.slice(last));
  return out;
}

const CALL = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls -la"}}\n</tool_call>';
const BAD_CALL = '<tool_call>\n{"name": "bash", "arguments": {oops}\n</tool_call>';
const fragment = fc.constantFrom(
  'Let me look.',
  ' ',
  '\n',
  '\n\n',
  '\t',
  'é 漢字 🙂',
  '<',
  '<tool',
  '<tool_call',
  '</tool_call>',
  '<think>',
  '</thi',
  CALL,
  BAD_CALL,
  '<tool_call>\n{"name": "edit", "arguments": {"path": "a.py", "text": "x < y"}}\n</tool_call>',
  'x < y && a > b',
  '`code`',
);
/** Content (no `</think>`; the parse would make what precedes one reasoning). */
const content = fc.array(fragment, { maxLength: 12 }).map((f) => f.join('').replaceAll('</think>', ''));
const reasoningText = fc
  .array(fc.constantFrom('I should', ' check', '\n', '\n\n', '<tool_call>', 'a.py', '</thin', 'é'), {
    maxLength: 8,
  })
  .map((f) => f.join(''));
/** Texts the opening guess is right about: a `<think>` block that closes, or content that starts otherwise. */
const answer = fc.oneof(
  fc.tuple(reasoningText, content).map(([r, c]) => `<think>${r}</think>${c}`),
  content.filter((c) => !'<think>'.startsWith(c.slice(0, 7)) || c === ''),
);
const cuts = fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 20 });

describe('IncrementalParser: streamed deltas add up to the non-streamed parse', () => {
  it('on every split of every answer (property)', () => {
    fc.assert(
      fc.property(answer, cuts, (text, at) => {
        const { all, exact } = stream(split(text, at));
        expect(exact).toBe(true);
        expect(rebuild(all)).toEqual(parseResponse(text));
      }),
      { numRuns: 3000 },
    );
  });

  it('token by token, one character at a time', () => {
    fc.assert(
      fc.property(answer, (text) => {
        const { all, exact } = stream([...text]);
        expect(exact).toBe(true);
        expect(rebuild(all)).toEqual(parseResponse(text));
      }),
      { numRuns: 500 },
    );
  });

  it('never leaks tool-call markup as content, and streams text before the answer ends', () => {
    const text = `<think>\nPlan.\n</think>\n\nLet me look at the files.\n${CALL}`;
    const { live, all } = stream([...text]);
    const sentText = live
      .filter((d) => d.kind === 'text')
      .map((d) => (d as { text: string }).text)
      .join('');
    expect(sentText).toBe('Let me look at the files.');
    expect(
      live
        .filter((d) => d.kind === 'reasoning')
        .map((d) => (d as { text: string }).text)
        .join(''),
    ).toBe('Plan.');
    expect(live.some((d) => d.kind === 'toolCall')).toBe(true);
    for (const d of all) if (d.kind === 'text') expect(d.text).not.toMatch(/<tool|tool_call|<\/?think/);
    // every reasoning character left before `</think>` arrived
    const closeAt = text.indexOf('</think>');
    const parser = new IncrementalParser();
    const before = [...text.slice(0, closeAt)].flatMap((c) => parser.push(c));
    expect(rebuild(before).reasoning).toBe('Plan.');
  });

  it('a prompt that opens the reasoning block itself: the output up to `</think>` is reasoning', () => {
    const text = 'Check a.py.\n</think>\n\nDone.';
    const { all, exact } = stream([...text], { reasoningOpen: true });
    expect(exact).toBe(true);
    expect(rebuild(all)).toEqual(parseResponse(text));
    expect(rebuild(all)).toEqual({ reasoning: 'Check a.py.', content: 'Done.', toolCalls: [] });
  });

  it('an empty reasoning block is reasoning "" in both', () => {
    const text = '<think>\n\n</think>\n\nHi.';
    const { live, all } = stream([...text]);
    expect(rebuild(all)).toEqual(parseResponse(text));
    expect(live[0]).toEqual({ kind: 'reasoning', text: '' });
  });

  it('reports a guess the rest of the text contradicts (truncated reasoning, a stray </think>)', () => {
    for (const text of [
      '<think>\nStill thinking when the budget ran out',
      'Plain answer, then </think> stray',
    ]) {
      expect(stream([...text]).exact).toBe(false);
    }
  });
});

describe('IncrementalDecoder', () => {
  it('token by token, the text deltas add up to the decode of the output without its stop token', async () => {
    const tok = await qwen3();
    const text = `<think>\n漢字と絵文字 🙂🚀 é\n</think>\n\nDone: ${CALL}`;
    const ids = [...tok.encode(text), tok.eosTokenId];
    const decoder = new IncrementalDecoder(tok);
    let out = '';
    for (const id of ids) {
      const piece = decoder.push([id]);
      expect(piece).not.toContain('\uFFFD');
      out += piece;
    }
    out += decoder.end();
    expect(out).toBe(text);
    expect(out).toBe(tok.decode(ids.slice(0, -1)));
  });

  it('a stop token that is not last is text', async () => {
    const tok = await qwen3();
    const ids = [...tok.encode('a'), tok.eosTokenId, ...tok.encode('b')];
    const decoder = new IncrementalDecoder(tok);
    const out = ids.map((id) => decoder.push([id])).join('') + decoder.end();
    expect(out).toBe(tok.decode(ids));
  });
});
