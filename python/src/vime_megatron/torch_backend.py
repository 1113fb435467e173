"""The loop trainer's plain torch backend: vime_policy's Qwen3 (the policy server's own model code) and AdamW.

Labelled "plain torch" wherever its output appears: it is not megatron.core. It runs on CPU (CI's
miniature loop) and on CUDA. Each sample is its own row (no packing): vime_policy's forward is causal
over the whole row, and log probs are computed only at response positions, in chunks recomputed in the
backward pass, so a 152k vocabulary costs chunk x vocab floats at a time.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint

from vime_policy.model import load_pretrained, parse_dtype, save_pretrained

from .loss import SampleTerms, sum_of_sample_means
from .step_batch import StepBatch, StepResult


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def response_log_probs(model, tokens: list[int], response_length: int, temperature: float = 1.0, chunk: int = 128) -> torch.Tensor:
    """log p(response token j | everything before it) for one sample, float32 `[R]` (differentiable)."""
    device = next(model.parameters()).device
    ids = torch.tensor([tokens], dtype=torch.long, device=device)
    hidden = model(ids)[0]  # [L, d]
    start = len(tokens) - response_length
    picked = hidden[start - 1 : len(tokens) - 1]  # hidden state j-1 predicts token j
    targets = ids[0, start:]

    def score(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model.logits(h) / temperature
        return torch.log_softmax(logits, dim=-1).gather(-1, y[:, None]).squeeze(-1)

    parts = []
    for s in range(0, response_length, chunk):
        h, y = picked[s : s + chunk], targets[s : s + chunk]
        parts.append(checkpoint(score, h, y, use_reentrant=False) if torch.is_grad_enabled() else score(h, y))
    return torch.cat(parts)


class TorchBackend:
    name = "torch"
    label = "plain torch"

    def __init__(self, model_path: str, device: str = "auto", lr: float = 1e-6, clip_grad: float = 1.0, temperature: float = 1.0, seed: int = 1234):
        torch.manual_seed(seed)
        self.device = pick_device(device)
        self.model = load_pretrained(model_path, device=self.device, dtype=torch.float32).train()
        # Written in the checkpoint's own dtype, which is what the policy server loads.
        self.save_dtype = parse_dtype(self.model.config.torch_dtype)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0)
        self.clip_grad, self.temperature = clip_grad, temperature
        self.chunk = 2048 if self.device.type == "cuda" else 128
        self.vocab_size = self.model.config.vocab_size
        self.parameters = sum(p.numel() for p in self.model.parameters())
        self.precision = "bf16 autocast, fp32 weights" if self.device.type == "cuda" else "float32"

    def _autocast(self):
        if self.device.type == "cuda":
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, batch: StepBatch, eps_clip: float, eps_clip_high: float) -> StepResult:
        """One optimizer step over the whole batch: per-sample backward passes, one clipped AdamW update."""
        self.optimizer.zero_grad(set_to_none=True)
        totals = {"pg_loss": 0.0, "pg_clipfrac": 0.0, "ppo_kl": 0.0}
        log_probs: dict[int, torch.Tensor] = {}
        rollouts = batch.num_rollouts
        for s in batch.samples:
            p = s.rollout_position
            trains = sum(s.loss_mask) > 0
            with self._autocast(), (contextlib.nullcontext() if trains else torch.no_grad()):
                lp = response_log_probs(self.model, s.tokens, s.response_length, self.temperature, self.chunk)
            log_probs[p] = lp.detach().float().cpu()
            if not trains:
                continue
            term = SampleTerms(
                log_probs=lp,
                old_log_probs=torch.tensor(s.rollout_log_probs, dtype=torch.float32, device=lp.device),
                advantages=torch.full_like(lp, batch.advantages[p]),
                loss_mask=torch.tensor(s.loss_mask, dtype=torch.float32, device=lp.device),
                mask_sum=batch.mask_sums[p],
            )
            loss, parts = sum_of_sample_means([term], eps_clip, eps_clip_high)
            (loss / rollouts).backward()
            for key, value in parts.items():
                totals[key] += float(value) / rollouts
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad))
        updated = math.isfinite(grad_norm)
        if updated:  # a non-finite gradient would poison the weights: skip the update instead
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(
            log_probs=log_probs,
            micro_batches=[[s.rollout_position] for s in batch.samples],
            loss=totals["pg_loss"],
            pg_clipfrac=totals["pg_clipfrac"],
            ppo_kl=totals["ppo_kl"],
            grad_norm=grad_norm,
            updated=updated,
        )

    def save(self, path: Path) -> None:
        """The current weights as a Hugging Face checkpoint folder (config.json + model.safetensors)."""
        save_pretrained(self.model, path, dtype=self.save_dtype)

    def close(self) -> None:
        pass
