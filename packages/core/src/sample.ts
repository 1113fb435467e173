import { z } from 'zod';
import { describeValue, ValidationError } from './errors.js';
import { parseWith, typedArray } from './validate.js';

/** slime's `Sample.Status` values. `failed`: recoverable failure (tool/API/parse error); `aborted`: cut off. */
export const SampleStatusSchema = z.enum(['pending', 'completed', 'truncated', 'aborted', 'failed']);
/** A sample's status, as slime's `Sample.Status`. */
export type SampleStatus = z.infer<typeof SampleStatusSchema>;

/** Schema of a chat message. */
export const ChatMessageSchema = z.looseObject({ role: z.string(), content: z.unknown() });
/** One chat message of a prompt: a role and its content. */
export type ChatMessage = z.infer<typeof ChatMessageSchema>;

const JsonRecord = z.record(z.string(), z.unknown());

/** Schema of slime's speculative decoding info. */
export const SpecInfoSchema = z.object({
  spec_accept_token_num: z.number().int(),
  spec_draft_token_num: z.number().int(),
  spec_verify_ct: z.number().int(),
  completion_token_num: z.number().int(),
});
/** slime's speculative decoding info of a sample. */
export type SpecInfo = z.infer<typeof SpecInfoSchema>;

/** Schema of slime's prefix cache info. */
export const PrefixCacheInfoSchema = z.object({
  cached_tokens: z.number().int(),
  total_prompt_tokens: z.number().int(),
});
/** slime's prefix cache info of a sample: cached and total prompt tokens. */
export type PrefixCacheInfo = z.infer<typeof PrefixCacheInfoSchema>;

const nullableInt = z.number().int().nullable();
/** A Python float: any IEEE double, NaN and ±Infinity included. */
const pyFloat = z.custom<number>((v) => typeof v === 'number', {
  message: 'expected a number (Python float)',
});

/** Fields whose shape is identical in memory and on the wire. */
const scalarFields = {
  group_index: nullableInt,
  index: nullableInt,
  rollout_id: nullableInt,
  prompt: z.union([z.string(), z.array(ChatMessageSchema)]),
  multimodal_inputs: JsonRecord.nullable(),
  multimodal_train_inputs: JsonRecord.nullable(),
  multimodal_train_input_id: z.string().nullable(),
  apply_chat_template_kwargs: JsonRecord,
  response: z.string(),
  response_length: z.number().int().nonnegative(),
  label: z.string().nullable(),
  reward: z.union([pyFloat, JsonRecord]).nullable(),
  weight_versions: z.array(z.string()),
  /**
   * MoE routing replay (R3): `[position][layer][k]` expert ids, one position per token but the last
   * (`len(tokens) − 1`), as slime's routing replay reads it (`slime/ray/rollout.py`).
   */
  rollout_routed_experts: z.array(z.array(z.array(z.number().int()))).nullable(),
  remove_sample: z.boolean(),
  status: SampleStatusSchema,
  metadata: JsonRecord,
  generate_function_path: z.string().nullable(),
  custom_rm_path: z.string().nullable(),
  train_metadata: JsonRecord.nullable(),
  session_id: z.string().nullable(),
  non_generation_time: pyFloat,
  spec_info: SpecInfoSchema,
  prefix_cache_info: PrefixCacheInfoSchema,
};

/**
 * One training row, with exactly slime's field names (`slime/utils/types.py: Sample`). In memory, token
 * ids are `Int32Array`, the loss mask `Uint8Array` and log probs `Float32Array`.
 */
export const SampleSchema = z.object({
  ...scalarFields,
  tokens: typedArray('Int32Array'),
  loss_mask: typedArray('Uint8Array').nullable(),
  rollout_log_probs: typedArray('Float32Array').nullable(),
  rollout_top_p_token_ids: typedArray('Int32Array').nullable(),
  rollout_top_p_token_offsets: typedArray('Int32Array').nullable(),
  teacher_log_probs: typedArray('Float32Array').nullable(),
  /** Keys slime does not define; `Sample.from_dict` sets them as attributes, so they travel along. */
  extra: JsonRecord.optional(),
});
/** One training row with exactly slime's field names. */
export type Sample = z.infer<typeof SampleSchema>;

