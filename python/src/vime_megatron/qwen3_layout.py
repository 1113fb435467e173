"""Qwen3 between Hugging Face's parameter layout and megatron.core's (GPTModel, local layer spec, TP = 1).

Pure tensor functions, no megatron import, so they are tested on CPU. The fused layouts are what
megatron.core's modules split at run time:

- `linear_qkv.weight` `[ng * (np/ng + 2) * hn, h]`: per query group g, the np/ng query heads of that
  group, then its key head, then its value head (`SelfAttention.get_query_key_value_tensors` views the
  output as `[.., ng, (np/ng + 2) * hn]` and splits it `[np/ng * hn, hn, hn]`). Query head i belongs to
  group i // (np/ng), as transformers' `repeat_kv` pairs them.
- `linear_fc1.weight` `[2 * ffn, h]`: gate rows, then up rows (`MLP`'s `glu` chunks the output in two
  and computes `act(first) * second`).

Everything else maps one to one.
"""

from __future__ import annotations

from typing import Any

import torch

# Per-layer names that map one to one: megatron suffix -> Hugging Face suffix.
_LAYER_RENAMES = {
    "input_layernorm.weight": "input_layernorm.weight",
    "self_attention.q_layernorm.weight": "self_attn.q_norm.weight",
    "self_attention.k_layernorm.weight": "self_attn.k_norm.weight",
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
}


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, groups: int, head_dim: int) -> torch.Tensor:
    """q `[heads*hd, h]`, k and v `[groups*hd, h]` -> megatron's `linear_qkv.weight`."""
    h = q.shape[-1]
    per = heads // groups
    qg = q.reshape(groups, per * head_dim, h)
    kg = k.reshape(groups, head_dim, h)
    vg = v.reshape(groups, head_dim, h)
    return torch.cat((qg, kg, vg), dim=1).reshape(groups * (per + 2) * head_dim, h)


def split_qkv(qkv: torch.Tensor, heads: int, groups: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """megatron's `linear_qkv.weight` -> q, k, v in Hugging Face's layout (the inverse of `fuse_qkv`)."""
    h = qkv.shape[-1]
    per = heads // groups
    grouped = qkv.reshape(groups, (per + 2) * head_dim, h)
    q, k, v = torch.split(grouped, [per * head_dim, head_dim, head_dim], dim=1)
    return q.reshape(heads * head_dim, h), k.reshape(groups * head_dim, h), v.reshape(groups * head_dim, h)


def hf_to_megatron(state: dict[str, torch.Tensor], cfg: Any) -> dict[str, torch.Tensor]:
    """A Hugging Face Qwen3 state dict (`cfg`: vime_policy's `Qwen3Config`) -> GPTModel parameter names."""
    heads, groups, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    out = {
        "embedding.word_embeddings.weight": state["model.embed_tokens.weight"],
        "decoder.final_layernorm.weight": state["model.norm.weight"],
    }
    if not cfg.tie_word_embeddings:
        out["output_layer.weight"] = state["lm_head.weight"]
    for i in range(cfg.num_hidden_layers):
        hf, mg = f"model.layers.{i}.", f"decoder.layers.{i}."
        for m_name, h_name in _LAYER_RENAMES.items():
            out[mg + m_name] = state[hf + h_name]
        out[mg + "self_attention.linear_qkv.weight"] = fuse_qkv(
            state[hf + "self_attn.q_proj.weight"], state[hf + "self_attn.k_proj.weight"], state[hf + "self_attn.v_proj.weight"], heads, groups, hd
        )
        out[mg + "mlp.linear_fc1.weight"] = torch.cat((state[hf + "mlp.gate_proj.weight"], state[hf + "mlp.up_proj.weight"]), dim=0)
    return out


def megatron_to_hf(state: dict[str, torch.Tensor], cfg: Any) -> dict[str, torch.Tensor]:
    """GPTModel parameters -> Hugging Face Qwen3 names (a tied head is written as transformers does: not at all)."""
    heads, groups, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    out = {
        "model.embed_tokens.weight": state["embedding.word_embeddings.weight"],
        "model.norm.weight": state["decoder.final_layernorm.weight"],
    }
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = state["output_layer.weight"]
    for i in range(cfg.num_hidden_layers):
        hf, mg = f"model.layers.{i}.", f"decoder.layers.{i}."
        for m_name, h_name in _LAYER_RENAMES.items():
            out[hf + h_name] = state[mg + m_name]
        q, k, v = split_qkv(state[mg + "self_attention.linear_qkv.weight"], heads, groups, hd)
        out[hf + "self_attn.q_proj.weight"], out[hf + "self_attn.k_proj.weight"], out[hf + "self_attn.v_proj.weight"] = q, k, v
        gate, up = torch.chunk(state[mg + "mlp.linear_fc1.weight"], 2, dim=0)
        out[hf + "mlp.gate_proj.weight"], out[hf + "mlp.up_proj.weight"] = gate, up
    return out


def transformer_config_kwargs(cfg: Any) -> dict[str, Any]:
    """megatron.core `TransformerConfig` fields that make GPTModel compute Qwen3 (dtype fields left to the caller)."""
    return dict(
        num_layers=cfg.num_hidden_layers,
        hidden_size=cfg.hidden_size,
        ffn_hidden_size=cfg.intermediate_size,
        num_attention_heads=cfg.num_attention_heads,
        num_query_groups=cfg.num_key_value_heads,
        kv_channels=cfg.head_dim,  # Qwen3's head_dim is its own field, not hidden / heads
        normalization="RMSNorm",
        layernorm_epsilon=cfg.rms_norm_eps,
        qk_layernorm=True,
        gated_linear_unit=True,  # SwiGLU: silu(gate) * up
        activation_func=torch.nn.functional.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        apply_residual_connection_post_layernorm=False,
        rotary_interleaved=False,  # rotate-half RoPE, as transformers
    )


def gpt_model_kwargs(cfg: Any, max_sequence_length: int) -> dict[str, Any]:
    """`GPTModel(...)` arguments beyond config and layer spec."""
    return dict(
        vocab_size=cfg.vocab_size,
        max_sequence_length=max_sequence_length,
        position_embedding_type="rope",
        rotary_percent=1.0,
        rotary_base=int(cfg.rope_theta) if float(cfg.rope_theta).is_integer() else cfg.rope_theta,
        share_embeddings_and_output_weights=bool(cfg.tie_word_embeddings),
    )
