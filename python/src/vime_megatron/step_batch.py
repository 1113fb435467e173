"""One training step's inputs, from one step batch file: validated samples, GRPO advantages, reducer sums.

Shared by both loop-trainer backends so that they train on exactly the same numbers; the maths is
`batch.py`'s (slime's reward post-processing and reducer denominators).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .batch import BatchError, infer_group_size, normalize_rewards, read_batch, rollout_mask_sums, to_train_samples


@dataclass
class StepBatch:
    raw: list[dict[str, Any]]  # the sample maps as read (the rollout dump's content)
    samples: list  # TrainSample, in rollout order
    advantages: list[float]  # per sample: the group-normalised reward (GRPO broadcasts it to every token)
    mask_sums: list[float]  # per sample: loss-mask total of its rollout id
    n_samples_per_prompt: int

    @property
    def num_rollouts(self) -> int:
        return len({s.rollout_id for s in self.samples})

    @property
    def tokens(self) -> int:
        return sum(s.total_length for s in self.samples)

    @property
    def trained_tokens(self) -> int:
        return sum(sum(s.loss_mask) for s in self.samples)


def load_step_batch(
    path: str,
    vocab_size: int,
    n_samples_per_prompt: int | None = None,
    std_normalization: bool = True,
) -> StepBatch:
    """Read and validate `path`; every error is a `BatchError` naming the sample and the field."""
    raw = read_batch(path)
    samples = to_train_samples(raw, vocab_size=vocab_size)
    if n_samples_per_prompt is None:
        fanned = per_rollout_advantages(raw, samples, std_normalization)
        if fanned is not None:
            return StepBatch(raw, samples, fanned[0], rollout_mask_sums(samples), fanned[1])
    n = n_samples_per_prompt or infer_group_size(raw)
    if len(samples) % n:
        raise BatchError(
            f"{len(samples)} samples do not split into groups of n_samples_per_prompt={n}; "
            "every prompt needs the same number of samples"
        )
    advantages = normalize_rewards([s.raw_reward for s in samples], n, len(samples) // n, std_normalization)
    return StepBatch(raw, samples, advantages, rollout_mask_sums(samples), n)


def per_rollout_advantages(
    raw: list[dict[str, Any]], samples: list, std_normalization: bool
) -> tuple[list[float], int] | None:
    """A batch with fan-out rows (a rollout recorded as several samples, sharing its rollout id): slime's
    normalisation over each group's rollouts, one reward per rollout, its advantage on each of its rows.
    None when no rollout has more than one row (slime's own per-row rule applies)."""
    ids = [s.rollout_id for s in samples]
    if len(set(ids)) == len(ids):
        return None
    groups: dict[Any, list[int]] = {}
    reward: dict[int, float] = {}
    for row, s in zip(raw, samples):
        members = groups.setdefault(row.get("group_index"), [])
        if s.rollout_id not in reward:
            reward[s.rollout_id] = s.raw_reward
            members.append(s.rollout_id)
    sizes = {len(m) for m in groups.values()}
    if None in groups or len(sizes) != 1:
        raise BatchError(f"rollouts per group differ ({sorted(sizes)}); every prompt needs the same number of rollouts")
    n = sizes.pop()
    order = [rid for members in groups.values() for rid in members]
    values = normalize_rewards([reward[r] for r in order], n, len(order) // n, std_normalization)
    by_rollout = dict(zip(order, values))
    return [by_rollout[s.rollout_id] for s in samples], n


@dataclass
class StepResult:
    """What a backend's optimizer step reports back."""

    log_probs: dict[int, Any]  # rollout position -> trainer log probs [R] (float32, CPU), before the update
    micro_batches: list[list[int]]  # rollout positions of each micro-batch, in training order
    loss: float  # slime's pg_loss: sum of per-sample token means / rollouts
    pg_clipfrac: float
    ppo_kl: float
    grad_norm: float
    updated: bool  # False when the step was skipped (non-finite gradient): the weights did not change
