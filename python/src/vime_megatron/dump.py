"""Write slime's debug dumps (`--save-debug-rollout-data` / `--save-debug-train-data`, format_version 2).

Layout, key order and dtypes follow what slime's own trainer writes with dp = cp = tp = pp = 1:
`<dir>/rollout_data/{rollout_id}.pt` holds the raw sample dicts, `<dir>/train_data/{rollout_id}.pt`
the per-sample training columns of every sample, sorted by rollout position, plus one DP shard's
scheduling layout. Per-token tensors are compact float32/int32 copies, as `.cpu()` makes them after
GPU training; `rollout_mask_sums` are 0-d views into one float32 storage in rank-local order.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .batch import TrainSample

# slime's `Sample.to_dict()` key order (slime/utils/types.py).
SLIME_SAMPLE_FIELDS = (
    "group_index index rollout_id prompt tokens multimodal_inputs multimodal_train_inputs "
    "multimodal_train_input_id apply_chat_template_kwargs response response_length label reward loss_mask "
    "weight_versions rollout_log_probs rollout_top_p_token_ids rollout_top_p_token_offsets "
    "rollout_routed_experts remove_sample teacher_log_probs status metadata generate_function_path "
    "custom_rm_path train_metadata session_id non_generation_time spec_info prefix_cache_info"
).split()


def rollout_payload(rollout_id: int, samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The rollout dump: sample dicts in `Sample.to_dict()` order, extra attributes after the fields."""
    ordered = []
    for s in samples:
        d = {k: s[k] for k in SLIME_SAMPLE_FIELDS if k in s}
        d.update((k, v) for k, v in s.items() if k not in d)
        ordered.append(d)
    return {"rollout_id": rollout_id, "samples": ordered}


def train_payload(
    rollout_id: int,
    samples: list[TrainSample],
    rewards: list[float],
    mask_sums: list[float],
    log_probs: dict[int, torch.Tensor],
    micro_batches: list[list[int]],
    rank: int = 0,
) -> dict[str, Any]:
    """The train dump of one rollout trained on one DP rank.

    `rewards` are the group-normalised rewards (GRPO: advantages = returns = reward on every response
    token, masked ones included), `log_probs` the trainer's per-sample log probs by rollout position,
    `micro_batches` the rollout positions of each micro-batch in training order.
    """
    partition = [p for mb in micro_batches for p in mb]
    local = {p: i for i, p in enumerate(partition)}
    micro_batch_indices = [[local[p] for p in mb] for mb in micro_batches]
    sums = torch.tensor([mask_sums[p] for p in partition], dtype=torch.float32)

    rows = []
    for s in sorted(samples, key=lambda s: s.rollout_position):
        p = s.rollout_position
        n = s.response_length
        reward = torch.tensor(rewards[p], dtype=torch.float32)
        lp = log_probs[p].detach().to("cpu", torch.float32).contiguous()
        if lp.shape != (n,):
            raise ValueError(f"log probs of sample {p} have shape {tuple(lp.shape)}, expected ({n},)")
        rows.append(
            {
                "data_parallel_rank": 0,
                "sample_index": s.sample_index,
                "rollout_position": p,
                "tokens": torch.tensor(s.tokens, dtype=torch.int64),
                "response_lengths": n,
                "rewards": reward.item(),
                "truncated": s.truncated,
                "loss_masks": torch.tensor(s.loss_mask, dtype=torch.int32),
                "rollout_ids": s.rollout_id,
                "rollout_mask_sums": sums[local[p]],
                "source_names": s.source_name,
                "total_lengths": s.total_length,
                "local_raw_reward": s.raw_reward,
                "rollout_log_probs": torch.tensor(s.rollout_log_probs, dtype=torch.float32),
                "log_probs": lp.clone(),
                "advantages": reward.expand(n).clone(),
                "returns": reward.expand(n).clone(),
                "kl": torch.zeros(n, dtype=torch.float32),
            }
        )
    shard = {
        "rank": rank,
        "data_parallel_rank": 0,
        "sample_indices": [samples[p].sample_index for p in partition],
        "partition": partition,
        "global_batch_sizes": [len(samples)],
        "num_microbatches": [len(micro_batches)],
        "micro_batch_indices": micro_batch_indices,
    }
    return {
        "format_version": 2,
        "rollout_id": rollout_id,
        "rank": rank,
        "samples": rows,
        "dp_shards": [shard],
        "raw_reward": [s.raw_reward for s in samples],
    }


def save(payload: dict[str, Any], path: str) -> str:
    """`torch.save` to `path` (the archive root becomes the file stem, as slime's `{rollout_id}.pt`)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    torch.save(payload, path)
    return path
