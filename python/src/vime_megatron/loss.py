"""slime's policy loss and its reduction over samples.

`slime/utils/ppo_utils.py::compute_policy_loss`: ratio = exp(logp - old_logp), loss = max(-ratio·A,
-clip(ratio, 1 - eps_clip, 1 + eps_clip_high)·A). The trainer takes the old log probs from the
rollout (`--use-rollout-logprobs`). The reducer (`get_sum_of_sample_mean`) sums each sample's token
mean over its loss mask, with the denominator shared by the samples of one rollout id; the caller
scales the sum by num_microbatches / rollouts in the step, since megatron's schedule divides by
num_microbatches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    eps_clip: float = 0.2,
    eps_clip_high: float = 0.28,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token PPO-clip loss, clip indicator and ppo_kl (old - new), all `[R]`."""
    ppo_kl = old_log_probs - log_probs
    ratio = torch.exp(-ppo_kl)
    unclipped = -ratio * advantages
    clipped = -ratio.clamp(1 - eps_clip, 1 + eps_clip_high) * advantages
    loss = torch.maximum(unclipped, clipped)
    clipfrac = torch.gt(clipped, unclipped).float()
    return loss, clipfrac, ppo_kl


@dataclass
class SampleTerms:
    """One sample's response tensors, all `[R]` on one device, and its reducer denominator."""

    log_probs: torch.Tensor  # trainer log probs, with grad
    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    loss_mask: torch.Tensor  # float 0/1
    mask_sum: float  # loss-mask total over the samples sharing this sample's rollout id


def sum_of_sample_means(
    samples: list[SampleTerms], eps_clip: float = 0.2, eps_clip_high: float = 0.28
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Σ_i Σ_t(x·m)/max(D_i, 1) of the policy loss, and of clipfrac and ppo_kl as detached metrics.

    Metrics stay 0-d tensors on the loss's device, so a training step synchronises with the GPU once.
    """
    loss = samples[0].log_probs.new_zeros(())
    clipfrac = loss.new_zeros(())
    ppo_kl = loss.new_zeros(())
    for s in samples:
        pg, clipped, kl = policy_loss(s.log_probs, s.old_log_probs, s.advantages, eps_clip, eps_clip_high)
        denominator = max(s.mask_sum, 1.0)
        loss = loss + (pg * s.loss_mask).sum() / denominator
        clipfrac = clipfrac + (clipped * s.loss_mask).sum() / denominator
        ppo_kl = ppo_kl + (kl.detach() * s.loss_mask).sum() / denominator
    return loss, {"pg_loss": loss.detach(), "pg_clipfrac": clipfrac, "ppo_kl": ppo_kl}
