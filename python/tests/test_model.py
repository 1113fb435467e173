"""The Qwen3 model: KV-cached decoding against full recompute, batched rows against single rows, chunked
prefill, and the checkpoint layout. (Parity with transformers itself: reference_checks.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vime_policy.model import (
    CheckpointError,
    KVCache,
    Qwen3Config,
    Qwen3ForCausalLM,
    load_pretrained,
    new_model,
    read_config,
    read_state,
    save_pretrained,
    stop_token_ids,
)
from vime_policy.safetensors import load_file, save_file

CPU = torch.device("cpu")


def small_config(**kw) -> Qwen3Config:
    base = dict(
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=300,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    return Qwen3Config(**{**base, **kw})


@pytest.fixture(scope="module")
def model() -> Qwen3ForCausalLM:
    m = new_model(small_config(), seed=3).eval()
    # Spread the norms so that a mistake in any of them shows in the logits.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))
    return m


def test_incremental_decoding_equals_full_recompute(model: Qwen3ForCausalLM) -> None:
    ids = torch.randint(0, 300, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model.logits(model(ids))
        cache = KVCache(model.config, rows=3, max_len=64, device=CPU, dtype=torch.float32, capacity=8)
        steps = [model.logits(model.extend(ids[:, :13], torch.tensor([0]), cache, first_row=2))]
        for i in range(13, 40):  # grows the cache 8 -> 16 -> 32 -> 64 on the way
            steps.append(model.logits(model.extend(ids[:, i : i + 1], torch.tensor([i]), cache, first_row=2)))
    assert torch.allclose(full, torch.cat(steps, dim=1), atol=1e-5, rtol=1e-5)


def test_chunked_prefill_equals_one_prefill(model: Qwen3ForCausalLM) -> None:
    ids = torch.randint(0, 300, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        one = model.logits(model(ids))
        cache = KVCache(model.config, rows=1, max_len=64, device=CPU, dtype=torch.float32)
        parts = [model.logits(model.extend(ids[:, s : s + 7], torch.tensor([s]), cache)) for s in range(0, 30, 7)]
    assert torch.allclose(one, torch.cat(parts, dim=1), atol=1e-5, rtol=1e-5)


def test_batched_rows_of_different_lengths_equal_single_rows(model: Qwen3ForCausalLM) -> None:
    g = torch.Generator().manual_seed(4)
    lengths = [5, 17, 11]
    seqs = [torch.randint(0, 300, (1, n + 6), generator=g) for n in lengths]
    with torch.no_grad():
        singles = [model.logits(model(s))[0, -6:] for s in seqs]
        cache = KVCache(model.config, rows=3, max_len=64, device=CPU, dtype=torch.float32)
        for row, (s, n) in enumerate(zip(seqs, lengths)):
            model.extend(s[:, :n], torch.tensor([0]), cache, first_row=row)
        batched = []
        for k in range(6):  # one decode step for all three rows at once, each at its own position
            tokens = torch.stack([s[0, n + k] for s, n in zip(seqs, lengths)])[:, None]
            starts = torch.tensor([n + k for n in lengths])
            batched.append(model.logits(model.extend(tokens, starts, cache))[:, 0])
    batched_t = torch.stack(batched, dim=1)
    for row in range(3):
        assert torch.allclose(singles[row], batched_t[row], atol=1e-5, rtol=1e-5), row


def test_right_padding_does_not_change_real_positions(model: Qwen3ForCausalLM) -> None:
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(5))
    padded = torch.cat([ids, torch.zeros(1, 9, dtype=torch.long)], dim=1)
    with torch.no_grad():
        assert torch.allclose(model.logits(model(ids)), model.logits(model(padded))[:, :12], atol=1e-6)


def test_cache_rows_move_with_their_contents(model: Qwen3ForCausalLM) -> None:
    ids = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        cache = KVCache(model.config, rows=4, max_len=32, device=CPU, dtype=torch.float32)
        model.extend(ids[:, :8], torch.tensor([0]), cache, first_row=3)
        cache.move_row(3, 0, 8)
        moved = model.logits(model.extend(ids[:, 8:], torch.tensor([8]), cache, first_row=0))
        fresh = model.logits(model(ids))[:, -1:]
    assert torch.allclose(moved, fresh, atol=1e-5)


@pytest.mark.parametrize("tied", [True, False])
def test_checkpoint_round_trip_in_hugging_face_layout(tied: bool, tmp_path: Path) -> None:
    m = new_model(small_config(tie_word_embeddings=tied), seed=7)
    save_pretrained(m, tmp_path)
    names = set(load_file(tmp_path / "model.safetensors"))
    per_layer = [
        "input_layernorm.weight",
        "post_attention_layernorm.weight",
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "self_attn.q_norm.weight",
        "self_attn.k_norm.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
    ]
    expected = {"model.embed_tokens.weight", "model.norm.weight"} | {f"model.layers.{i}.{n}" for i in range(2) for n in per_layer}
    assert names == (expected if tied else expected | {"lm_head.weight"})
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["model_type"] == "qwen3"
    assert cfg["tie_word_embeddings"] is tied and cfg["head_dim"] == 8 and cfg["rope_theta"] == 1_000_000.0
    back = load_pretrained(tmp_path)
    for (name, a), (_, b) in zip(m.named_parameters(), back.named_parameters()):
        assert torch.equal(a, b), name
    assert (back.lm_head.weight is back.model.embed_tokens.weight) is tied
    assert stop_token_ids(tmp_path, back.config) == [151645, 151643]


def test_bf16_checkpoint_loads_as_bf16(tmp_path: Path) -> None:
    m = new_model(small_config(), seed=8)
    save_pretrained(m, tmp_path, dtype=torch.bfloat16)
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(tmp_path / "model.safetensors").values()} == {torch.bfloat16}
    back = load_pretrained(tmp_path)
    assert next(back.parameters()).dtype == torch.bfloat16
    with torch.no_grad():  # runs, with RoPE frequencies kept in float32
        out = back.logits(back(torch.tensor([[1, 2, 3]])))
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert back._inv_freq.dtype == torch.float32


def test_sharded_checkpoints_load(tmp_path: Path) -> None:
    m = new_model(small_config(), seed=9)
    save_pretrained(m, tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").unlink()
    names = sorted(state)
    half = len(names) // 2
    save_file({n: state[n] for n in names[:half]}, tmp_path / "model-00001-of-00002.safetensors")
    save_file({n: state[n] for n in names[half:]}, tmp_path / "model-00002-of-00002.safetensors")
    weight_map = {n: f"model-0000{1 if i < half else 2}-of-00002.safetensors" for i, n in enumerate(names)}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert set(read_state(tmp_path)) == set(names)
    back = load_pretrained(tmp_path)
    assert torch.equal(back.model.norm.weight, m.model.norm.weight)


def test_transformers_5_config_fields_are_read(tmp_path: Path) -> None:
    m = new_model(small_config(), seed=10)
    save_pretrained(m, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.pop("rope_theta")
    cfg.pop("torch_dtype")
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 5000.0}
    cfg["dtype"] = "bfloat16"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    read = read_config(tmp_path)
    assert read.rope_theta == 5000.0 and read.torch_dtype == "bfloat16"


@pytest.mark.parametrize(
    "change,message",
    [
        ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "is not Qwen3"),
        ({"attention_bias": True}, "attention_bias=True is not supported"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling="),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads 3"),
        ({"hidden_size": "32"}, "missing integer field(s) ['hidden_size']"),
    ],
)
def test_unsupported_configs_are_refused_by_field(change: dict, message: str, tmp_path: Path) -> None:
    save_pretrained(new_model(small_config(), seed=11), tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(change)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as e:
        load_pretrained(tmp_path)
    assert message in str(e.value)


def test_weights_that_do_not_fit_are_refused_by_name(tmp_path: Path) -> None:
    save_pretrained(new_model(small_config(), seed=12), tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    cases = [
        ({k: v for k, v in state.items() if k != "model.norm.weight"}, "missing ['model.norm.weight']"),
        ({**state, "model.layers.9.mlp.up_proj.weight": state["model.norm.weight"]}, "unexpected ['model.layers.9.mlp.up_proj.weight']"),
        ({**state, "model.norm.weight": torch.ones(31)}, "model.norm.weight has shape [31], expected [32]"),
        ({**state, "model.norm.weight": torch.ones(32, dtype=torch.int32)}, "expected a floating-point tensor"),
    ]
    for bad, message in cases:
        save_file(bad, tmp_path / "model.safetensors")
        with pytest.raises(CheckpointError) as e:
            load_pretrained(tmp_path)
        assert message in str(e.value)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="no config.json"):
        load_pretrained(tmp_path / "nowhere")


def test_presets() -> None:
    tiny, small = Qwen3Config.preset("tiny"), Qwen3Config.preset("small")
    assert tiny.vocab_size == small.vocab_size == 151936
    count = lambda c: sum(p.numel() for p in Qwen3ForCausalLM(c).parameters())  # noqa: E731
    assert count(tiny) < 3_000_000
    assert 30_000_000 < count(small) < 100_000_000
    with pytest.raises(CheckpointError, match="unknown model preset"):
        Qwen3Config.preset("huge")
