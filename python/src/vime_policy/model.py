"""The Qwen3 architecture in plain torch, loading and saving Hugging Face's checkpoint layout.

Same maths and parameter names as transformers' `Qwen3ForCausalLM`: token embedding, decoder layers of
(RMSNorm -> GQA self-attention with per-head RMSNorm on q and k, RoPE -> residual) and
(RMSNorm -> SwiGLU MLP -> residual), a final RMSNorm and the LM head (tied to the embedding or not, per
`tie_word_embeddings`). No biases. Attention is computed as transformers' eager path does: bf16/fp32
matmuls, softmax in float32.

A checkpoint directory holds `config.json`, `generation_config.json` (optional) and `model.safetensors`
(or shards listed in `model.safetensors.index.json`), so the same code loads a real Qwen3 checkpoint.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .safetensors import SafetensorsError, load_file, save_file


class CheckpointError(ValueError):
    """A checkpoint directory cannot be loaded; the message names the file, the field and the fix."""


# Sizes. `tiny` is for CPU CI (a few MB; runs in seconds on 2 cores); `small` is the GPU run's model.
# Both use Qwen3's real vocabulary and special tokens so the project's tokenizer ids are valid as they are.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        hidden_size=16,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=True,
        torch_dtype="float32",
    ),
    "small": dict(
        hidden_size=384,
        intermediate_size=1152,
        num_hidden_layers=8,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=64,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
    ),
}

QWEN3_VOCAB_SIZE = 151936
QWEN3_ENDOFTEXT = 151643  # <|endoftext|>
QWEN3_IM_END = 151645  # <|im_end|>, the end of every assistant turn in the chat template


@dataclass
class Qwen3Config:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int = QWEN3_VOCAB_SIZE
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02
    torch_dtype: str = "bfloat16"
    bos_token_id: int | None = QWEN3_ENDOFTEXT
    eos_token_id: int | list[int] | None = QWEN3_IM_END
    # Every key of the config.json this came from, kept so that saving does not drop fields we ignore.
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "Qwen3Config":
        if name not in PRESETS:
            raise CheckpointError(f"unknown model preset {name!r}; use one of {sorted(PRESETS)} or a checkpoint directory")
        return cls(**{**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "config.json") -> "Qwen3Config":
        arch = raw.get("architectures") or []
        if raw.get("model_type") != "qwen3" and "Qwen3ForCausalLM" not in arch:
            raise CheckpointError(
                f"{where}: model_type {raw.get('model_type')!r} / architectures {arch!r} is not Qwen3; "
                "this server implements Qwen3ForCausalLM only"
            )
        for key, ok in (
            ("attention_bias", lambda v: not v),
            ("use_sliding_window", lambda v: not v),
            ("hidden_act", lambda v: v in (None, "silu")),
            ("rope_scaling", lambda v: v in (None, {}) or (isinstance(v, dict) and v.get("rope_type", v.get("type")) == "default")),
        ):
            if key in raw and not ok(raw[key]):
                raise CheckpointError(f"{where}: {key}={raw[key]!r} is not supported by this implementation")
        need = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"]
        missing = [k for k in need if not isinstance(raw.get(k), int)]
        if missing:
            raise CheckpointError(f"{where}: missing integer field(s) {missing}")
        heads = raw["num_attention_heads"]
        # transformers 5 moves rope_theta into rope_parameters; read either.
        rope = raw.get("rope_parameters") or {}
        theta = raw.get("rope_theta", rope.get("rope_theta", 1_000_000.0))
        dtype = raw.get("torch_dtype", raw.get("dtype", "bfloat16"))
        cfg = cls(
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=raw.get("num_key_value_heads", heads),
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            vocab_size=raw.get("vocab_size", QWEN3_VOCAB_SIZE),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            max_position_embeddings=raw.get("max_position_embeddings", 40960),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            initializer_range=float(raw.get("initializer_range", 0.02)),
            torch_dtype=str(dtype),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_id=raw.get("eos_token_id"),
            extra=dict(raw),
        )
        if cfg.num_attention_heads % cfg.num_key_value_heads:
            raise CheckpointError(
                f"{where}: num_attention_heads {cfg.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {cfg.num_key_value_heads}"
            )
        return cfg

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.extra)
        out.update(
            architectures=["Qwen3ForCausalLM"],
            model_type="qwen3",
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab_size,
            rms_norm_eps=self.rms_norm_eps,
            rope_theta=self.rope_theta,
            rope_scaling=None,
            max_position_embeddings=self.max_position_embeddings,
            tie_word_embeddings=self.tie_word_embeddings,
            initializer_range=self.initializer_range,
            torch_dtype=self.torch_dtype,
            bos_token_id=self.bos_token_id,
            eos_token_id=self.eos_token_id,
            hidden_act="silu",
            attention_bias=False,
            attention_dropout=0.0,
            use_cache=True,
            use_sliding_window=False,
            sliding_window=None,
            max_window_layers=self.num_hidden_layers,
        )
        out.pop("rope_parameters", None)
        out.pop("dtype", None)
        return out

    def shape_key(self) -> tuple:
        """Fields that fix every parameter's shape: a weight update must keep them."""
        return (
            self.hidden_size,
            self.intermediate_size,
            self.num_hidden_layers,
            self.num_attention_heads,
            self.num_key_value_heads,
            self.head_dim,
            self.vocab_size,
            self.tie_word_embeddings,
        )


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q [B,t,H,hd], k and v [B,t,kvH,hd], with the per-head norms and RoPE applied to q and k."""
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim))
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim))
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim)
        cos, sin = cos[:, :, None, :].to(q.dtype), sin[:, :, None, :].to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k, v

    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """Grouped-query attention of q [B,t,H,hd] over keys/values [B,kvH,L,hd]; allowed [B or 1,t,L].

        Query head h reads key/value head h // (H / kvH), as transformers' repeat_kv does; the groups are
        broadcast instead of copied.
        """
        b, t = q.shape[0], q.shape[1]
        groups = self.heads // self.kv_heads
        q = q.view(b, t, self.kv_heads, groups, self.head_dim).permute(0, 2, 3, 1, 4)  # [B,kvH,g,t,hd]
        scores = torch.matmul(q, keys.unsqueeze(2).transpose(-1, -2)) * (self.head_dim**-0.5)  # [B,kvH,g,t,L]
        scores = scores.masked_fill(~allowed[:, None, None], float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, values.unsqueeze(2))  # [B,kvH,g,t,hd]
        return self.o_proj(out.permute(0, 3, 1, 2, 4).reshape(b, t, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen3Body(nn.Module):
    """transformers' `Qwen3Model` (the `model.` prefix of every parameter name)."""

    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class KVCache:
    """Key/value cache for the engine: `rows` sequences of up to `max_len` tokens, grown on demand.

    Running requests occupy rows 0..B-1 (the engine keeps them compact), so a decode step reads the
    contiguous view `[:B, :, :L]` without gathering. Capacity doubles as sequences grow.
    """

    def __init__(self, cfg: Qwen3Config, rows: int, max_len: int, device: torch.device, dtype: torch.dtype, capacity: int = 512):
        self.cfg, self.rows, self.max_len, self.device, self.dtype = cfg, rows, max_len, device, dtype
        self.initial = min(capacity, max_len)
        self._alloc(self.initial)

    def _alloc(self, capacity: int) -> None:
        shape = (self.rows, self.cfg.num_key_value_heads, capacity, self.cfg.head_dim)
        self.k = [torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in range(self.cfg.num_hidden_layers)]
        self.v = [torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in range(self.cfg.num_hidden_layers)]
        self.capacity = capacity

    def reserve(self, length: int) -> None:
        if length <= self.capacity:
            return
        if length > self.max_len:
            raise ValueError(f"sequence of {length} tokens exceeds the cache's {self.max_len}")
        new = min(self.max_len, max(2 * self.capacity, length))
        old_k, old_v, old = self.k, self.v, self.capacity
        self._alloc(new)
        for i in range(len(old_k)):
            self.k[i][:, :, :old] = old_k[i]
            self.v[i][:, :, :old] = old_v[i]

    def move_row(self, src: int, dst: int, length: int) -> None:
        for i in range(len(self.k)):
            self.k[i][dst, :, :length] = self.k[i][src, :, :length]
            self.v[i][dst, :, :length] = self.v[i][src, :, :length]

    def reset(self) -> None:
        """Drop everything and shrink back to the initial capacity (frees memory)."""
        self._alloc(self.initial)

    def used_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


