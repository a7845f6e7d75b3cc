"""The MLP actor-critic of embodied PPO: a Gaussian policy (state-independent log std) and a value head."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn


def _mlp(sizes: Sequence[int], out_scale: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        linear = nn.Linear(a, b)
        last = i == len(sizes) - 2
        nn.init.orthogonal_(linear.weight, out_scale if last else math.sqrt(2.0))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """``pi(a|s) = N(mu(s), exp(log_std))`` and ``V(s)``, each an MLP with tanh hidden layers."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        self.mean = _mlp([obs_dim, *hidden_sizes, act_dim], 0.01)
        self.log_std = nn.Parameter(torch.zeros(act_dim))
        self.value = _mlp([obs_dim, *hidden_sizes, 1], 1.0)

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Normal:
        """The action distribution at ``obs``."""
        return torch.distributions.Normal(self.mean(obs), self.log_std.exp().expand(obs.shape[0], -1))

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(obs)`` as a vector."""
        return self.value(obs).squeeze(-1)

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled actions, their log-probabilities and the values."""
        mean = self.mean(obs)
        std = self.log_std.exp().expand_as(mean)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        actions = mean + std * noise
        log_probs = torch.distributions.Normal(mean, std).log_prob(actions).sum(-1)
        return actions, log_probs, self.values(obs)

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probabilities and entropies of ``actions`` at ``obs``, and ``V(obs)``."""
        dist = self.distribution(obs)
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1), self.values(obs)


def to_payload(model: nn.Module) -> dict[str, np.ndarray]:
    """Weights as numpy arrays keyed ``model.<name>``."""
    return {f"model.{k}": v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def load_payload(model: nn.Module, payload: dict[str, np.ndarray]) -> None:
    """Load weights written by :func:`to_payload`."""
    device = next(model.parameters()).device
    state = {
        k[len("model.") :]: torch.as_tensor(np.asarray(v), device=device)
        for k, v in payload.items()
        if k.startswith("model.")
    }
    model.load_state_dict(state)


def parameter_bytes(obs_dim: int, act_dim: int, hidden_sizes: Sequence[int]) -> int:
    """Bytes of the float32 weights of an :class:`ActorCritic`."""
    sizes = [obs_dim, *hidden_sizes]
    hidden = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    return 4 * (2 * hidden + hidden_sizes[-1] * act_dim + act_dim + hidden_sizes[-1] + 1 + act_dim)
