/**
 * Whether an engine's tokenizer is the one held here. The proxy sends token ids; if the engine reads them
 * with another vocabulary, every sample is silently wrong. So before the first rollout a probe (code,
 * several scripts, whitespace runs, and every added token of the local tokenizer) is tokenized on both
 * sides and compared id by id, decoded back on the engine, and the local vocabulary's last id is decoded
 * there too (a smaller vocabulary has no such id). The engine's own wire is used: `/tokenize` and
 * `/detokenize` (vLLM, and SGLang where it serves them); an SGLang without them gets a one-token
 * `/generate` of the probe text whose input token ids (`logprob_start_len: 0`) and output are compared.
 */
import { z } from 'zod';
import { EngineError } from '../errors.js';
import { HttpClient } from '../utils/http.js';
import type { ChatTokenizer } from './tokenizer/tokenizer.js';
import type { EngineKind } from './types.js';

/** Text whose tokenization differs between vocabularies in many places at once. */
const PROBE_TEXT = [
  'def fix(self, items: list[int]) -> dict[str, float]:\n\treturn {"mean": sum(items) / 3.14e-2}  # ok',
  'diff --git a/src/app.py b/src/app.py\n@@ -1,3 +1,3 @@\n-    return a+b\n+    return a - b',
  'Naïve café — 日本語のテキスト, 한국어, Русский, emoji 🚀🤖, numbers 1234567890.',
  '    indented\r\n\t\ttabs  and   spaces\n\n\n',
].join('\n');

/** Options of `checkEngineTokenizer`: the engine's wire, a signal and a per-request timeout. */
export interface TokenizerCheckOptions {
  kind: EngineKind;
  signal?: AbortSignal | undefined;
  /** Per-request timeout (default 30 s). */
  timeoutMs?: number | undefined;
}

/** What `checkEngineTokenizer` found: the engine's tokenizer against the local one. */
export interface TokenizerCheck {
  /** `match`: the probe reads the same on both sides; `mismatch`: see `differences`; `unchecked`: see `reason`. */
  status: 'match' | 'mismatch' | 'unchecked';
  /** How the engine was asked: its `/tokenize` wire, or a probe `/generate`. */
  via?: 'tokenize' | 'generate' | undefined;
  /** The model the engine says it serves (`model_path`, or vLLM's model id), when it says. */
  model?: string | undefined;
  /** What differs, one sentence each. */
  differences: string[];
  reason?: string | undefined;
  /** Probe tokens compared. */
  probeTokens: number;
}

/** The probe: its text and the added tokens of the local tokenizer, each between spaces. */
export function tokenizerProbe(tokenizer: ChatTokenizer): string {
  return `${PROBE_TEXT} ${[...tokenizer.addedTokens.keys()].join(' ')}`;
}

const TokenizeResponse = z.looseObject({ tokens: z.array(z.number().int()) });
const DetokenizeResponse = z.looseObject({ text: z.string().optional(), prompt: z.string().optional() });
/** SGLang's `[logprob, id, text?]` entries. */
const TokenLogprobs = z.array(z.tuple([z.number().nullable(), z.number().int()], z.unknown()));
const ProbeGenerate = z.looseObject({
  text: z.string(),
  meta_info: z.looseObject({
    input_token_logprobs: TokenLogprobs.optional(),
    output_token_logprobs: TokenLogprobs.optional(),
  }),
});

const show = (text: string) => JSON.stringify(text.length > 24 ? `${text.slice(0, 24)}…` : text);

/** The first place two id lists differ, said with what each id means locally. */
function idDifference(
  tokenizer: ChatTokenizer,
  local: ArrayLike<number>,
  engine: readonly number[],
): string | undefined {
  const n = Math.min(local.length, engine.length);
  for (let i = 0; i < n; i++) {
    if (local[i] !== engine[i]) {
      const at = tokenizer.decode(Array.from(local).slice(i, i + 4));
      return `the probe tokenizes differently from token ${i} on (at ${show(at)}): the engine has id ${engine[i]} where the local tokenizer has ${local[i]}; the probe is ${engine.length} tokens there and ${local.length} here`;
    }
  }
  return local.length === engine.length
    ? undefined
    : `the probe is ${engine.length} tokens on the engine and ${local.length} here`;
}

/** An engine that prepends a BOS token on its own reads the rest the same: ignore that one token. */
function withoutBos(local: ArrayLike<number>, engine: readonly number[]): readonly number[] {
  return engine.length === local.length + 1 ? engine.slice(1) : engine;
}

/** What model the engine serves (for messages); undefined when it does not say. */
async function servedModel(
  client: HttpClient,
  kind: EngineKind,
  signal?: AbortSignal,
): Promise<string | undefined> {
  const path = kind === 'vllm' ? '/v1/models' : '/model_info';
  const response = await client.send({ method: 'GET', path, signal }).catch(() => undefined);
  if (response?.status !== 200) return undefined;
  try {
    const json = JSON.parse(response.text) as {
      model_path?: string | undefined;
      tokenizer_path?: string | undefined;
      data?: Array<{ id?: string | undefined; root?: string | undefined }> | undefined;
    };
    if (kind === 'vllm') return json.data?.[0]?.root ?? json.data?.[0]?.id;
    return json.tokenizer_path && json.tokenizer_path !== json.model_path
      ? `${json.model_path} (tokenizer ${json.tokenizer_path})`
      : json.model_path;
  } catch {
    return undefined;
  }
}

