import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { ConfigError } from '../../errors.js';
import { EncodePool } from './encode-pool.js';
import {
  hermesToolParser,
  type ParsedResponse,
  parseResponse,
  type ReasoningParser,
  type ToolCallParser,
  thinkReasoningParser,
} from './parsers.js';
import { type ChatRenderer, nativeRenderer } from './renderers.js';
import { SpecialTextEscaper, withoutAddedTokens } from './special-text.js';
import type { RenderOptions, TemplateMessage } from './template.js';

/** Options of `loadTokenizer`. */
export interface LoadTokenizerOptions {
  /** Override the chat template found in `tokenizer_config.json`. */
  chatTemplate?: string | undefined;
  toolParser?: ToolCallParser | null | undefined;
  reasoningParser?: ReasoningParser | null | undefined;
  /**
   * `auto` (default): a built-in native renderer when the template is a known one (same output,
   * no Jinja interpreter on the hot path), else Jinja. `jinja`: always interpret the template.
   */
  renderer?: 'auto' | 'jinja' | ChatRenderer | undefined;
  /** Worker threads for `encodeAsync` on long inputs (default 1; started on first use). */
  encodeWorkers?: number | undefined;
  /** The text of `tokenizer.json` when at hand (what the workers are sent; else it is re-serialised). */
  tokenizerJsonText?: string | undefined;
  signal?: AbortSignal | undefined;
}

/**
 * What special-token text (`<|im_start|>`, …) inside harness content becomes: `special` (the default, as
 * SGLang and vLLM tokenize a rendered chat) the special token itself; `text` plain text, so content cannot
 * inject markup. The template's own markup is special either way, and assistant messages are kept as is.
 */
export type SpecialTokenText = 'special' | 'text';

/** Options of encoding a conversation: the template's, and how special-token text in content is treated. */
export interface EncodeChatOptions extends RenderOptions {
  specialTokenText?: SpecialTokenText | undefined;
}

const SEGMENT_CACHE_LIMIT = 20_000;
/** Cached text in characters, all segments together (a few huge tool outputs must not pin memory). */
const SEGMENT_CACHE_CHARS = 32 * 1024 * 1024;
/**
 * Uncached text up to this many characters is encoded inline by `encodeAsync` (a few milliseconds of
 * BPE at most; a worker hop would cost more than it saves); longer text goes to a worker thread.
 */
export const INLINE_ENCODE_CHARS = 16 * 1024;

/**
 * A model's tokenizer and chat template, loaded from its `tokenizer.json` + `tokenizer_config.json`.
 * Rendering and tokenization run in-process, so the prompt ids sent to the engine are known exactly.
 */
export class ChatTokenizer {
  readonly eosToken: string;
  readonly eosTokenId: number;
  readonly chatTemplate: string;
  readonly toolParser: ToolCallParser | null;
  readonly reasoningParser: ReasoningParser | null;
  readonly #tokenizer: Tokenizer;
  readonly #template: Template;
  readonly #native: ChatRenderer | undefined;
  readonly #config: Record<string, unknown>;
  /** Splits text around added tokens; pieces between them tokenize independently, so they are cached. */
  readonly #addedSplit: RegExp | undefined;
  readonly #addedIds = new Map<string, number>();
  readonly #segments = new Map<string, Int32Array>();
  /** Pieces of chats rendered with `specialTokenText: 'text'` (escaped; never mixed with the above). */
  readonly #escapedSegments = new Map<string, Int32Array>();
  readonly #specialTexts: string[] = [];
  readonly #escaper: SpecialTextEscaper;
  #plain: Tokenizer | undefined;
  #segmentChars = 0;
  readonly #tokenizerJson: Record<string, unknown>;
  readonly #encodeWorkers: number;
  readonly #tokenizerJsonText: string | undefined;
  #pool: EncodePool | undefined;
  /** Byte-level BPE: each id's bytes (or, for added tokens, its text), filled lazily; see `decode`. */
  readonly #byteLevel: boolean;
  readonly #pieces: Array<Uint8Array | string | undefined> = [];
  readonly #addedById = new Map<number, string>();
  readonly #specialIds = new Set<number>();
  readonly #utf8 = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
  #vocabSize: number | undefined;

