"""The loop trainer's megatron backend: a Hugging Face Qwen3 checkpoint in megatron.core's GPTModel (GPU).

GPTModel with the local layer spec in Qwen3's shape (`qwen3_layout`: RMSNorm, q/k norms, GQA, head_dim
as kv_channels, SwiGLU, no biases, RoPE base rope_theta, tied or untied head) in bf16, megatron.core's
DDP and distributed optimizer (`train.wrap_for_training`), micro-batches packed into block-diagonal
rows and run through megatron.core's pipeline schedule, as `train.py` does. After each step the weights
are exported back to transformers' names for the policy server. One GPU, TP = PP = DP = 1.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import torch

from vime_policy.model import CheckpointError, parse_dtype, read_config, read_state, save_state

from .loss import SampleTerms, sum_of_sample_means
from .packing import PackedRow, build_row, next_token_log_probs, pack_microbatches, response_slices
from .qwen3_layout import gpt_model_kwargs, hf_to_megatron, megatron_to_hf, transformer_config_kwargs
from .step_batch import StepBatch, StepResult
from .train import init_megatron, on_gpu, wrap_for_training


def ensure_megatron_core() -> None:
    """Import megatron.core: installed (pip install megatron-core) or on PYTHONPATH (the source that
    python/scripts/vendor-megatron.sh puts under python/.vendor/, which run.sh and the closed loop add),
    else an ImportError that says so."""
    try:
        import megatron.core  # noqa: F401
    except ImportError:
        raise ImportError(
            "megatron.core is neither installed (pip install megatron-core) nor on PYTHONPATH; on a machine "
            "without internet run python/scripts/vendor-megatron.sh <Megatron-LM git dir> and put "
            "python/.vendor/megatron-lm on PYTHONPATH"
        ) from None


def build_qwen3_gpt(cfg, dtype: torch.dtype = torch.bfloat16):
    """An empty GPTModel on the GPU computing Qwen3 of config `cfg` (vime_policy's Qwen3Config)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    half = dtype == torch.bfloat16
    config = TransformerConfig(**transformer_config_kwargs(cfg), bf16=half, params_dtype=dtype, pipeline_dtype=dtype)
    spec = get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=True)
    gpt = GPTModel(config=config, transformer_layer_spec=spec, **gpt_model_kwargs(cfg, cfg.max_position_embeddings))
    return config, gpt.cuda()


def load_hf_into(gpt, cfg, state: dict[str, torch.Tensor], where: str) -> None:
    """Copy a Hugging Face state dict into the GPTModel's parameters (names and shapes checked)."""
    converted = hf_to_megatron(state, cfg)
    params = dict(gpt.named_parameters())
    missing, unexpected = sorted(set(params) - set(converted)), sorted(set(converted) - set(params))
    if missing or unexpected:
        raise CheckpointError(f"{where}: GPTModel parameters missing from the conversion {missing[:4]}, unexpected {unexpected[:4]}")
    with torch.no_grad():
        for name, p in params.items():
            if tuple(converted[name].shape) != tuple(p.shape):
                raise CheckpointError(f"{where}: {name} has shape {list(converted[name].shape)}, GPTModel expects {list(p.shape)}")
            p.copy_(converted[name].to(device=p.device, dtype=p.dtype))


def export_hf(gpt, cfg) -> dict[str, torch.Tensor]:
    """The GPTModel's current weights under transformers' names (on the GPU, in the model's dtype)."""
    return megatron_to_hf({name: p.detach() for name, p in gpt.named_parameters()}, cfg)


