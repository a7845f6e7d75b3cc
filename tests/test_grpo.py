"""GRPO math against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf.algorithms.grpo import (
    GrpoConfig,
    clipped_policy_loss,
    group_advantages,
    grpo_loss,
    kl_k3,
    masked_sequence_mean,
)
from rlinf.core.errors import ConfigError


def test_group_advantages_normalize_within_each_group():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    adv = group_advantages(rewards, std_eps=0.0 + 1e-12)
    # group 0: mean 0.5, population std 0.5; group 2: mean 0.25, std sqrt(0.25 * 0.75)
    assert torch.allclose(adv[0], torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-6)
    assert torch.equal(adv[1], torch.zeros(4))
    std = math.sqrt(0.25 * 0.75)
    assert torch.allclose(
        adv[2], torch.tensor([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std]), atol=1e-6
    )


def test_group_advantages_without_std_only_centre():
    adv = group_advantages(torch.tensor([[3.0, 1.0]]), scale_by_std=False)
    assert torch.equal(adv, torch.tensor([[1.0, -1.0]]))


def test_group_advantages_reject_flat_rewards():
    with pytest.raises(ConfigError, match="num_groups, group_size"):
        group_advantages(torch.tensor([1.0, 0.0]))


def test_masked_sequence_mean_ignores_masked_positions():
    values = torch.tensor([[1.0, 3.0, 100.0], [5.0, 7.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.equal(masked_sequence_mean(values, mask), torch.tensor([2.0, 0.0]))


def test_clipped_loss_matches_hand_computation():
    logprobs = torch.log(torch.tensor([[1.5, 0.5, 1.0], [1.5, 0.5, 1.0]]))
    old = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    advantages = torch.tensor([1.0, -1.0])
    loss, clipped = clipped_policy_loss(logprobs, old, advantages, mask, clip_eps=0.2)
    # A=+1: -min(1.5, 1.2) = -1.2 and -min(0.5, 0.8) = -0.5 -> mean -0.85
    # A=-1: -min(-1.5, -1.2) = 1.5 and -min(-0.5, -0.8) = 0.8 -> mean 1.15
    assert torch.allclose(loss, torch.tensor([-0.85, 1.15]), atol=1e-6)
    assert clipped.tolist() == [[True, True, False], [True, True, False]]


def test_clipped_tokens_get_no_gradient():
    logprobs = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_(True)
    loss, _ = clipped_policy_loss(
        logprobs, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), clip_eps=0.2
    )
    loss.sum().backward()
    # ratio 1.5 > 1.2 with A > 0 is clipped (zero gradient); ratio 1.1 is not: d/dlp(-rho/2) = -1.1/2
    assert logprobs.grad[0, 0].item() == 0.0
    assert logprobs.grad[0, 1].item() == pytest.approx(-0.55, abs=1e-6)


def test_kl_k3_matches_hand_computation():
    kl = kl_k3(torch.log(torch.tensor([0.5, 0.3])), torch.log(torch.tensor([0.25, 0.3])))
    # ratio ref/pi = 0.5: 0.5 - ln 0.5 - 1
    assert kl[0].item() == pytest.approx(0.5 - math.log(0.5) - 1.0, abs=1e-6)
    assert kl[1].item() == pytest.approx(0.0, abs=1e-7)


def test_grpo_loss_adds_weighted_kl():
    logprobs = torch.log(torch.tensor([[0.5, 0.5]]))
    ref = torch.log(torch.tensor([[0.25, 0.5]]))
    mask = torch.tensor([[1.0, 0.0]])
    terms = grpo_loss(logprobs, logprobs.clone(), ref, torch.tensor([2.0]), mask, GrpoConfig(kl_coef=0.1))
    kl = 0.5 - math.log(0.5) - 1.0
    # ratio 1 -> policy loss -A = -2; only the first token counts
    assert terms.policy_loss == pytest.approx(-2.0)
    assert terms.kl == pytest.approx(kl, abs=1e-6)
    assert terms.loss.item() == pytest.approx(-2.0 + 0.1 * kl, abs=1e-6)
    assert terms.clip_fraction == 0.0


def test_grpo_loss_needs_reference_for_kl():
    lp = torch.zeros(1, 2)
    with pytest.raises(ConfigError, match="kl_coef"):
        grpo_loss(lp, lp, None, torch.ones(1), torch.ones(1, 2), GrpoConfig(kl_coef=0.1))


def test_grpo_config_validates():
    with pytest.raises(ConfigError, match="clip_eps"):
        GrpoConfig(clip_eps=0.0)
    with pytest.raises(ConfigError, match="kl_coef"):
        GrpoConfig(kl_coef=-1.0)