/** A JSON answer, or `undefined` when the engine does not serve `path` (404/405). */
async function post<S extends z.ZodType>(
  client: HttpClient,
  path: string,
  body: unknown,
  schema: S,
  signal?: AbortSignal,
): Promise<z.output<S> | { status: number; message: string } | undefined> {
  const response = await client.send({ method: 'POST', path, body, signal });
  if (response.status === 404 || response.status === 405) return undefined;
  if (response.status !== 200) return { status: response.status, message: response.text.slice(0, 200) };
  try {
    return schema.parse(JSON.parse(response.text));
  } catch (cause) {
    throw new EngineError(
      `POST ${response.url}: unexpected answer ${JSON.stringify(response.text.slice(0, 200))}`,
      {
        cause,
        url: response.url,
      },
    );
  }
}

const failed = (x: unknown): x is { status: number; message: string } =>
  typeof x === 'object' &&
  x !== null &&
  typeof (x as { status?: unknown }).status === 'number' &&
  'message' in x;

/** `/tokenize` + `/detokenize`: ids of the probe, its text back, and the local vocabulary's last id. */
async function viaTokenize(
  client: HttpClient,
  tokenizer: ChatTokenizer,
  kind: EngineKind,
  signal?: AbortSignal,
): Promise<Omit<TokenizerCheck, 'model'> | undefined> {
  const probe = tokenizerProbe(tokenizer);
  const local = tokenizer.encode(probe);
  const tokenized = await post(
    client,
    '/tokenize',
    { prompt: probe, add_special_tokens: false },
    TokenizeResponse,
    signal,
  );
  if (tokenized === undefined) return undefined;
  if (failed(tokenized))
    throw new EngineError(`POST ${client.url}/tokenize answered ${tokenized.status}: ${tokenized.message}`);
  const differences: string[] = [];
  const ids = idDifference(tokenizer, local, withoutBos(local, tokenized.tokens));
  if (ids) differences.push(ids);
  // SGLang skips special tokens when decoding unless told; vLLM keeps them.
  const decode = async (tokens: number[]) => {
    const body = kind === 'sglang' ? { tokens, skip_special_tokens: false } : { tokens };
    const answer = await post(client, '/detokenize', body, DetokenizeResponse, signal);
    if (answer === undefined || failed(answer)) return answer;
    return answer.text ?? answer.prompt ?? '';
  };
  // The text part only: how engines join special tokens when decoding is a convention, not the vocabulary.
  const plain = tokenizer.encode(PROBE_TEXT);
  const text = await decode(Array.from(plain));
  if (typeof text === 'string' && text !== tokenizer.decode(plain))
    differences.push(`the engine decodes the probe's ids to other text (${show(text)} …)`);
  const last = tokenizer.vocabSize - 1;
  const lastText = await decode([last]);
  if (failed(lastText) || (typeof lastText === 'string' && lastText !== tokenizer.decode([last])))
    differences.push(
      `vocabulary: id ${last}, the last here (${show(tokenizer.decode([last]))}), is ${failed(lastText) ? 'unknown to the engine' : show(lastText)} there: the engine's vocabulary is ${failed(lastText) || lastText === '' ? 'smaller' : 'another'} than the local ${tokenizer.vocabSize}`,
    );
  return {
    status: differences.length ? 'mismatch' : 'match',
    via: 'tokenize',
    differences,
    probeTokens: local.length,
  };
}

/** SGLang without `/tokenize`: a one-token generation of the probe text, its input ids and output compared. */
async function viaGenerate(
  client: HttpClient,
  tokenizer: ChatTokenizer,
  signal?: AbortSignal,
): Promise<Omit<TokenizerCheck, 'model'> | undefined> {
  const probe = tokenizerProbe(tokenizer);
  const local = tokenizer.encode(probe);
  const answer = await post(
    client,
    '/generate',
    {
      text: probe,
      rid: `vime-tokenizer-probe-${Date.now().toString(36)}`,
      sampling_params: { max_new_tokens: 1, temperature: 0, skip_special_tokens: false },
      return_logprob: true,
      logprob_start_len: 0,
    },
    ProbeGenerate,
    signal,
  );
  if (answer === undefined || failed(answer) || !answer.meta_info.input_token_logprobs) return undefined;
  const differences: string[] = [];
  const engineIds = answer.meta_info.input_token_logprobs.map((t) => t[1]);
  const ids = idDifference(tokenizer, local, withoutBos(local, engineIds));
  if (ids) differences.push(ids);
  const out = (answer.meta_info.output_token_logprobs ?? []).map((t) => t[1]);
  if (out.length > 0 && tokenizer.decode(out) !== answer.text)
    differences.push(
      `the engine's text of its output id ${out[0]} is ${show(answer.text)}, here ${show(tokenizer.decode(out))}`,
    );
  return {
    status: differences.length ? 'mismatch' : 'match',
    via: 'generate',
    differences,
    probeTokens: local.length,
  };
}

/**
 * Compare the engine at `url` with `tokenizer` (see the module comment). Transport failures and
 * unexpected answers throw `EngineError`; an engine that offers no way to check is `unchecked`.
 */
export async function checkEngineTokenizer(
  url: string,
  tokenizer: ChatTokenizer,
  options: TokenizerCheckOptions,
): Promise<TokenizerCheck> {
  const client = new HttpClient(url, {
    timeoutMs: options.timeoutMs ?? 30_000,
    service: `${options.kind} engine`,
  });
  try {
    const model = await servedModel(client, options.kind, options.signal);
    const result =
      (await viaTokenize(client, tokenizer, options.kind, options.signal)) ??
      (options.kind === 'sglang' ? await viaGenerate(client, tokenizer, options.signal) : undefined);
    if (result) return { ...result, model };
    return {
      status: 'unchecked',
      model,
      differences: [],
      probeTokens: 0,
      reason: `${url} serves no /tokenize${options.kind === 'sglang' ? ' and its /generate returns no input token ids' : ''}`,
    };
  } finally {
    await client.close();
  }
}