const int = z.number().int();
/** The dict `Sample.to_dict()` produces and `Sample.from_dict()` accepts. */
export const SlimeSampleDictSchema = z.looseObject({
  ...scalarFields,
  tokens: z.array(int),
  loss_mask: z.array(int).nullable(),
  rollout_log_probs: z.array(z.number()).nullable(),
  rollout_top_p_token_ids: z.array(int).nullable(),
  rollout_top_p_token_offsets: z.array(int).nullable(),
  teacher_log_probs: z.array(z.number()).nullable(),
});
/** A sample as slime's `Sample.to_dict()` writes it. */
export type SlimeSampleDict = z.infer<typeof SlimeSampleDictSchema>;

/** slime's field names in declaration order (the order of `Sample.to_dict()`). */
export const SLIME_SAMPLE_FIELDS = [
  'group_index',
  'index',
  'rollout_id',
  'prompt',
  'tokens',
  'multimodal_inputs',
  'multimodal_train_inputs',
  'multimodal_train_input_id',
  'apply_chat_template_kwargs',
  'response',
  'response_length',
  'label',
  'reward',
  'loss_mask',
  'weight_versions',
  'rollout_log_probs',
  'rollout_top_p_token_ids',
  'rollout_top_p_token_offsets',
  'rollout_routed_experts',
  'remove_sample',
  'teacher_log_probs',
  'status',
  'metadata',
  'generate_function_path',
  'custom_rm_path',
  'train_metadata',
  'session_id',
  'non_generation_time',
  'spec_info',
  'prefix_cache_info',
] as const satisfies ReadonlyArray<keyof SlimeSampleDict>;

/** What `createSample` takes: any of `Sample`'s fields, the arrays also as plain number arrays. */
export type SampleInit = Partial<Omit<Sample, 'tokens' | 'loss_mask' | 'rollout_log_probs'>> & {
  tokens?: Int32Array | ArrayLike<number> | undefined;
  loss_mask?: Uint8Array | ArrayLike<number> | null | undefined;
  rollout_log_probs?: Float32Array | ArrayLike<number> | null | undefined;
};

/** Build a `Sample` with slime's defaults for every field not given. */
export function createSample(init: SampleInit = {}): Sample {
  const { tokens, loss_mask, rollout_log_probs, ...rest } = init;
  return {
    group_index: null,
    index: null,
    rollout_id: null,
    prompt: '',
    multimodal_inputs: null,
    multimodal_train_inputs: null,
    multimodal_train_input_id: null,
    apply_chat_template_kwargs: {},
    response: '',
    response_length: 0,
    label: null,
    reward: null,
    weight_versions: [],
    rollout_top_p_token_ids: null,
    rollout_top_p_token_offsets: null,
    rollout_routed_experts: null,
    remove_sample: false,
    teacher_log_probs: null,
    status: 'pending',
    metadata: {},
    generate_function_path: null,
    custom_rm_path: null,
    train_metadata: null,
    session_id: null,
    non_generation_time: 0,
    spec_info: {
      spec_accept_token_num: 0,
      spec_draft_token_num: 0,
      spec_verify_ct: 0,
      completion_token_num: 0,
    },
    prefix_cache_info: { cached_tokens: 0, total_prompt_tokens: 0 },
    ...rest,
    tokens: tokens instanceof Int32Array ? tokens : Int32Array.from(tokens ?? []),
    loss_mask:
      loss_mask == null ? null : loss_mask instanceof Uint8Array ? loss_mask : Uint8Array.from(loss_mask),
    rollout_log_probs:
      rollout_log_probs == null
        ? null
        : rollout_log_probs instanceof Float32Array
          ? rollout_log_probs
          : Float32Array.from(rollout_log_probs),
  };
}

/**
 * Check slime's invariants on the response part of a sample: per-token arrays have one entry per
 * response token, the response is the tail of `tokens`, the loss mask is 0/1. Throws `ValidationError`.
 */