  constructor(
    tokenizerJson: Record<string, unknown>,
    config: Record<string, unknown>,
    options: Omit<LoadTokenizerOptions, 'signal'> = {},
  ) {
    this.#tokenizer = new Tokenizer(tokenizerJson, config);
    this.#tokenizerJson = tokenizerJson;
    this.#encodeWorkers = options.encodeWorkers ?? 1;
    this.#tokenizerJsonText = options.tokenizerJsonText;
    this.#config = config;
    const template = options.chatTemplate ?? pickTemplate(config.chat_template);
    if (template === undefined) {
      throw new ConfigError(
        'tokenizer_config.json has no chat_template; pass { chatTemplate } to loadTokenizer with the model’s Jinja template',
      );
    }
    this.chatTemplate = template;
    this.#template = new Template(template);
    const renderer = options.renderer ?? 'auto';
    this.#native =
      typeof renderer === 'function' ? renderer : renderer === 'auto' ? nativeRenderer(template) : undefined;
    this.toolParser = options.toolParser === undefined ? hermesToolParser : options.toolParser;
    this.reasoningParser =
      options.reasoningParser === undefined ? thinkReasoningParser : options.reasoningParser;
    const eos = tokenText(config.eos_token);
    if (eos === undefined) throw new ConfigError('tokenizer_config.json has no eos_token');
    this.eosToken = eos;
    const eosId = this.#tokenizer.token_to_id(eos);
    if (eosId === undefined)
      throw new ConfigError(`eos_token ${JSON.stringify(eos)} is not in the vocabulary`);
    this.eosTokenId = eosId;

    const added = (tokenizerJson.added_tokens ?? []) as Array<Record<string, unknown>>;
    const cacheable =
      added.every((t) => !t.lstrip && !t.rstrip && !t.normalized) &&
      !JSON.stringify(tokenizerJson.pre_tokenizer ?? null).includes('Metaspace');
    const extraSpecial = new Set((config.additional_special_tokens ?? []) as string[]);
    for (const t of added) {
      this.#addedIds.set(String(t.content), Number(t.id));
      this.#addedById.set(Number(t.id), String(t.content));
      if (t.special || extraSpecial.has(String(t.content))) {
        this.#specialIds.add(Number(t.id));
        this.#specialTexts.push(String(t.content));
      }
    }
    this.#escaper = new SpecialTextEscaper(this.#specialTexts);
    this.#byteLevel =
      (tokenizerJson.decoder as { type?: string | undefined } | undefined)?.type === 'ByteLevel';
    if (cacheable && added.length > 0) {
      const alternatives = [...this.#addedIds.keys()]
        .sort((a, b) => b.length - a.length)
        .map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
      this.#addedSplit = new RegExp(`(${alternatives.join('|')})`);
    }
  }

  /** Token ids of `text` (no special tokens added; special-token text maps to its id). */
  encode(text: string): Int32Array {
    return this.#encodeSync(text, false);
  }

  /**
   * `encode` for inputs of any size without holding the event loop: uncached text longer than
   * `INLINE_ENCODE_CHARS` is encoded on a worker thread (`encodeWorkers`); short input stays inline. An
   * abort stops the work at once.
   */
  encodeAsync(text: string, options: { signal?: AbortSignal | undefined } = {}): Promise<Int32Array> {
    return this.#encodeAsync(text, false, options.signal);
  }

  /** Render and tokenize: the exact prompt ids an engine is sent. */
  encodeChat(messages: readonly TemplateMessage[], options: EncodeChatOptions = {}): Int32Array {
    return this.#encodeSync(this.renderChat(messages, options), options.specialTokenText === 'text');
  }

  /** `encodeChat` with `encodeAsync`'s off-the-loop tokenization of long inputs. */
  encodeChatAsync(
    messages: readonly TemplateMessage[],
    options: EncodeChatOptions & { signal?: AbortSignal | undefined } = {},
  ): Promise<Int32Array> {
    return this.encodeRenderedAsync(this.renderChat(messages, options), options);
  }

  /** The exact text `encodeChat` tokenizes: the rendered chat, special-token text escaped when asked. */
  renderChat(messages: readonly TemplateMessage[], options: EncodeChatOptions = {}): string {
    const escaped = options.specialTokenText === 'text';
    return this.render(escaped ? this.#escaper.escapeMessages(messages) : messages, options);
  }

  /**
   * Tokenize text from `renderChat`, or a slice of it that starts at a special token or a message
   * boundary: the ids `encodeChat` gives for that stretch (the capture proxy renders a whole chat and
   * tokenizes only the part after the history it already holds).
   */
  encodeRenderedAsync(
    text: string,
    options: { specialTokenText?: SpecialTokenText | undefined; signal?: AbortSignal | undefined } = {},
  ): Promise<Int32Array> {
    return this.#encodeAsync(text, options.specialTokenText === 'text', options.signal);
  }

  /** Stop the encode workers (they never keep the process alive; this frees them early). */
  async close(): Promise<void> {
    await this.#pool?.close();
    this.#pool = undefined;
  }

  #encodeSync(text: string, escaped: boolean): Int32Array {
    const { pieces, parts } = this.#split(text, escaped);
    for (let i = 0; i < parts.length; i++) parts[i] ??= this.#encodePiece(pieces[i]!, escaped);
    return concat(parts as Int32Array[]);
  }

  async #encodeAsync(text: string, escaped: boolean, signal: AbortSignal | undefined): Promise<Int32Array> {
    const { pieces, parts } = this.#split(text, escaped);
    const todo: number[] = [];
    let chars = 0;
    for (let i = 0; i < parts.length; i++) {
      if (parts[i] === undefined) {
        todo.push(i);
        chars += pieces[i]!.length;
      }
    }
    if (chars <= INLINE_ENCODE_CHARS) {
      for (const i of todo) parts[i] = this.#encodePiece(pieces[i]!, escaped);
      return concat(parts as Int32Array[]);
    }
    // The split alone of a long text takes a while: let other work run before the worker hop.
    await new Promise((resolve) => setImmediate(resolve));
    if (signal?.aborted) throw signal.reason;
    this.#pool ??= new EncodePool(
      () => ({
        tokenizerJson: this.#tokenizerJsonText ?? JSON.stringify(this.#tokenizerJson),
        config: this.#config,
        specials: this.#specialTexts,
      }),
      this.#encodeWorkers,
    );
    // A chat of many short messages repeats its pieces (role headers, newlines): each is encoded once.
    const unique = [...new Set(todo.map((i) => pieces[i]!))];
    const plain = unique.map((piece) => escaped && SpecialTextEscaper.holdsEscapes(piece));
    const texts = unique.map((piece, k) => (plain[k] ? this.#escaper.unescape(piece) : piece));
    const ids = await this.#pool.encode(texts, plain, signal);
    const byPiece = new Map(unique.map((piece, k) => [piece, ids[k]!]));
    for (const at of todo) parts[at] = byPiece.get(pieces[at]!)!;
    if (this.#addedSplit) for (const [k, piece] of unique.entries()) this.#remember(piece, ids[k]!, escaped);
    return concat(parts as Int32Array[]);
  }

  /** Text split at added tokens: added tokens and cached pieces resolved, the rest left undefined. */
  #split(text: string, escaped: boolean): { pieces: string[]; parts: Array<Int32Array | undefined> } {
    if (!this.#addedSplit) return { pieces: [text], parts: [undefined] };
    const cache = escaped ? this.#escapedSegments : this.#segments;
    const pieces = text.split(this.#addedSplit);
    const parts: Array<Int32Array | undefined> = new Array(pieces.length);
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i]!;
      if (piece === '') parts[i] = EMPTY;
      else if (i % 2 === 1) parts[i] = Int32Array.of(this.#addedIds.get(piece)!);
      else parts[i] = cache.get(piece);
    }
    return { pieces, parts };
  }

  /** One piece's ids; in escaped text a piece holding escapes is restored and encoded as plain text. */
  #encodePiece(piece: string, escaped: boolean): Int32Array {
    const plain = escaped && SpecialTextEscaper.holdsEscapes(piece);
    const tokenizer = plain ? this.#plainTokenizer() : this.#tokenizer;
    const ids = Int32Array.from(
      tokenizer.encode(plain ? this.#escaper.unescape(piece) : piece, { add_special_tokens: false }).ids,
    );
    if (this.#addedSplit) this.#remember(piece, ids, escaped);
    return ids;
  }

  #plainTokenizer(): Tokenizer {
    this.#plain ??= new Tokenizer(withoutAddedTokens(this.#tokenizerJson, this.#specialTexts), this.#config);
    return this.#plain;
  }

  #remember(piece: string, ids: Int32Array, escaped: boolean): void {
    if (piece.length > SEGMENT_CACHE_CHARS / 4) return;
    if (
      this.#segments.size + this.#escapedSegments.size >= SEGMENT_CACHE_LIMIT ||
      this.#segmentChars + piece.length > SEGMENT_CACHE_CHARS
    ) {
      this.#segments.clear();
      this.#escapedSegments.clear();
      this.#segmentChars = 0;
    }
    // a view is copied, so the cache does not keep the whole buffer it points into alive
    const own = ids.byteLength === ids.buffer.byteLength ? ids : ids.slice();
    (escaped ? this.#escapedSegments : this.#segments).set(piece, own);
    this.#segmentChars += piece.length;
  }

  /** Text of `ids` (special tokens kept unless `skipSpecialTokens`). */
  decode(ids: ArrayLike<number>, options: { skipSpecialTokens?: boolean | undefined } = {}): string {
    if (ids.length === 0) return '';
    const skip = options.skipSpecialTokens ?? false;
    if (!this.#byteLevel) {
      return this.#tokenizer.decode(Array.from(ids), {
        skip_special_tokens: skip,
        clean_up_tokenization_spaces: false,
      });
    }
    // Byte-level BPE, as the library's ByteLevel decoder does it (bytes between added tokens decoded as
    // UTF-8, added tokens as their text) with the per-token work cached: decoding is on the hot path.
    let out = '';
    let bytes = new Uint8Array(256);
    let n = 0;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (skip && this.#specialIds.has(id)) continue;
      const piece = this.#piece(id);
      if (typeof piece === 'string') {
        if (n > 0) out += this.#utf8.decode(bytes.subarray(0, n));
        n = 0;
        out += piece;
        continue;
      }
      if (n + piece.length > bytes.length) {
        const grown = new Uint8Array(Math.max(bytes.length * 2, n + piece.length));
        grown.set(bytes.subarray(0, n));
        bytes = grown;
      }
      bytes.set(piece, n);
      n += piece.length;
    }
    if (n > 0) out += this.#utf8.decode(bytes.subarray(0, n));
    return out;
  }

