/**
 * Model presets, as data: the Megatron architecture flags per model, as slime's
 * `scripts/models/<model>.sh` sets them, keyed by that script's name. Values come from each model's
 * Hugging Face `config.json`. The plan reads them; this file imports nothing.
 */
export const MODEL_ARCH_ARGS: Record<string, readonly string[]> = {
  'qwen3-14B.sh': [
    '--swiglu',
    '--num-layers',
    '40',
    '--hidden-size',
    '5120',
    '--ffn-hidden-size',
    '17408',
    '--num-attention-heads',
    '40',
    '--group-query-attention',
    '--num-query-groups',
    '8',
    '--kv-channels',
    '128',
    '--use-rotary-position-embeddings',
    '--disable-bias-linear',
    '--normalization',
    'RMSNorm',
    '--norm-epsilon',
    '1e-6',
    '--rotary-base',
    '1000000',
    '--vocab-size',
    '151936',
    '--qk-layernorm',
    '--untie-embeddings-and-output-weights',
  ],
};
