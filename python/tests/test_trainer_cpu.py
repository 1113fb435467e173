"""CPU tests of everything in the trainer except megatron.core itself (which needs CUDA).

Reference values come from slime's own functions (the repository's golden vectors) and slime's own dumps.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import msgpack
import pytest
import torch

from vime_megatron.batch import (
    BatchError,
    infer_group_size,
    normalize_rewards,
    read_batch,
    rollout_mask_sums,
    to_train_samples,
)
from vime_megatron.dry_run import main as dry_run
from vime_megatron.loss import SampleTerms, policy_loss, sum_of_sample_means
from vime_megatron.packing import build_row, next_token_log_probs, pack_microbatches, response_slices
from vime_testing import REPO

GOLDEN = REPO / "golden"
# The batch the trainer example's GPU run trained on (makeDemoBatch() through encodeSamples).
BATCH = REPO / "examples" / "megatron-trainer" / "evidence" / "batch.msgpack"


def golden(name: str) -> dict:
    return json.loads((GOLDEN / "grpo" / f"{name}.json").read_text())


def close(actual: float, expected: float) -> bool:
    return abs(actual - expected) <= 1e-6 + 1e-5 * abs(expected)


def write_batch(tmp_path: Path, samples: list[dict]) -> str:
    path = tmp_path / "batch.msgpack"
    path.write_bytes(msgpack.packb(samples, use_single_float=False))
    return str(path)


def sample(group: int, reward, prompt=(1, 2, 3), response=(4, 5), **extra) -> dict:
    return {
        "group_index": group,
        "index": None,
        "rollout_id": None,
        "tokens": [*prompt, *response],
        "response_length": len(response),
        "reward": reward,
        "loss_mask": [1] * len(response),
        "rollout_log_probs": [-1.0] * len(response),
        "status": "completed",
        "metadata": {},
        **extra,
    }


# ---------------------------------------------------------------------------------------------
# Batch reader


def test_reads_the_committed_vime_batch():
    raw = read_batch(str(BATCH))
    samples = to_train_samples(raw, vocab_size=1000)
    assert len(samples) == 16
    assert infer_group_size(raw) == 4
    assert list(raw[0])[:5] == ["group_index", "index", "rollout_id", "prompt", "tokens"]
    for s in samples:
        assert len(s.loss_mask) == len(s.rollout_log_probs) == s.response_length
        assert s.tokens[-s.response_length :] == raw[s.rollout_position]["tokens"][-s.response_length :]
        # Tool-observation tokens: loss mask 0 and rollout log prob 0.0, as slime writes them.
        assert all(lp == 0.0 for lp, m in zip(s.rollout_log_probs, s.loss_mask) if m == 0)
        assert all(lp < 0 for lp, m in zip(s.rollout_log_probs, s.loss_mask) if m == 1)
    assert [s.rollout_id for s in samples] == list(range(16))  # fresh ids when the batch has none
    assert sum(s.truncated for s in samples) == 4
    assert any(0 in s.loss_mask for s in samples)
    rewards = {s.raw_reward for s in samples}
    assert rewards >= {0.0, 1.0} and any(0 < r < 1 for r in rewards)


def test_rejects_a_sample_without_reward(tmp_path):
    path = write_batch(tmp_path, [sample(0, 1.0), sample(0, None, status="failed")])
    with pytest.raises(BatchError, match=r"sample \[1\]\.reward: missing \(status 'failed'\)"):
        to_train_samples(read_batch(path))


def test_rejects_mismatched_per_token_fields_and_foreign_tokens(tmp_path):
    bad_logp = sample(0, 1.0, rollout_log_probs=[-1.0])
    with pytest.raises(BatchError, match=r"sample \[0\]\.rollout_log_probs: expected 2"):
        to_train_samples([bad_logp])
    with pytest.raises(BatchError, match=r"sample \[0\]\.loss_mask"):
        to_train_samples([sample(0, 1.0, loss_mask=[1, 2])])
    with pytest.raises(BatchError, match=r"token id 4 is outside the model's vocabulary \[0, 4\)"):
        to_train_samples([sample(0, 1.0)], vocab_size=4)
    with pytest.raises(BatchError, match=r"response_length"):
        to_train_samples([sample(0, 1.0, response_length=5)])
    (tmp_path / "junk").write_bytes(b"\xc1\xc1")
    with pytest.raises(BatchError, match="not a msgpack sample batch"):
        read_batch(str(tmp_path / "junk"))


def test_removed_samples_keep_their_place_with_a_zero_mask():
    samples = to_train_samples([sample(0, 1.0), sample(0, 0.0, remove_sample=True)])
    assert samples[1].loss_mask == [0, 0]
    assert rollout_mask_sums(samples) == [2.0, 0.0]


def test_group_size_must_be_contiguous_and_even():
    assert infer_group_size([sample(0, 1), sample(0, 0), sample(1, 1), sample(1, 0)]) == 2
    with pytest.raises(BatchError, match="group 0 is not contiguous"):
        infer_group_size([sample(0, 1), sample(1, 0), sample(0, 1), sample(1, 0)])
    with pytest.raises(BatchError, match=r"group sizes differ \(\[1, 3\]\)"):
        infer_group_size([sample(0, 1), sample(0, 0), sample(0, 1), sample(1, 0)])


def test_rollout_mask_sums_are_shared_within_a_rollout_id():
    samples = to_train_samples(
        [
            sample(0, 1.0, rollout_id=7),
            sample(0, 0.0, rollout_id=7, response=(4, 5, 6), loss_mask=[1, 0, 1], rollout_log_probs=[-1, 0, -1]),
            sample(0, 0.0),
        ]
    )
    assert [s.rollout_id for s in samples] == [7, 7, 0]
    assert rollout_mask_sums(samples) == [4.0, 4.0, 2.0]


# ---------------------------------------------------------------------------------------------
# Group normalisation against slime's `_post_process_rewards`


@pytest.mark.parametrize(
    "case",
    [
        "slime__post_process_rewards__grpo__binary_g4",
        "slime__post_process_rewards__grpo__binary_g8",
        "slime__post_process_rewards__grpo__continuous_g4",
        "slime__post_process_rewards__grpo__large_magnitude_g4",
        "slime__post_process_rewards__grpo__small_magnitude_g4",
        "slime__post_process_rewards__grpo__uneven_count_collapses_to_one_group",
        "slime__post_process_rewards__grpo_no_std__binary_g4",
        "slime__post_process_rewards__grpo_no_std__continuous_g4",
    ],
)
def test_group_normalization_equals_slime(case):
    g = golden(case)
    params = g["params"]
    got = normalize_rewards(
        g["inputs"]["rewards"],
        params["n_samples_per_prompt"],
        params["rollout_batch_size"],
        std_normalization=params["grpo_std_normalization"],
    )
    assert got == g["expected"]["rewards"]  # same float32 ops on CPU: bit for bit


def test_rewards_equal_those_in_slimes_own_train_dump():
    for case, std in (("grpo_binary", True), ("drgrpo_continuous", False)):
        folder = GOLDEN / "trainer-dumps" / case / "train_data"
        content = json.loads(next(folder.glob("*.json")).read_text())["content"]
        raw = content["raw_reward"]
        got = normalize_rewards(raw, 4, len(raw) // 4, std_normalization=std)
        assert got == [s["rewards"] for s in content["samples"]]


# ---------------------------------------------------------------------------------------------
# Loss against slime's `compute_policy_loss` and `loss_function`


def test_policy_loss_equals_slime():
    g = golden("slime__compute_policy_loss__eps0.2_high0.28_cNone")
    ppo_kl = torch.tensor(g["inputs"]["ppo_kl"], dtype=torch.float32)
    adv = torch.tensor(g["inputs"]["advantages"], dtype=torch.float32)
    new = torch.zeros_like(ppo_kl)
    loss, clipfrac, kl = policy_loss(new, ppo_kl, adv, 0.2, 0.28)  # old - new = ppo_kl
    assert all(close(a, e) for a, e in zip(loss.tolist(), g["expected"]["pg_losses"]))
    assert clipfrac.tolist() == g["expected"]["clipfrac"]
    assert kl.tolist() == ppo_kl.tolist()


@pytest.mark.parametrize("case", ["slime__loss_function__grpo_default", "slime__loss_function__grpo_fanout_rollouts"])
def test_packed_row_loss_equals_slimes_loss_function(case):
    """Logits of four packed samples -> log probs -> reducer, as the trainer's loss_func does it."""
    g = golden(case)
    inputs, params = g["inputs"], g["params"]
    tokens = [t for seq in inputs["tokens"] for t in seq]
    row = build_row(list(range(len(inputs["tokens"]))), inputs["tokens"], pad_multiple=1)
    assert row.tokens[0].tolist() == tokens
    logits = torch.tensor(inputs["logits"], dtype=torch.float32)[None]
    lp = next_token_log_probs(logits, row.tokens)
    slices = response_slices(row, inputs["total_lengths"], inputs["response_lengths"])
    terms = [
        SampleTerms(
            log_probs=lp[sl],
            old_log_probs=torch.tensor(old, dtype=torch.float32),
            advantages=torch.tensor(adv, dtype=torch.float32),
            loss_mask=torch.tensor(mask, dtype=torch.float32),
            mask_sum=mask_sum,
        )
        for sl, old, adv, mask, mask_sum in zip(
            slices, inputs["old_log_probs"], inputs["advantages"], inputs["loss_masks"], inputs["rollout_mask_sums"]
        )
    ]
    loss, metrics = sum_of_sample_means(terms, params["eps_clip"], params["eps_clip_high"])
    scaled = float(loss) * params["num_microbatches"] / params["step_global_batch_size"]
    assert close(scaled, g["expected"]["loss"])
    for key in ("pg_loss", "pg_clipfrac", "ppo_kl"):
        assert close(float(metrics[key]), g["expected"]["metrics"][key]), key


