import { describeValue, parseWith, ValidationError } from '@vime/core';
import { z } from 'zod';
import { isTensor, loadTorchFile, type TorchDtype, type TorchTensor, tensorNumbers } from '../pt/torch.js';

/**
 * slime's debug dumps (`--save-debug-rollout-data`, `--save-debug-train-data`) read from their bytes
 * and validated: the rollout dump's raw samples, and the train dump's per-sample trainer tensors.
 */

const tensor = (dtypes: readonly TorchDtype[], rank: number) =>
  z.custom<TorchTensor>((v) => isTensor(v) && dtypes.includes(v.dtype) && v.shape.length === rank, {
    message: `expected a ${rank === 0 ? 'scalar' : `${rank}-d`} tensor of ${dtypes.join(' | ')}`,
  });
const floats = tensor(['float32', 'float64', 'bfloat16', 'float16'], 1).transform((t) =>
  Float32Array.from(t.data as ArrayLike<number>),
);
const mask = tensor(['int32', 'int64', 'bool', 'uint8', 'int8'], 1).transform((t) =>
  Uint8Array.from(tensorNumbers(t), (x) => (x ? 1 : 0)),
);
const ids = tensor(['int64', 'int32'], 1).transform((t) => Int32Array.from(tensorNumbers(t)));
const int = z.number().int();
const rewardValue = z.union([z.number(), z.record(z.string(), z.unknown())]).nullable();

/** One sample of a rollout dump: `Sample.to_dict()` (only the fields the check reads are typed). */
export const RolloutDumpSampleSchema = z.looseObject({
  group_index: int.nullable(),
  index: int.nullable(),
  rollout_id: int.nullable().optional(),
  response_length: int.nonnegative(),
  reward: rewardValue,
  loss_mask: z.array(int).nullable(),
  status: z.string(),
  remove_sample: z.boolean().optional(),
  session_id: z.string().nullable().optional(),
});
/** One sample of a rollout dump. */
export type RolloutDumpSample = z.infer<typeof RolloutDumpSampleSchema>;

/** Schema of slime's rollout dump (`--save-debug-rollout-data`). */
export const RolloutDumpSchema = z.looseObject({
  rollout_id: int,
  samples: z.array(RolloutDumpSampleSchema).min(1),
});
/** slime's rollout dump: one rollout's samples. */
export type RolloutDump = z.infer<typeof RolloutDumpSchema>;

/**
 * One training sample of a train dump: the trainer's columns, tensors as typed arrays. The columns
 * the check reads are required; bookkeeping ones are optional.
 */
export const TrainDumpSampleSchema = z.looseObject({
  data_parallel_rank: int.optional(),
  sample_index: int.nullable().optional(),
  rollout_position: int.nonnegative(),
  tokens: ids.optional(),
  response_lengths: int.nonnegative(),
  rewards: z.number(),
  loss_masks: mask,
  rollout_ids: int.optional(),
  rollout_mask_sums: tensor(['float32', 'float64'], 0)
    .transform((t) => Number(t.data[0]))
    .optional(),
  local_raw_reward: rewardValue.optional(),
  rollout_log_probs: floats.optional(),
  log_probs: floats.optional(),
  ref_log_probs: floats.optional(),
  teacher_log_probs: floats.optional(),
  values: floats.optional(),
  advantages: floats,
  returns: floats.optional(),
  kl: floats.optional(),
});
/** One sample of a train dump. */
export type TrainDumpSample = z.infer<typeof TrainDumpSampleSchema>;

/** Schema of slime's train dump (`--save-debug-train-data`). */
export const TrainDumpSchema = z.looseObject({
  format_version: z.literal(2),
  rollout_id: int,
  rank: int.optional(),
  samples: z.array(TrainDumpSampleSchema).min(1),
  dp_shards: z.array(z.record(z.string(), z.unknown())).optional(),
  raw_reward: z.array(rewardValue).optional(),
});
/** slime's train dump: what the trainer computed for one rollout. */
export type TrainDump = z.infer<typeof TrainDumpSchema>;

/** Read a `--save-debug-rollout-data` file (`rollout_data/<id>.pt`). */
export function readRolloutDump(bytes: Uint8Array, what = 'rollout dump'): RolloutDump {
  const { value } = loadTorchFile(bytes, what);
  if (value && typeof value === 'object' && 'format_version' in value) {
    throw new ValidationError(
      what,
      'this is a train dump (it has format_version); pass the rollout_data/<id>.pt file here',
      {
        code: 'decode_error',
      },
    );
  }
  return parseWith(RolloutDumpSchema, value, `slime rollout dump (${what})`, { code: 'decode_error' });
}

/** Read a `--save-debug-train-data` file (`train_data/<id>.pt`, format_version 2). */
export function readTrainDump(bytes: Uint8Array, what = 'train dump'): TrainDump {
  const { value } = loadTorchFile(bytes, what);
  if (value && typeof value === 'object' && !('format_version' in value) && 'samples' in value) {
    throw new ValidationError(
      what,
      'this is a rollout dump (no format_version); pass the train_data/<id>.pt file here',
      {
        code: 'decode_error',
      },
    );
  }
  const dump = parseWith(TrainDumpSchema, value, `slime train dump (${what})`, { code: 'decode_error' });
  dump.samples.forEach((s, i) => {
    for (const key of [
      'loss_masks',
      'advantages',
      'returns',
      'log_probs',
      'ref_log_probs',
      'kl',
      'values',
    ] as const) {
      const column = s[key];
      if (column && column.length !== s.response_lengths) {
        throw new ValidationError(
          `samples[${i}].${key}`,
          `holds ${column.length} tokens but response_lengths is ${s.response_lengths}: the dump is inconsistent (context-parallel fields not gathered?)`,
          { code: 'decode_error' },
        );
      }
    }
  });
  return dump;
}

/** The scalar of a raw reward: a number, or `reward[rewardKey]` for dict rewards (slime `--reward-key`). */
export function rewardScalar(reward: unknown, rewardKey: string | undefined, where: string): number {
  if (typeof reward === 'number') return reward;
  if (reward && typeof reward === 'object') {
    if (rewardKey === undefined) {
      throw new ValidationError(
        where,
        `reward is a dict (keys ${Object.keys(reward).join(', ')}); pass rewardKey (slime --reward-key) to pick the scalar`,
      );
    }
    const v = (reward as Record<string, unknown>)[rewardKey];
    if (typeof v === 'number') return v;
    throw new ValidationError(`${where}.${rewardKey}`, `expected a number, found ${describeValue(v)}`);
  }
  throw new ValidationError(
    where,
    `expected a numeric reward, found ${describeValue(reward)} (a failed or unscored sample?)`,
  );
}
