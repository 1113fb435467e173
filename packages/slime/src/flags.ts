/**
 * The flags `train.py` / `train_async.py` understand. slime parses leniently (Megatron with
 * `ignore_unknown_args`, SGLang with `parse_known_args`), so a misspelled flag is silently ignored;
 * this allow-list is how Vime refuses it instead.
 */

/** slime's own flags (`slime/utils/arguments.py`, `slime/backends/sglang_utils/arguments.py`). */
const SLIME = [
  // cluster
  'actor-num-nodes',
  'actor-num-gpus-per-node',
  'rollout-num-gpus',
  'rollout-num-gpus-per-engine',
  'num-gpus-per-node',
  'colocate',
  'offload',
  'offload-train',
  'no-offload-train',
  'offload-rollout',
  'no-offload-rollout',
  // weight sync
  'update-weight-mode',
  'update-weight-transport',
  'update-weight-disk-dir',
  'update-weight-disk-keep-files',
  'update-weight-delta-encoding',
  'update-weight-delta-checksum',
  'update-weight-local-checkpoint-dir',
  'custom-update-weight-post-write-path',
  'update-weight-buffer-size',
  'update-weights-interval',
  'release-train',
  // rollout
  'hf-checkpoint',
  'rollout-function-path',
  'custom-generate-function-path',
  'custom-rollout-log-function-path',
  'custom-eval-rollout-log-function-path',
  'rollout-temperature',
  'rollout-top-p',
  'rollout-top-k',
  'rollout-max-context-len',
  'rollout-max-prompt-len',
  'rollout-max-response-len',
  'rollout-stop',
  'rollout-stop-token-ids',
  'rollout-shuffle',
  'rollout-seed',
  'over-sampling-batch-size',
  'dynamic-sampling-filter-path',
  'custom-reward-post-process-path',
  'partial-rollout',
  'rollout-external-engine-addrs',
  'rollout-sample-hook-path',
  'sglang-server-concurrency',
  'use-fault-tolerance',
  'rollout-health-check-interval',
  'rollout-health-check-timeout',
  'rollout-health-check-first-wait',
  // data / batch
  'prompt-data',
  'input-key',
  'label-key',
  'metadata-key',
  'apply-chat-template',
  'num-rollout',
  'num-epoch',
  'rollout-batch-size',
  'n-samples-per-prompt',
  'global-batch-size',
  'num-steps-per-rollout',
  'micro-batch-size',
  'use-dynamic-batch-size',
  'max-tokens-per-gpu',
  'balance-data',
  // algorithm
  'advantage-estimator',
  'use-kl-loss',
  'kl-loss-coef',
  'kl-loss-type',
  'kl-coef',
  'eps-clip',
  'eps-clip-high',
  'eps-clip-c',
  'entropy-coef',
  'normalize-advantages',
  'disable-grpo-std-normalization',
  'use-rollout-logprobs',
  'use-tis',
  'loss-type',
  'keep-old-actor',
  // checkpoints
  'load',
  'save',
  'save-interval',
  'ref-load',
  'ref-ckpt-step',
  // evaluation
  'eval-interval',
  'eval-prompt-data',
  // sglang wiring
  'sglang-router-ip',
  'sglang-router-port',
  'sglang-config',
  'prefill-num-servers',
  // logging
  'use-wandb',
  'wandb-project',
  'wandb-group',
  'wandb-team',
];

/** Megatron flags a slime run script commonly passes (model architecture, parallelism, optimizer, numerics). */
const MEGATRON = [
  'num-layers',
  'hidden-size',
  'ffn-hidden-size',
  'num-attention-heads',
  'group-query-attention',
  'num-query-groups',
  'kv-channels',
  'max-position-embeddings',
  'seq-length',
  'use-rotary-position-embeddings',
  'position-embedding-type',
  'rotary-base',
  'rotary-percent',
  'normalization',
  'norm-epsilon',
  'swiglu',
  'disable-bias-linear',
  'add-qkv-bias',
  'qk-layernorm',
  'untie-embeddings-and-output-weights',
  'vocab-size',
  'make-vocab-size-divisible-by',
  'num-experts',
  'moe-ffn-hidden-size',
  'moe-router-topk',
  'moe-grouped-gemm',
  'moe-token-dispatcher-type',
  'moe-router-score-function',
  'moe-router-load-balancing-type',
  'moe-aux-loss-coeff',
  'moe-shared-expert-intermediate-size',
  'moe-layer-freq',
  'moe-router-pre-softmax',
  'tensor-model-parallel-size',
  'pipeline-model-parallel-size',
  'context-parallel-size',
  'expert-model-parallel-size',
  'expert-tensor-parallel-size',
  'sequence-parallel',
  'decoder-last-pipeline-num-layers',
  'recompute-granularity',
  'recompute-method',
  'recompute-num-layers',
  'optimizer',
  'lr',
  'min-lr',
  'lr-decay-style',
  'lr-warmup-iters',
  'lr-warmup-fraction',
  'weight-decay',
  'adam-beta1',
  'adam-beta2',
  'adam-eps',
  'clip-grad',
  'optimizer-cpu-offload',
  'overlap-cpu-optimizer-d2h-h2d',
  'use-precision-aware-optimizer',
  'attention-dropout',
  'hidden-dropout',
  'accumulate-allreduce-grads-in-fp32',
  'attention-softmax-in-fp32',
  'attention-backend',
  'bf16',
  'fp16',
  'use-distributed-optimizer',
  'no-gradient-accumulation-fusion',
  'calculate-per-token-loss',
  'seed',
  'log-interval',
];

/** `--sglang-<ServerArg>` is open-ended, except the server args slime sets itself (these would be ignored). */
const SGLANG_SET_BY_SLIME = [
  'sglang-model-path',
  'sglang-tp-size',
  'sglang-port',
  'sglang-nnodes',
  'sglang-node-rank',
  'sglang-dist-init-addr',
  'sglang-nccl-port',
];

/** Flags slime accepts but Vime refuses, with the fix. */
export const REFUSED_FLAGS: Record<string, string> = {
  'wandb-key': 'pass WANDB_API_KEY through the runtime env (secrets never go in argv)',
  'update-weight-encoding':
    'slime has no such flag (it is silently ignored); use --update-weight-delta-encoding xor|overwrite',
};

/** Every slime and Megatron flag the allow-list accepts. */
export const KNOWN_FLAGS: ReadonlySet<string> = new Set([...SLIME, ...MEGATRON]);

/** Why `flag` (without dashes) is not accepted, or undefined when it is. */
export function flagProblem(flag: string, extra: ReadonlySet<string> = new Set()): string | undefined {
  if (REFUSED_FLAGS[flag]) return REFUSED_FLAGS[flag];
  if (SGLANG_SET_BY_SLIME.includes(flag)) return 'slime sets this SGLang server arg itself; remove it';
  if (KNOWN_FLAGS.has(flag) || extra.has(flag) || flag.startsWith('sglang-')) return undefined;
  return 'unknown flag (slime would silently ignore it)';
}