  #piece(id: number): Uint8Array | string {
    let piece = this.#pieces[id];
    if (piece === undefined) {
      const added = this.#addedById.get(id);
      if (added !== undefined) piece = added;
      else {
        const token = this.#tokenizer.id_to_token(id) ?? '';
        const chars = [...token];
        piece = Uint8Array.from(chars, (c) => UNICODE_TO_BYTE.get(c) ?? 0);
      }
      if (id >= 0 && id < 1 << 24) this.#pieces[id] = piece;
    }
    return piece;
  }

  /** One more than the highest token id the tokenizer knows (its model vocabulary and added tokens). */
  get vocabSize(): number {
    if (this.#vocabSize === undefined) {
      const vocab = (this.#tokenizerJson.model as { vocab?: unknown } | undefined)?.vocab;
      // BPE/WordPiece map token → id; Unigram lists [token, score] pairs, ids by position.
      let size = Array.isArray(vocab) ? vocab.length : 0;
      if (vocab && !Array.isArray(vocab) && typeof vocab === 'object') {
        for (const id of Object.values(vocab)) if (typeof id === 'number' && id >= size) size = id + 1;
      }
      for (const id of this.#addedById.keys()) if (id >= size) size = id + 1;
      this.#vocabSize = size;
    }
    return this.#vocabSize;
  }

  /** The added tokens (special ones and the rest, e.g. `<think>`): their text and id. */
  get addedTokens(): ReadonlyMap<string, number> {
    return this.#addedIds;
  }

  /** The id of one token's text, or undefined. */
  tokenId(token: string): number | undefined {
    return this.#addedIds.get(token) ?? this.#tokenizer.token_to_id(token);
  }

  /** Whether rendering uses a native renderer instead of interpreting the Jinja template. */
  get nativeRendering(): boolean {
    return this.#native !== undefined;
  }

  /** Render messages with the model's chat template. */
  render(messages: readonly TemplateMessage[], options: RenderOptions = {}): string {
    if (this.#native) return this.#native(messages, options);
    return this.renderJinja(messages, options);
  }

  /** Render by interpreting the Jinja template (the reference the native renderers are tested against). */
  renderJinja(messages: readonly TemplateMessage[], options: RenderOptions = {}): string {
    const vars: Record<string, unknown> = {
      messages,
      add_generation_prompt: options.addGenerationPrompt ?? true,
      bos_token: tokenText(this.#config.bos_token) ?? '',
      eos_token: this.eosToken,
      ...options.templateKwargs,
    };
    if (options.tools && options.tools.length > 0) vars.tools = options.tools;
    return this.#template.render(vars);
  }

  /** Split raw output text into reasoning, content and tool calls with this model's parsers. */
  parseResponse(text: string): ParsedResponse {
    return parseResponse(text, { toolCalls: this.toolParser, reasoning: this.reasoningParser });
  }
}

const EMPTY = new Int32Array(0);

function concat(parts: readonly Int32Array[]): Int32Array {
  if (parts.length === 1) return parts[0]!.slice(); // never hand out a cached array
  let total = 0;
  for (const p of parts) total += p.length;
  const out = new Int32Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** GPT-2's byte-to-unicode table, reversed: the character a byte-level BPE vocabulary uses for each byte. */
const UNICODE_TO_BYTE: Map<string, number> = (() => {
  const map = new Map<string, number>();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    map.set(String.fromCharCode(printable ? b : 256 + extra++), b);
  }
  return map;
})();

function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object' && typeof (value as { content?: unknown }).content === 'string')
    return (value as { content: string }).content;
  return undefined;
}

function pickTemplate(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    const named = value as Array<{ name?: string | undefined; template?: string | undefined }>;
    return (named.find((t) => t.name === 'default') ?? named[0])?.template;
  }
  return undefined;
}

async function readJson(
  path: string,
  signal: AbortSignal | undefined,
): Promise<{ json: Record<string, unknown>; text: string }> {
  let text: string;
  try {
    text = await readFile(path, { encoding: 'utf8', ...(signal ? { signal } : {}) });
  } catch (cause) {
    throw new ConfigError(`cannot read ${path}: ${(cause as Error).message}; pass the model directory`, {
      cause,
    });
  }
  try {
    return { json: JSON.parse(text) as Record<string, unknown>, text };
  } catch (cause) {
    throw new ConfigError(`${path} is not valid JSON: ${(cause as Error).message}`, { cause });
  }
}

/**
 * Load a model's tokenizer and chat template from a directory holding `tokenizer.json` and
 * `tokenizer_config.json` (a Hugging Face model folder). A `chat_template.jinja` file, when present,
 * takes precedence over the config's `chat_template`, as in transformers.
 */
export async function loadTokenizer(dir: string, options: LoadTokenizerOptions = {}): Promise<ChatTokenizer> {
  const { signal, ...rest } = options;
  // Both reads run at once; when both fail, the error is tokenizer.json's, whichever failed first.
  const [jsonRead, configRead] = await Promise.allSettled([
    readJson(join(dir, 'tokenizer.json'), signal),
    readJson(join(dir, 'tokenizer_config.json'), signal),
  ]);
  if (jsonRead.status === 'rejected') throw jsonRead.reason;
  if (configRead.status === 'rejected') throw configRead.reason;
  const json = jsonRead.value;
  const config = configRead.value;
  let chatTemplate = rest.chatTemplate;
  if (chatTemplate === undefined) {
    chatTemplate = await readFile(join(dir, 'chat_template.jinja'), 'utf8').catch(() => undefined);
  }
  return new ChatTokenizer(json.json, config.json, {
    tokenizerJsonText: json.text,
    ...rest,
    chatTemplate,
  });
}
