"""Qwen3 in megatron.core's layout, on CPU: the conversion round trip, and a forward pass computed from the
fused tensors the way megatron.core's modules split them, against vime_policy's Qwen3."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from vime_megatron.qwen3_layout import (
    fuse_qkv,
    gpt_model_kwargs,
    hf_to_megatron,
    megatron_to_hf,
    split_qkv,
    transformer_config_kwargs,
)
from vime_policy.model import Qwen3Config, new_model

# GQA with several heads per group, head_dim != hidden / heads, both head kinds; a small vocabulary keeps it fast.
SHAPES = {
    "tied": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True),
    "untied": dict(hidden_size=24, intermediate_size=40, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=3, head_dim=16, tie_word_embeddings=False),
    "mha": dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4, head_dim=4, tie_word_embeddings=True),
}


def model(shape: str, seed: int = 0):
    cfg = Qwen3Config(**SHAPES[shape], vocab_size=97, rope_theta=10_000.0)
    m = new_model(cfg, seed).double()
    with torch.no_grad():  # norms away from 1 and larger weights, so a wrong pairing shows
        for name, p in m.named_parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(hash(name) % 2**31), dtype=p.dtype) * (0.3 if "norm" in name else 0.1))
    return m


def hf_state(m) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in m.state_dict().items() if not (m.config.tie_word_embeddings and k == "lm_head.weight")}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_hf_to_megatron_to_hf_is_the_identity(shape):
    m = model(shape)
    state = hf_state(m)
    mg = hf_to_megatron(state, m.config)
    cfg = m.config
    per = cfg.num_attention_heads // cfg.num_key_value_heads
    assert mg["decoder.layers.0.self_attention.linear_qkv.weight"].shape == ((per + 2) * cfg.num_key_value_heads * cfg.head_dim, cfg.hidden_size)
    assert mg["decoder.layers.0.mlp.linear_fc1.weight"].shape == (2 * cfg.intermediate_size, cfg.hidden_size)
    assert ("output_layer.weight" in mg) == (not cfg.tie_word_embeddings)
    back = megatron_to_hf(mg, cfg)
    assert sorted(back) == sorted(state)
    for k, v in state.items():
        assert torch.equal(back[k], v), k


def test_the_fused_qkv_groups_each_kv_head_with_its_query_heads():
    heads, groups, hd, h = 4, 2, 1, 1
    q = torch.tensor([[10.0], [11.0], [12.0], [13.0]])  # query heads 0..3
    k = torch.tensor([[20.0], [21.0]])
    v = torch.tensor([[30.0], [31.0]])
    fused = fuse_qkv(q, k, v, heads, groups, hd)
    # q1 q2 k1 v1 | q3 q4 k2 v2, as megatron.core's comment spells the interleaving.
    assert fused.flatten().tolist() == [10, 11, 20, 30, 12, 13, 21, 31]
    assert all(torch.equal(a, b) for a, b in zip(split_qkv(fused, heads, groups, hd), (q, k, v)))
    assert fused.shape == (8, h)


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """megatron.core's non-interleaved RoPE on `[T, heads, hd]`: freqs repeated, rotate-half."""
    t, hd = x.shape[0], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    emb = torch.cat([torch.outer(torch.arange(t, dtype=torch.float64), inv)] * 2, dim=-1)[:, None, :]
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()


def megatron_reference_logits(mg: dict[str, torch.Tensor], cfg, ids: torch.Tensor) -> torch.Tensor:
    """GPTModel's forward as its modules compute it, from the fused parameters (one sequence, causal)."""
    kw = transformer_config_kwargs(cfg)
    ng, np_, hn, eps = kw["num_query_groups"], kw["num_attention_heads"], kw["kv_channels"], kw["layernorm_epsilon"]
    per = np_ // ng
    t = ids.shape[0]
    x = mg["embedding.word_embeddings.weight"][ids]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for i in range(kw["num_layers"]):
        p = lambda n: mg[f"decoder.layers.{i}.{n}"]  # noqa: E731
        mixed = rms(x, p("input_layernorm.weight"), eps) @ p("self_attention.linear_qkv.weight").T
        mixed = mixed.view(t, ng, (per + 2) * hn)
        query, key, value = torch.split(mixed, [per * hn, hn, hn], dim=-1)
        query = rms(query.reshape(t, np_, hn), p("self_attention.q_layernorm.weight"), eps)
        key = rms(key, p("self_attention.k_layernorm.weight"), eps)
        query, key = rope(query, gpt_model_kwargs(cfg, t)["rotary_base"]), rope(key, gpt_model_kwargs(cfg, t)["rotary_base"])
        key, value = key.repeat_interleave(per, dim=1), value.repeat_interleave(per, dim=1)  # DotProductAttention
        scores = torch.einsum("qhd,khd->hqk", query, key) / math.sqrt(hn)
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        context = torch.einsum("hqk,khd->qhd", probs, value).reshape(t, np_ * hn)
        x = x + context @ p("self_attention.linear_proj.weight").T
        fc1 = rms(x, p("pre_mlp_layernorm.weight"), eps) @ p("mlp.linear_fc1.weight").T
        gate, up = torch.chunk(fc1, 2, dim=-1)  # MLP.glu
        x = x + (kw["activation_func"](gate) * up) @ p("mlp.linear_fc2.weight").T
    x = rms(x, mg["decoder.final_layernorm.weight"], eps)
    head = mg["embedding.word_embeddings.weight"] if gpt_model_kwargs(cfg, t)["share_embeddings_and_output_weights"] else mg["output_layer.weight"]
    return x @ head.T


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_megatrons_split_of_the_fused_layout_computes_vime_policys_qwen3(shape):
    m = model(shape, seed=3)
    ids = torch.randint(0, m.config.vocab_size, (19,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = m.logits(m(ids[None]))[0].double()
        mg = hf_to_megatron(hf_state(m), m.config)
        theirs = megatron_reference_logits(mg, m.config, ids)
    # vime_policy keeps RoPE tables and the attention softmax in float32, hence not 1e-12.
    assert float((ours - theirs).abs().max()) < 1e-5
    # The check has teeth: pairing query heads with the wrong key head, or swapping gate and up, shows.
    for name in ("self_attention.linear_qkv.weight", "mlp.linear_fc1.weight"):
        wrong = dict(mg)
        w = wrong[f"decoder.layers.0.{name}"]
        if "qkv" in name:
            cfg = m.config
            q, k, v = split_qkv(w, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
            rows = q.shape[0] // 2
            wrong[f"decoder.layers.0.{name}"] = fuse_qkv(torch.cat((q[rows:], q[:rows])), k, v, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
        else:
            gate, up = torch.chunk(w, 2)
            wrong[f"decoder.layers.0.{name}"] = torch.cat((up, gate))
        with torch.no_grad():
            assert float((megatron_reference_logits(wrong, m.config, ids) - ours).abs().max()) > 1e-3, name


def test_the_megatron_config_carries_qwen3s_shape():
    cfg = Qwen3Config.preset("small")
    kw = transformer_config_kwargs(cfg)
    assert kw["kv_channels"] == 64 and kw["num_query_groups"] == 2 and kw["num_attention_heads"] == 6
    assert kw["qk_layernorm"] and kw["normalization"] == "RMSNorm" and kw["activation_func"] is F.silu
    assert not kw["add_bias_linear"] and kw["layernorm_epsilon"] == 1e-6
    g = gpt_model_kwargs(cfg, 4096)
    assert g["rotary_base"] == 1_000_000 and g["share_embeddings_and_output_weights"] and g["vocab_size"] == 151936