class MegatronBackend:
    name = "megatron"
    label = "megatron.core"
    precision = "bf16, fp32 main params (distributed optimizer)"
    device = "cuda"

    def __init__(self, model_path: str, lr: float = 1e-6, clip_grad: float = 1.0, temperature: float = 1.0, max_tokens_per_gpu: int = 8192, seed: int = 1234):
        if not torch.cuda.is_available():
            raise SystemExit("the megatron backend needs a CUDA GPU and none is visible; use --backend torch on CPU")
        os.environ.setdefault("NO_VCS_VERSION", "1")  # megatron.core's version module would call git otherwise
        ensure_megatron_core()
        self.cfg = read_config(model_path)
        state = read_state(model_path)
        self.save_dtype = parse_dtype(self.cfg.torch_dtype)
        init_megatron(seed)
        self.config, self.gpt = build_qwen3_gpt(self.cfg)
        load_hf_into(self.gpt, self.cfg, state, str(model_path))
        del state
        self.model, self.optimizer = wrap_for_training(self.config, self.gpt, lr, clip_grad)
        self.temperature, self.max_tokens = temperature, max_tokens_per_gpu
        self.vocab_size = self.cfg.vocab_size
        self.parameters = sum(p.numel() for p in self.gpt.parameters())

    def step(self, batch: StepBatch, eps_clip: float, eps_clip_high: float) -> StepResult:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        samples = batch.samples
        micro_batches = pack_microbatches([s.total_length for s in samples], self.max_tokens)
        rows = [on_gpu(build_row(mb, [samples[p].tokens for p in mb])) for mb in micro_batches]
        rollouts = batch.num_rollouts
        scale = len(rows) / rollouts  # the schedule divides by num_microbatches; slime's loss is a mean over rollouts
        collected: dict[int, torch.Tensor] = {}
        totals = {"pg_loss": 0.0, "pg_clipfrac": 0.0, "ppo_kl": 0.0}

        def loss_func(row: PackedRow, logits: torch.Tensor):
            lp = next_token_log_probs(logits / self.temperature if self.temperature != 1.0 else logits, row.tokens)
            members = [samples[p] for p in row.positions]
            slices = response_slices(row, [s.total_length for s in members], [s.response_length for s in members])
            terms = []
            for s, sl in zip(members, slices):
                p = s.rollout_position
                collected[p] = lp[sl].detach()
                terms.append(
                    SampleTerms(
                        log_probs=lp[sl],
                        old_log_probs=torch.tensor(s.rollout_log_probs, dtype=torch.float32, device=lp.device),
                        advantages=torch.full_like(lp[sl], batch.advantages[p]),
                        loss_mask=torch.tensor(s.loss_mask, dtype=torch.float32, device=lp.device),
                        mask_sum=batch.mask_sums[p],
                    )
                )
            loss, parts = sum_of_sample_means(terms, eps_clip, eps_clip_high)
            for key, value in parts.items():
                totals[key] += value / rollouts
            one = torch.ones((), dtype=torch.int, device=logits.device)
            return loss * scale, one, {"pg_loss": loss.detach()}

        def forward_step(data_iterator, model):
            row = next(data_iterator)
            return model(row.tokens, row.position_ids, row.attention_mask), partial(loss_func, row)

        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=iter(rows),
            model=[self.model],
            num_microbatches=len(rows),
            seq_length=max(row.tokens.shape[1] for row in rows),
            micro_batch_size=1,
            forward_only=False,
        )
        updated, grad_norm, _ = self.optimizer.step()  # skips the update itself on a non-finite gradient
        return StepResult(
            log_probs={p: lp.float().cpu() for p, lp in collected.items()},
            micro_batches=micro_batches,
            loss=float(totals["pg_loss"]),
            pg_clipfrac=float(totals["pg_clipfrac"]),
            ppo_kl=float(totals["ppo_kl"]),
            grad_norm=float(grad_norm) if grad_norm is not None else float("nan"),
            updated=bool(updated),
        )

    @torch.no_grad()
    def logits(self, tokens: list[int]) -> torch.Tensor:
        """float32 logits `[L, V]` of one sequence (forward only; for the GPU self-check)."""
        row = on_gpu(build_row([0], [tokens]))
        self.model.eval()
        try:
            out = self.model(row.tokens, row.position_ids, row.attention_mask)
        finally:
            self.model.train()
        return out[0, : len(tokens)].float()

    def save(self, path: Path) -> None:
        save_state(self.cfg, export_hf(self.gpt, self.cfg), path, self.save_dtype)

    def close(self) -> None:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
