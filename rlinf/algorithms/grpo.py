"""Group Relative Policy Optimization (GRPO) as pure functions over tensors.

GRPO (Shao et al., 2024, DeepSeekMath) samples a *group* of ``G`` responses per prompt, scores each with a
reward, and uses the reward normalized within the group as the advantage of every token of that response:

    A_i = (r_i - mean(r_1..r_G)) / (std(r_1..r_G) + eps)

The policy loss is PPO's clipped surrogate, averaged over the tokens of a response and then over responses:

    L_pg = - mean_i  mean_t  min(rho_it * A_i, clip(rho_it, 1 - eps_clip, 1 + eps_clip) * A_i),
    rho_it = exp(log pi(o_it) - log pi_old(o_it))

with an optional KL penalty to a frozen reference policy, using the unbiased non-negative "k3" estimator

    KL_it = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1,     L = L_pg + beta * mean_i mean_t KL_it.

Every function takes tensors and returns tensors; nothing here holds state. Shapes: ``B`` sequences, ``T`` token
positions; ``mask`` is 1.0 where a position is a response token that counts, 0.0 elsewhere (prompt, padding).
"""

from __future__ import annotations

import attrs
import torch

from rlinf.core.errors import non_negative, positive, require


@attrs.frozen(kw_only=True)
class GrpoConfig:
    """Hyperparameters of the GRPO objective."""

    clip_eps: float = 0.2
    """PPO clip range: the ratio is clipped to ``[1 - clip_eps, 1 + clip_eps]``."""
    kl_coef: float = 0.0
    """Weight ``beta`` of the KL penalty to the reference policy; 0 disables it (no reference needed)."""
    scale_by_std: bool = True
    """Divide group-centred rewards by the group's standard deviation (GRPO); False keeps only centring."""
    std_eps: float = 1e-6
    """Added to the group standard deviation so that groups of equal rewards get zero advantage, not NaN."""

    def __attrs_post_init__(self) -> None:
        positive("grpo.clip_eps", self.clip_eps)
        non_negative("grpo.kl_coef", self.kl_coef)
        positive("grpo.std_eps", self.std_eps)


@attrs.frozen(kw_only=True)
class GrpoLossTerms:
    """The scalar loss to differentiate and its parts (detached floats) for logging."""

    loss: torch.Tensor
    """Scalar: policy loss + kl_coef * kl, averaged over sequences."""
    policy_loss: float
    kl: float
    """Mean per-sequence KL estimate to the reference (0.0 when no reference is given)."""
    clip_fraction: float
    """Fraction of counted tokens whose ratio lies outside the clip range."""


def group_advantages(
    rewards: torch.Tensor, *, scale_by_std: bool = True, std_eps: float = 1e-6
) -> torch.Tensor:
    """Group-normalized advantages: ``(r - group mean) / (group std + std_eps)``.

    ``rewards`` has shape ``[num_groups, group_size]``; the standard deviation is the population one
    (divide by ``group_size``). A group whose rewards are all equal gets advantage 0 for every response.
    """
    require(
        rewards.dim() == 2,
        "rewards.shape",
        tuple(rewards.shape),
        "must be [num_groups, group_size]",
        "reshape rewards per group",
    )
    rewards = rewards.to(torch.float32)
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale_by_std:
        return centred
    std = rewards.std(dim=1, keepdim=True, unbiased=False)
    return centred / (std + std_eps)


def masked_sequence_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over the masked positions of each sequence: ``[B, T] -> [B]`` (0 for empty masks)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate per sequence.

    Returns ``(per_sequence_loss [B], clipped [B, T] bool)``: the loss is ``-min(rho A, clip(rho) A)`` averaged
    over each sequence's masked tokens, with ``A = advantages[b]`` (one advantage per sequence, shape ``[B]``).
    """
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    was_clipped = ((ratio < 1.0 - clip_eps) | (ratio > 1.0 + clip_eps)) & (mask > 0)
    return masked_sequence_mean(per_token, mask), was_clipped


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): ``exp(ref - lp) - (ref - lp) - 1`` (always >= 0)."""
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1.0


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: GrpoConfig,
) -> GrpoLossTerms:
    """The GRPO objective over one batch of sequences (see the module docstring for the formula).

    ``ref_logprobs`` may be None only when ``config.kl_coef == 0``.
    """
    require(
        ref_logprobs is not None or config.kl_coef == 0.0,
        "grpo.kl_coef",
        config.kl_coef,
        "a KL penalty needs reference log-probabilities",
        "compute ref_logprobs with the reference policy or set kl_coef to 0",
    )
    per_sequence, was_clipped = clipped_policy_loss(
        logprobs, old_logprobs, advantages, mask, clip_eps=config.clip_eps
    )
    policy_loss = per_sequence.mean()
    loss = policy_loss
    kl_value = 0.0
    if ref_logprobs is not None:
        kl = masked_sequence_mean(kl_k3(logprobs, ref_logprobs), mask).mean()
        kl_value = float(kl.detach())
        if config.kl_coef > 0.0:
            loss = loss + config.kl_coef * kl
    num_tokens = float(mask.sum().clamp(min=1.0))
    return GrpoLossTerms(
        loss=loss,
        policy_loss=float(policy_loss.detach()),
        kl=kl_value,
        clip_fraction=float(was_clipped.sum()) / num_tokens,
    )
