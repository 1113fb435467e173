"""A step batch with fan-out rows: a rollout the capture proxy recorded as two samples (same rollout id)."""

from __future__ import annotations

import msgpack
import pytest
import torch

from vime_megatron.batch import BatchError
from vime_megatron.step_batch import load_step_batch


def row(group: int, rollout: int, reward: float) -> dict:
    return {"group_index": group, "index": rollout, "rollout_id": rollout, "tokens": [1, 2, 3, 4], "response_length": 2,
            "loss_mask": [1, 1], "rollout_log_probs": [-0.5, -0.25], "reward": reward, "status": "completed"}


def write(tmp_path, rows) -> str:
    path = tmp_path / "1.msgpack"
    path.write_bytes(msgpack.packb(rows))
    return str(path)


def test_a_rollout_of_two_rows_counts_once_in_its_group(tmp_path):
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    rows = [row(i // 4, i, r) for i, r in enumerate(rewards)]
    rows.insert(2, row(0, 1, 0.0))  # rollout 1 again: a second recorded segment, same reward
    batch = load_step_batch(write(tmp_path, rows), vocab_size=16)
    assert batch.n_samples_per_prompt == 4 and batch.num_rollouts == 8
    per_rollout = torch.tensor(rewards).reshape(2, 4)
    expected = ((per_rollout - per_rollout.mean(-1, keepdim=True)) / (per_rollout.std(-1, keepdim=True) + 1e-6)).flatten()
    by_id = {s.rollout_id: a for s, a in zip(batch.samples, batch.advantages)}
    assert [by_id[i] for i in range(8)] == expected.tolist()
    assert batch.advantages[1] == batch.advantages[2]  # both rows of rollout 1


def test_groups_with_different_rollout_counts_are_refused(tmp_path):
    rows = [row(0, 0, 1.0), row(0, 1, 0.0), row(0, 1, 0.0), row(1, 2, 1.0)]
    with pytest.raises(BatchError, match="rollouts per group differ"):
        load_step_batch(write(tmp_path, rows), vocab_size=16)