# ---------------------------------------------------------------------------------------------
# Packing


def test_packing_places_every_sample_once_within_the_budget():
    rng = random.Random(7)
    for _ in range(200):
        lengths = [rng.randint(1, 300) for _ in range(rng.randint(1, 40))]
        budget = rng.randint(50, 600)
        bins = pack_microbatches(lengths, budget)
        assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
        for b in bins:
            assert b == sorted(b)
            assert len(b) == 1 or sum(lengths[i] for i in b) <= budget
        assert [b[0] for b in bins] == sorted(b[0] for b in bins)
        assert bins == pack_microbatches(lengths, budget)


def test_rows_are_padded_and_response_slices_point_at_the_response_tokens():
    token_lists = [[1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11, 12]]
    response_lengths = [2, 1, 3]
    row = build_row([4, 0, 2], token_lists, pad_multiple=8)
    assert row.tokens.shape == (1, 16) and row.used == 12
    assert row.position_ids[0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3]
    targets = row.tokens[0, 1:]
    for toks, n, sl in zip(token_lists, response_lengths, response_slices(row, [5, 3, 4], response_lengths)):
        assert targets[sl].tolist() == toks[-n:]
    mask = row.attention_mask[0, 0]
    assert mask.shape == (16, 16) and mask.dtype == torch.bool
    assert not mask[6, 5] and mask[5, 4]  # sample 2 sees its own first token, not sample 1's last
    assert mask[4, 5]  # nothing sees the future
    assert mask[12, 11] and not mask[13, 12]  # padding is a segment of its own