export function assertSampleInvariants(sample: Sample, root = ''): void {
  const n = sample.response_length;
  const at = (field: string) => (root ? `${root}.${field}` : field);
  if (n > sample.tokens.length) {
    throw new ValidationError(
      at('response_length'),
      `response_length ${n} exceeds tokens length ${sample.tokens.length}; response_length counts the response tail of tokens`,
    );
  }
  const perToken = [
    ['loss_mask', sample.loss_mask],
    ['rollout_log_probs', sample.rollout_log_probs],
    ['teacher_log_probs', sample.teacher_log_probs],
  ] as const;
  for (const [field, arr] of perToken) {
    if (arr !== null && arr.length !== n) {
      throw new ValidationError(
        at(field),
        `expected one entry per response token (${n}), found ${describeValue(arr)}`,
      );
    }
  }
  if (sample.loss_mask) {
    for (let i = 0; i < sample.loss_mask.length; i++) {
      const m = sample.loss_mask[i]!;
      if (m > 1) throw new ValidationError(at(`loss_mask[${i}]`), `expected 0 or 1, found number ${m}`);
    }
  }
  const offsets = sample.rollout_top_p_token_offsets;
  if (offsets !== null && offsets.length !== n + 1) {
    throw new ValidationError(
      at('rollout_top_p_token_offsets'),
      `expected response_length + 1 = ${n + 1} offsets, found ${describeValue(offsets)}`,
    );
  }
  const routes = sample.rollout_routed_experts;
  if (routes !== null && routes.length !== Math.max(0, sample.tokens.length - 1)) {
    throw new ValidationError(
      at('rollout_routed_experts'),
      `expected one position per token but the last (${Math.max(0, sample.tokens.length - 1)}), found ${routes.length}`,
    );
  }
}

const toArray = (a: ArrayLike<number> | null): number[] | null => (a === null ? null : Array.from(a));

/** The exact dict slime's `Sample.to_dict()` produces (status as its string value, plain lists). */
export function toSlimeDict(sample: Sample): SlimeSampleDict {
  const dict: Record<string, unknown> = { ...(sample.extra ?? {}) };
  for (const field of SLIME_SAMPLE_FIELDS) dict[field] = sample[field];
  dict.tokens = Array.from(sample.tokens);
  dict.loss_mask = toArray(sample.loss_mask);
  dict.rollout_log_probs = toArray(sample.rollout_log_probs);
  dict.rollout_top_p_token_ids = toArray(sample.rollout_top_p_token_ids);
  dict.rollout_top_p_token_offsets = toArray(sample.rollout_top_p_token_offsets);
  dict.teacher_log_probs = toArray(sample.teacher_log_probs);
  dict.spec_info = { ...sample.spec_info };
  dict.prefix_cache_info = { ...sample.prefix_cache_info };
  return dict as SlimeSampleDict;
}

const DictInputSchema = SlimeSampleDictSchema.partial();

/**
 * Accept what slime's `Sample.from_dict()` accepts: any subset of the fields (missing ones take slime's
 * defaults); unknown keys are kept in `extra`. Throws `ValidationError` naming the field path.
 */
export function fromSlimeDict(obj: unknown, root = ''): Sample {
  const dict = parseWith(DictInputSchema, obj, 'slime sample dict', { root, code: 'decode_error' });
  const extra: Record<string, unknown> = {};
  const known = new Set<string>(SLIME_SAMPLE_FIELDS);
  for (const [k, v] of Object.entries(dict)) if (!known.has(k)) extra[k] = v;
  const {
    tokens,
    loss_mask,
    rollout_log_probs,
    rollout_top_p_token_ids,
    rollout_top_p_token_offsets,
    teacher_log_probs,
  } = dict;
  const init: SampleInit = {};
  for (const field of SLIME_SAMPLE_FIELDS) {
    if (dict[field] !== undefined) (init as Record<string, unknown>)[field] = dict[field];
  }
  const sample = createSample({
    ...init,
    tokens: Int32Array.from(tokens ?? []),
    loss_mask: loss_mask == null ? null : Uint8Array.from(loss_mask),
    rollout_log_probs: rollout_log_probs == null ? null : Float32Array.from(rollout_log_probs),
    rollout_top_p_token_ids:
      rollout_top_p_token_ids == null ? null : Int32Array.from(rollout_top_p_token_ids),
    rollout_top_p_token_offsets:
      rollout_top_p_token_offsets == null ? null : Int32Array.from(rollout_top_p_token_offsets),
    teacher_log_probs: teacher_log_probs == null ? null : Float32Array.from(teacher_log_probs),
  });
  if (Object.keys(extra).length > 0) sample.extra = extra;
  return sample;
}
