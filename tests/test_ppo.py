"""PPO math against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlinf.algorithms.ppo import RunningNorm, discounted_returns, gae, normalize_advantages, ppo_loss


def test_gae_by_hand() -> None:
    # gamma = lam = 0.5; the episode ends at t=1, so t=0 bootstraps from V(s1) and t=1 from nothing.
    # t=2: delta = 1 + 0.5*2 - 0.5 = 1.5                      A = 1.5
    # t=1: delta = 1 - 0.5 = 0.5 (done)                        A = 0.5
    # t=0: delta = 1 + 0.5*0.5 - 0.5 = 0.75                    A = 0.75 + 0.25*0.5 = 0.875
    advantages, returns = gae(
        np.array([[1.0], [1.0], [1.0]]),
        np.array([[0.5], [0.5], [0.5]]),
        np.array([[0.0], [1.0], [0.0]]),
        np.array([2.0]),
        gamma=0.5,
        lam=0.5,
    )
    np.testing.assert_allclose(advantages[:, 0], [0.875, 0.5, 1.5])
    np.testing.assert_allclose(returns[:, 0], [1.375, 1.0, 2.0])


def test_gae_with_lambda_one_is_the_discounted_return_minus_value() -> None:
    rewards = np.array([[1.0, 2.0], [3.0, 4.0]])
    values = np.array([[0.1, 0.2], [0.3, 0.4]])
    advantages, returns = gae(rewards, values, np.zeros((2, 2)), np.array([10.0, 20.0]), gamma=0.9, lam=1.0)
    expected = np.array([[1 + 0.9 * 3 + 0.81 * 10, 2 + 0.9 * 4 + 0.81 * 20], [3 + 0.9 * 10, 4 + 0.9 * 20]])
    np.testing.assert_allclose(returns, expected, rtol=1e-6)
    np.testing.assert_allclose(advantages, expected - values, rtol=1e-6)


def test_ppo_loss_by_hand() -> None:
    # ratios 1 and 2, advantages 1: surrogate terms max(-1, -1) and max(-2, -1.2) -> mean -1.1
    # value: 0.5 * mean(1, 4) = 1.25; entropy mean 2; loss = -1.1 + 0.5*1.25 - 0.01*2 = -0.495
    loss, stats = ppo_loss(
        torch.tensor([0.0, math.log(2.0)]),
        torch.tensor([0.0, 0.0]),
        torch.tensor([1.0, 1.0]),
        torch.tensor([1.0, 2.0]),
        torch.tensor([0.0, 0.0]),
        torch.tensor([1.0, 3.0]),
        clip_coef=0.2,
        value_coef=0.5,
        entropy_coef=0.01,
    )
    assert loss.item() == pytest.approx(-0.495, abs=1e-6)
    assert stats["policy_loss"] == pytest.approx(-1.1, abs=1e-6)
    assert stats["value_loss"] == pytest.approx(1.25)
    assert stats["clip_fraction"] == pytest.approx(0.5)


def test_ppo_loss_clips_negative_advantages_from_below() -> None:
    # ratio 0.5 with A = -1: terms 0.5 and clip(0.5) * 1 = 0.8 -> max 0.8 (the pessimistic bound)
    loss, _ = ppo_loss(
        torch.tensor([math.log(0.5)]),
        torch.tensor([0.0]),
        torch.tensor([-1.0]),
        torch.tensor([0.0]),
        torch.tensor([0.0]),
        torch.tensor([0.0]),
        clip_coef=0.2,
        value_coef=0.5,
        entropy_coef=0.0,
    )
    assert loss.item() == pytest.approx(0.8)


def test_ppo_loss_gradient_vanishes_outside_the_clip_range() -> None:
    new = torch.tensor([math.log(2.0)], requires_grad=True)
    loss, _ = ppo_loss(
        new,
        torch.tensor([0.0]),
        torch.tensor([1.0]),
        torch.tensor([0.0]),
        torch.tensor([0.0]),
        torch.tensor([0.0]),
        clip_coef=0.2,
        value_coef=0.0,
        entropy_coef=0.0,
    )
    loss.backward()
    assert new.grad is not None and new.grad.item() == 0.0


def test_running_norm_merge_by_hand() -> None:
    # {-1, 1} (mean 0, var 1, count 2) merged with {2, 4}: all four have mean 1.5 and variance 3.25
    norm = RunningNorm(mean=[0.0], var=[1.0], count=2.0).update(np.array([[2.0], [4.0]]))
    assert norm.count == 4.0
    np.testing.assert_allclose(norm.mean, [1.5])
    np.testing.assert_allclose(norm.var, [3.25])
    np.testing.assert_allclose(norm.normalize(np.array([3.0])), [1.5 / math.sqrt(3.25)], rtol=1e-6)
    np.testing.assert_allclose(norm.normalize(np.array([1e6]), clip=5.0), [5.0])


def test_running_norm_is_order_independent() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(100, 3))
    start = RunningNorm.zeros((3,))
    once = start.update(data)
    twice = start.update(data[:37]).update(data[37:])
    np.testing.assert_allclose(once.mean, twice.mean)
    np.testing.assert_allclose(once.var, twice.var)
    np.testing.assert_allclose(once.mean, data.mean(0), rtol=1e-5)


def test_discounted_returns_reset_at_episode_ends() -> None:
    returns, running = discounted_returns(np.zeros(1), np.ones((3, 1)), np.array([[0.0], [1.0], [0.0]]), 0.5)
    np.testing.assert_allclose(returns[:, 0], [1.0, 1.5, 1.0])
    np.testing.assert_allclose(running, [1.0])


def test_normalize_advantages() -> None:
    out = normalize_advantages(torch.tensor([1.0, 3.0]))
    assert torch.allclose(out, torch.tensor([-1.0, 1.0]), atol=1e-6)


def test_the_closed_form_gaussian_equals_torch_distributions_and_its_gradients() -> None:
    """The policy's log-probabilities and entropy (closed form, for speed) against ``torch.distributions.Normal``,
    values and gradients, and against the density written out by hand for one action."""
    from rlinf.workloads.embodied.policy import ActorCritic, gaussian_entropy, gaussian_log_prob

    torch.manual_seed(0)
    model = ActorCritic(5, 3, (8, 8))
    with torch.no_grad():
        model.log_std.copy_(torch.tensor([-0.5, 0.0, 0.7]))
    obs, actions = torch.randn(6, 5), torch.randn(6, 3)
    log_probs, entropy, _ = model.evaluate(obs, actions)
    reference = torch.distributions.Normal(model.mean(obs), model.log_std.exp().expand(6, -1))
    torch.testing.assert_close(log_probs, reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, reference.entropy().sum(-1))
    (log_probs.sum() + entropy.sum()).backward()
    policy = list(model.mean.parameters()) + [model.log_std]  # the value head plays no part here
    ours = [p.grad.clone() for p in policy]
    model.zero_grad()
    (reference.log_prob(actions).sum() + reference.entropy().sum()).backward()
    for got, want in zip(ours, [p.grad for p in policy], strict=True):
        torch.testing.assert_close(got, want)
    # one action of one dimension: log N(1; 0, e^2) = -1/(2 e^2) - 1 - log sqrt(2 pi)
    by_hand = -1 / (2 * math.e**2) - 1.0 - 0.5 * math.log(2 * math.pi)
    one = gaussian_log_prob(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([1.0]))
    assert one.item() == pytest.approx(by_hand)
    assert gaussian_entropy(torch.tensor([1.0]), 2).tolist() == pytest.approx(
        [0.5 + 0.5 * math.log(2 * math.pi) + 1] * 2
    )
    # sampled actions: act's log-probabilities are those of the actions it returns
    actions, sampled_log_probs, _ = model.act(obs, torch.Generator().manual_seed(1))
    torch.testing.assert_close(sampled_log_probs, reference.log_prob(actions).sum(-1).detach())