class TinyCausalLM(torch.nn.Module):
    """Two pre-norm attention + MLP blocks with RoPE, taking a boolean mask (True = masked)."""

    def __init__(self, vocab: int = 50, dim: int = 32, heads: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(
            torch.nn.ModuleDict(
                {
                    "qkv": torch.nn.Linear(dim, 3 * dim),
                    "out": torch.nn.Linear(dim, dim),
                    "mlp": torch.nn.Sequential(torch.nn.Linear(dim, 64), torch.nn.SiLU(), torch.nn.Linear(64, dim)),
                    "n1": torch.nn.LayerNorm(dim),
                    "n2": torch.nn.LayerNorm(dim),
                }
            )
            for _ in range(2)
        )
        self.head = torch.nn.Linear(dim, vocab)

    def rope(self, x, pos):
        half = x.shape[-1] // 2
        freq = 1.0 / (10000 ** (torch.arange(half, dtype=x.dtype) / half))
        angle = pos[:, None].to(x.dtype) * freq[None]
        cos, sin = angle.cos()[None], angle.sin()[None]
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    def forward(self, tokens, positions, mask):
        x = self.embed(tokens[0])
        t, d = x.shape
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["n1"](x)).view(t, 3, self.heads, d // self.heads).unbind(1)
            q, k, v = (z.transpose(0, 1) for z in (q, k, v))
            q, k = self.rope(q, positions[0]), self.rope(k, positions[0])
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
            scores = scores.masked_fill(mask[0], -10000.0)
            x = x + blk["out"]((scores.softmax(-1) @ v).transpose(0, 1).reshape(t, d))
            x = x + blk["mlp"](blk["n2"](x))
        return self.head(x)[None]


def test_packed_log_probs_equal_each_sample_scored_alone():
    model = TinyCausalLM().double()
    rng = random.Random(3)
    token_lists = [[rng.randrange(50) for _ in range(rng.randint(5, 30))] for _ in range(6)]
    response_lengths = [rng.randint(1, len(t) - 1) for t in token_lists]
    totals = [len(t) for t in token_lists]
    row = build_row(list(range(6)), token_lists, pad_multiple=128)
    with torch.no_grad():
        packed = next_token_log_probs(model(row.tokens, row.position_ids, row.attention_mask), row.tokens)
        for i, toks in enumerate(token_lists):
            alone_row = build_row([i], [toks], pad_multiple=16)
            alone = next_token_log_probs(model(alone_row.tokens, alone_row.position_ids, alone_row.attention_mask), alone_row.tokens)
            (a,) = response_slices(alone_row, [totals[i]], [response_lengths[i]])
            p = response_slices(row, totals, response_lengths)[i]
            assert torch.allclose(packed[p], alone[a], atol=1e-10, rtol=0)
        # Without the block-diagonal mask, later samples would see earlier ones: the check above can fail.
        causal = ~torch.ones(row.tokens.shape[1], row.tokens.shape[1], dtype=torch.bool).tril()[None, None]
        leaky = next_token_log_probs(model(row.tokens, row.position_ids, causal), row.tokens)
        last = response_slices(row, totals, response_lengths)[-1]
        assert (leaky[last] - packed[last]).abs().max() > 1e-4


# ---------------------------------------------------------------------------------------------
# Dumps, against slime's own


def load(path) -> dict:
    return torch.load(str(path), map_location="cpu")


def test_dumps_have_slimes_layout_key_order_and_dtypes(tmp_path):
    assert dry_run(["--batch", str(BATCH), "--out", str(tmp_path), "--rollout-id", "3"]) == 0
    ours_train = load(tmp_path / "train_data" / "3.pt")
    ours_rollout = load(tmp_path / "rollout_data" / "3.pt")
    slime_train = load(GOLDEN / "trainer-dumps" / "grpo_binary" / "train_data" / "3.pt")
    slime_rollout = load(GOLDEN / "trainer-dumps" / "grpo_binary" / "rollout_data" / "3.pt")

    assert list(ours_train) == list(slime_train)
    assert list(ours_rollout) == list(slime_rollout)
    assert list(ours_rollout["samples"][0]) == list(slime_rollout["samples"][0])
    assert list(ours_train["dp_shards"][0]) == list(slime_train["dp_shards"][0])
    assert list(ours_train["samples"][0]) == list(slime_train["samples"][0])
    for key, theirs in slime_train["samples"][0].items():
        mine = ours_train["samples"][0][key]
        # A raw reward is whatever the reward model returned: slime's fixture has ints, the Vime batch floats.
        same_kind = type(mine) is type(theirs) or (key == "local_raw_reward" and isinstance(mine, float))
        assert same_kind, key
        if isinstance(theirs, torch.Tensor):
            assert mine.dtype == theirs.dtype and mine.dim() == theirs.dim(), key

    samples = ours_train["samples"]
    assert [s["rollout_position"] for s in samples] == list(range(16))
    shard = ours_train["dp_shards"][0]
    assert sorted(shard["partition"]) == list(range(16))
    for local, pos in enumerate(shard["partition"]):
        sums = samples[pos]["rollout_mask_sums"]
        assert sums.storage_offset() == local  # 0-d views into one rank-local storage, as slime writes them
        assert float(sums) == float(samples[pos]["loss_masks"].sum())
    raw = read_batch(str(BATCH))
    expected = normalize_rewards([s["reward"] for s in raw], 4, 4)
    for s, reward in zip(samples, expected):
        assert s["rewards"] == reward
        assert s["advantages"].tolist() == s["returns"].tolist() == [reward] * s["response_lengths"]
        assert s["kl"].abs().sum() == 0
    assert ours_train["raw_reward"] == [s["reward"] for s in raw]
    assert [s["tokens"] for s in ours_rollout["samples"]] == [s["tokens"] for s in raw]
