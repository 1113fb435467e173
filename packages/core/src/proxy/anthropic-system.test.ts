/**
 * Anthropic Messages requests with `system` messages between turns, as Claude Code sends them (its
 * environment notes follow the first user message): each becomes a system message in place; a non-text
 * block there is a 400 naming the block.
 */
import { describe, expect, it } from 'vitest';
import { parseAnthropicRequest, RequestError } from './dialects.js';

describe('Anthropic system messages between turns', () => {
  it('keeps each in place as a system message', () => {
    const req = parseAnthropicRequest(
      {
        max_tokens: 16,
        system: [{ type: 'text', text: 'top' }],
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'say hi' }] },
          {
            role: 'system',
            content: [
              { type: 'text', text: '# Environment' },
              { type: 'text', text: ' linux' },
            ],
          },
          { role: 'system', content: 'plain string' },
        ],
      },
      new Map(),
    );
    expect(req.messages).toEqual([
      { role: 'system', content: 'top' },
      { role: 'user', content: 'say hi' },
      { role: 'system', content: '# Environment linux' },
      { role: 'system', content: 'plain string' },
    ]);
  });

  it('refuses a non-text block in a system message with a 400', () => {
    const parse = () =>
      parseAnthropicRequest(
        {
          max_tokens: 16,
          messages: [
            { role: 'user', content: 'hi' },
            { role: 'system', content: [{ type: 'image', source: {} }] },
          ],
        },
        new Map(),
      );
    expect(parse).toThrow(RequestError);
    expect(parse).toThrow(/image/);
  });
});
