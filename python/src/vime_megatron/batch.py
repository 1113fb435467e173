"""Read a Vime sample batch and compute slime's per-sample training values from it.

The batch is what `encodeSamples` from @vime/core writes: one msgpack array of maps, each map the dict
slime's `Sample.to_dict()` produces. The group normalisation below follows slime's
`RolloutManager._post_process_rewards` (float32, positional groups of `n_samples_per_prompt`, unbiased
std plus 1e-6), so the advantages are recomputed here from raw rewards, never taken from the SDK.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgpack
import torch


class BatchError(ValueError):
    """The batch cannot be trained on; the message names the sample, the field and the fix."""


@dataclass
class TrainSample:
    """One sample as the trainer sees it (slime's per-sample training columns)."""

    rollout_position: int
    sample_index: int
    tokens: list[int]
    response_length: int
    loss_mask: list[int]
    rollout_log_probs: list[float]
    raw_reward: float | int
    truncated: int
    rollout_id: int
    source_name: str
    sample: dict[str, Any] = field(repr=False)

    @property
    def total_length(self) -> int:
        return len(self.tokens)

    @property
    def prompt_length(self) -> int:
        return len(self.tokens) - self.response_length


def read_batch(path: str) -> list[dict[str, Any]]:
    """Decode an `encodeSamples` msgpack file into slime sample dicts (rollout order)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        samples = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types
        raise BatchError(f"{path}: not a msgpack sample batch ({e}); write it with encodeSamples") from e
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        raise BatchError(f"{path}: expected an array of sample maps, found {type(samples).__name__}")
    if not samples:
        raise BatchError(f"{path}: the batch is empty; there is nothing to train on")
    return samples


def _number(value: Any, where: str, what: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BatchError(f"{where}: {what} must be a finite number, found {value!r}")
    return value


def to_train_samples(samples: list[dict[str, Any]], vocab_size: int | None = None) -> list[TrainSample]:
    """Validate slime's invariants and build the per-sample training columns.

    A sample without a numeric reward (failed or aborted rollouts carry none) is rejected rather than
    trained as reward 0. A sample with `remove_sample` keeps its place but gets an all-zero loss mask,
    as slime does. Samples without a `rollout_id` get fresh ids 0, 1, ... in rollout order.
    """
    out: list[TrainSample] = []
    fresh_id = 0
    for pos, s in enumerate(samples):
        where = f"sample [{pos}]"
        tokens = s.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise BatchError(f"{where}.tokens: expected a list of token ids, found {type(tokens).__name__}")
        n = s.get("response_length")
        if not isinstance(n, int) or isinstance(n, bool) or not 0 < n < len(tokens):
            raise BatchError(
                f"{where}.response_length: expected 1..{len(tokens) - 1} (the response tail of {len(tokens)} "
                f"tokens, after at least one prompt token), found {n!r}"
            )
        if vocab_size is not None:
            bad = next((t for t in tokens if not 0 <= t < vocab_size), None)
            if bad is not None:
                raise BatchError(
                    f"{where}.tokens: token id {bad} is outside the model's vocabulary [0, {vocab_size}); "
                    "pass --vocab-size of the tokenizer that produced the batch"
                )
        mask = s.get("loss_mask")
        if mask is None:
            mask = [1] * n
        if not isinstance(mask, list) or len(mask) != n or any(m not in (0, 1) for m in mask):
            raise BatchError(f"{where}.loss_mask: expected {n} entries of 0 or 1 (one per response token)")
        if s.get("remove_sample"):
            mask = [0] * n
        logp = s.get("rollout_log_probs")
        if not isinstance(logp, list) or len(logp) != n:
            raise BatchError(
                f"{where}.rollout_log_probs: expected {n} engine log probs (one per response token), "
                f"found {type(logp).__name__}; the policy loss takes its ratio against them"
            )
        for t, value in enumerate(logp):
            _number(value, f"{where}.rollout_log_probs[{t}]", "a log prob")
        reward = s.get("reward")
        if reward is None:
            raise BatchError(
                f"{where}.reward: missing (status {s.get('status')!r}); failed or aborted rollouts carry no "
                "reward and must be filtered out or re-run, not trained as reward 0"
            )
        if isinstance(reward, dict):
            raise BatchError(f"{where}.reward: a dict reward needs a reward key; store the scalar reward instead")
        _number(reward, f"{where}.reward", "the reward")
        index = s.get("index")
        rollout_id = s.get("rollout_id")
        if rollout_id is None:
            rollout_id = fresh_id
            fresh_id += 1
        metadata = s.get("metadata") or {}
        out.append(
            TrainSample(
                rollout_position=pos,
                sample_index=index if isinstance(index, int) else pos,
                tokens=tokens,
                response_length=n,
                loss_mask=[int(m) for m in mask],
                rollout_log_probs=[float(v) for v in logp],
                raw_reward=reward,
                truncated=1 if s.get("status") == "truncated" else 0,
                rollout_id=rollout_id,
                source_name=str(metadata.get("source", "unknown")) if isinstance(metadata, dict) else "unknown",
                sample=s,
            )
        )
    return out


def infer_group_size(samples: list[dict[str, Any]]) -> int:
    """`n_samples_per_prompt` from `group_index`: consecutive runs of one group each, all the same size.

    slime groups positionally, so a batch whose groups are interleaved or uneven would be normalised
    silently wrong; it is rejected here instead.
    """
    runs: list[tuple[Any, int]] = []
    for pos, s in enumerate(samples):
        g = s.get("group_index")
        if g is None:
            raise BatchError(f"sample [{pos}].group_index: missing; pass --n-samples-per-prompt instead")
        if runs and runs[-1][0] == g:
            runs[-1] = (g, runs[-1][1] + 1)
        else:
            if any(prev == g for prev, _ in runs):
                raise BatchError(
                    f"sample [{pos}].group_index: group {g} is not contiguous; order the batch by group "
                    "(slime normalises consecutive blocks of n_samples_per_prompt)"
                )
            runs.append((g, 1))
    sizes = {size for _, size in runs}
    if len(sizes) != 1:
        raise BatchError(
            f"group sizes differ ({sorted(sizes)}); slime needs n_samples_per_prompt samples in every group"
        )
    return sizes.pop()


def normalize_rewards(
    raw: list[float | int],
    n_samples_per_prompt: int,
    rollout_batch_size: int,
    std_normalization: bool = True,
) -> list[float]:
    """slime's GRPO reward post-processing: per-group mean removal and, by default, `/ (std + 1e-6)`.

    Computed in float32 on CPU with torch's unbiased std; a uniform group gives exactly 0. Returns
    Python floats holding float32 values, as slime's `.tolist()` does.
    """
    rewards = torch.tensor(raw, dtype=torch.float32)
    if len(raw) == n_samples_per_prompt * rollout_batch_size:
        rewards = rewards.reshape(-1, n_samples_per_prompt)
    else:
        rewards = rewards.view(-1, len(raw))  # slime's fallback: the whole batch is one group
    rewards = rewards - rewards.mean(dim=-1, keepdim=True)
    if std_normalization:
        rewards = rewards / (rewards.std(dim=-1, keepdim=True) + 1e-6)
    return rewards.flatten().tolist()


def rollout_mask_sums(samples: list[TrainSample]) -> list[float]:
    """Loss-mask total over all samples that share each sample's rollout id (slime's reducer denominator)."""
    totals: dict[int, int] = {}
    for s in samples:
        totals[s.rollout_id] = totals.get(s.rollout_id, 0) + sum(s.loss_mask)
    return [float(totals[s.rollout_id]) for s in samples]
