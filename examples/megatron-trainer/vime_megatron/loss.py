"""slime's policy loss and its reduction, on one sample's response tokens.

`slime/utils/ppo_utils.py::compute_policy_loss` with the old log probs taken from the rollout
(`--use-rollout-logprobs`): ratio = exp(logp - rollout_logp), loss = max(-ratio·A, -clip(ratio,
1 - eps_clip, 1 + eps_clip_high)·A). The reducer (`get_sum_of_sample_mean`) takes each sample's
token mean over its loss mask, with the denominator shared by samples of one rollout id.
"""

from __future__ import annotations

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


def sample_mean(values: torch.Tensor, loss_mask: torch.Tensor, mask_sum: float) -> torch.Tensor:
    """Σ_t values·mask / max(mask_sum, 1): one sample's share of the per-rollout token mean."""
    return (values * loss_mask).sum() / max(mask_sum, 1.0)
