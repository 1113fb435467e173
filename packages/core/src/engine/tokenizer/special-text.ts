/**
 * Special-token text inside content, encoded as plain text (`specialTokenText: 'text'`). Before the chat
 * is rendered, every special token's text in harness content is swapped for a private-use placeholder, so
 * splitting the rendered prompt at added tokens finds only the template's own markup; each text piece
 * holding placeholders is restored and encoded by a tokenizer without the special tokens. Literal
 * placeholder characters in content are escaped too, so content can never forge one.
 */
import type { TemplateMessage } from './template.js';

/** Marks an escape: followed by itself (a literal escape character) or by the index of a special token. */
const ESC = '\u{F0000}';
const FIRST = 0xf0001;

export class SpecialTextEscaper {
  readonly #specials: string[];
  readonly #find: RegExp;
  readonly #restore = /\u{F0000}(\u{F0000}|[\u{F0001}-\u{FFFFD}])/gu;

  constructor(specials: readonly string[]) {
    this.#specials = [...specials].sort((a, b) => b.length - a.length);
    const alternatives = this.#specials.map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
    this.#find = new RegExp(`${ESC}|${alternatives.join('|')}`, 'gu');
  }

  /** Messages whose non-assistant content has its special-token text escaped (model output is kept as is). */
  escapeMessages(messages: readonly TemplateMessage[]): TemplateMessage[] {
    return messages.map((m) => {
      if (m.role === 'assistant' || typeof m.content !== 'string') return m;
      this.#find.lastIndex = 0;
      if (!this.#find.test(m.content)) return m;
      return { ...m, content: this.escape(m.content) };
    });
  }

  escape(text: string): string {
    return text.replace(this.#find, (s) =>
      s === ESC ? ESC + ESC : ESC + String.fromCodePoint(FIRST + this.#specials.indexOf(s)),
    );
  }

  /** Whether a rendered piece holds escapes (only meaningful for text rendered from escaped messages). */
  static holdsEscapes(piece: string): boolean {
    return piece.includes(ESC);
  }

  unescape(piece: string): string {
    return piece.replace(this.#restore, (_, c: string) =>
      c === ESC ? ESC : this.#specials[c.codePointAt(0)! - FIRST]!,
    );
  }
}

/** `tokenizer.json` without the given added tokens: their text then encodes as plain text. */
export function withoutAddedTokens(
  tokenizerJson: Record<string, unknown>,
  drop: readonly string[],
): Record<string, unknown> {
  const added = (tokenizerJson.added_tokens ?? []) as Array<{ content?: string | undefined }>;
  return { ...tokenizerJson, added_tokens: added.filter((t) => !drop.includes(String(t.content))) };
}