class Qwen3ForCausalLM(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.config = cfg
        self.model = Qwen3Body(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # RoPE frequencies stay float32 whatever the model's dtype (not a buffer, so `.to(dtype)` keeps them).
        steps = torch.arange(0, cfg.head_dim, 2, dtype=torch.int64, device="cpu").float()
        self._inv_freq = 1.0 / (cfg.rope_theta ** (steps / cfg.head_dim))

    # ---- construction -------------------------------------------------------------------------------

    def init_weights(self, seed: int) -> None:
        """transformers' initialisation: normal(0, initializer_range) for linear and embedding weights."""
        gen = torch.Generator().manual_seed(seed)
        std = self.config.initializer_range
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * std)

    # ---- forward ------------------------------------------------------------------------------------

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._inv_freq.device != positions.device:
            self._inv_freq = self._inv_freq.to(positions.device)
        freqs = positions[..., None].float() * self._inv_freq  # [B,t,hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Final hidden states [B,T,d] of whole sequences with causal attention (training, scoring).

        Rows may be right-padded: causal attention keeps padding from reaching the real tokens.
        """
        b, t = input_ids.shape
        if positions is None:
            positions = torch.arange(t, device=input_ids.device).expand(b, t)
        cos, sin = self._rope(positions)
        allowed = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril()[None]
        h = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            attn = layer.self_attn
            q, k, v = attn.project(layer.input_layernorm(h), cos, sin)
            h = h + attn.attend(q, k.transpose(1, 2), v.transpose(1, 2), allowed)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.model.norm(h)

    def extend(self, tokens: torch.Tensor, starts: torch.Tensor, cache: KVCache, first_row: int = 0) -> torch.Tensor:
        """Append `tokens` [B,t] to cache rows first_row..first_row+B-1 at positions starts[b]..starts[b]+t-1.

        Returns the final hidden states [B,t,d]. Each row attends to its own cached prefix and the new
        tokens causally; cache contents past a row's own length are masked out, so rows of different
        lengths share one batch (decode: t == 1 for every running request; prefill: one row, a chunk).
        """
        b, t = tokens.shape
        device = tokens.device
        positions = starts[:, None] + torch.arange(t, device=device)  # [B,t]
        length = int(starts.max().item()) + t
        cache.reserve(length)
        cos, sin = self._rope(positions)
        allowed = torch.arange(length, device=device)[None, None, :] <= positions[:, :, None]  # [B,t,L]
        rows = torch.arange(b, device=device)[:, None].expand(b, t)
        h = self.model.embed_tokens(tokens)
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            q, k, v = attn.project(layer.input_layernorm(h), cos, sin)
            keys = cache.k[i][first_row : first_row + b]
            values = cache.v[i][first_row : first_row + b]
            keys[rows, :, positions] = k
            values[rows, :, positions] = v
            h = h + attn.attend(q, keys[:, :, :length], values[:, :, :length], allowed)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.model.norm(h)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM-head logits in float32."""
        return self.lm_head(hidden).float()


# ---- checkpoints ---------------------------------------------------------------------------------------


def read_config(path: str | os.PathLike) -> Qwen3Config:
    path = Path(path)
    file = path / "config.json"
    if not file.is_file():
        raise CheckpointError(f"{path}: no config.json; point --model-path at a Hugging Face checkpoint directory")
    try:
        raw = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{file}: not JSON ({e})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{file}: expected a JSON object")
    return Qwen3Config.from_dict(raw, str(file))


def stop_token_ids(path: str | os.PathLike, cfg: Qwen3Config) -> list[int]:
    """End-of-sequence ids: config.json's `eos_token_id` plus generation_config.json's (as SGLang reads them)."""
    ids: list[int] = []
    sources: list[Any] = [cfg.eos_token_id]
    gen = Path(path) / "generation_config.json"
    if gen.is_file():
        try:
            sources.append(json.loads(gen.read_text()).get("eos_token_id"))
        except (json.JSONDecodeError, AttributeError):
            raise CheckpointError(f"{gen}: not a JSON object") from None
    for src in sources:
        for i in src if isinstance(src, list) else [src]:
            if isinstance(i, int) and i not in ids:
                ids.append(i)
    return ids


def read_state(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory: `model.safetensors`, or the shards of its index."""
    path = Path(path)
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    try:
        if single.is_file():
            return load_file(single)
        if index.is_file():
            weight_map = json.loads(index.read_text()).get("weight_map")
            if not isinstance(weight_map, dict):
                raise CheckpointError(f"{index}: no weight_map")
            state: dict[str, torch.Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                state.update(load_file(path / shard))
            return state
    except SafetensorsError as e:
        raise CheckpointError(str(e)) from None
    raise CheckpointError(f"{path}: no model.safetensors or model.safetensors.index.json")


def check_state(model: Qwen3ForCausalLM, state: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors by parameter name, after checking names and shapes; errors name them."""
    expected = dict(model.named_parameters())  # a tied lm_head is not listed (it is the embedding)
    state = dict(state)
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{where}: parameter names do not match Qwen3ForCausalLM with this config.json "
            f"(missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''})"
        )
    for name, p in expected.items():
        if tuple(state[name].shape) != tuple(p.shape):
            raise CheckpointError(f"{where}: {name} has shape {list(state[name].shape)}, expected {list(p.shape)}")
        if not state[name].is_floating_point():
            raise CheckpointError(f"{where}: {name} has dtype {state[name].dtype}, expected a floating-point tensor")
    return state


def load_pretrained(path: str | os.PathLike, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> Qwen3ForCausalLM:
    """Build the model from a checkpoint directory (dtype: the config's `torch_dtype` when None)."""
    cfg = read_config(path)
    dtype = dtype or parse_dtype(cfg.torch_dtype)
    if hasattr(torch, "set_default_device"):  # torch >= 2: allocate once, on the target, uninitialised
        with torch.device("meta"):
            model = Qwen3ForCausalLM(cfg)
        model = model.to_empty(device=device).to(dtype)
        if cfg.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
    else:
        model = Qwen3ForCausalLM(cfg).to(device=device, dtype=dtype)
    load_state_into(model, read_state(path), str(path))
    return model.eval()


def load_state_into(model: Qwen3ForCausalLM, state: dict[str, torch.Tensor], where: str) -> None:
    """Copy a checked state into the model's parameters in place (keeps devices, dtypes and tying)."""
    state = check_state(model, state, where)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(state[name].to(device=p.device, dtype=p.dtype))


def save_pretrained(model: Qwen3ForCausalLM, path: str | os.PathLike, dtype: torch.dtype | None = None) -> None:
    """Write `config.json`, `generation_config.json` and `model.safetensors` in Hugging Face's layout.

    Each file is written to a temporary name and renamed, the weights last, so a reader that waits for
    `model.safetensors` sees a complete checkpoint.
    """
    dtype = dtype or next(model.parameters()).dtype
    save_state(model.config, {name: p.detach() for name, p in model.named_parameters()}, path, dtype)


def save_state(cfg: Qwen3Config, state: dict[str, torch.Tensor], path: str | os.PathLike, dtype: torch.dtype) -> None:
    """`save_pretrained` for a state dict in transformers' names (a trainer's weights, not a model object)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg.torch_dtype = dtype_name(dtype)
    state = {name: t.detach().to(device="cpu", dtype=dtype) for name, t in state.items()}
    _write_json(path / "config.json", cfg.to_dict())
    eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id, QWEN3_ENDOFTEXT]
    gen = {"bos_token_id": cfg.bos_token_id, "eos_token_id": [i for i in dict.fromkeys(eos) if i is not None]}
    _write_json(path / "generation_config.json", gen)
    save_file(state, path / "model.safetensors")


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


_DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_dtype(name: str) -> torch.dtype:
    name = name.replace("torch.", "")
    if name not in _DTYPE_NAMES:
        raise CheckpointError(f"dtype {name!r} is not supported; use one of {sorted(_DTYPE_NAMES)}")
    return _DTYPE_NAMES[name]


def dtype_name(dtype: torch.dtype) -> str:
    for name, d in _DTYPE_NAMES.items():
        if d == dtype:
            return name
    raise CheckpointError(f"dtype {dtype} cannot be saved; use float32, bfloat16 or float16")


def new_model(cfg: Qwen3Config, seed: int) -> Qwen3ForCausalLM:
    model = Qwen3ForCausalLM(cfg)
    model.init_weights(seed)
    return model


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = [
    "CheckpointError",
    "KVCache",
    "PRESETS",
    "Qwen3Config",
    "Qwen3ForCausalLM",
    "load_pretrained",
    "load_state_into",
    "new_model",
    "parameter_count",
    "read_config",
    "read_state",
    "save_pretrained",
    "save_state",
    "stop_token_ids",
]
