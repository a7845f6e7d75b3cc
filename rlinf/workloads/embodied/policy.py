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


LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """``log N(actions; mean, exp(log_std)^2)`` summed over the action dimensions (the last), in closed form:
    what ``torch.distributions.Normal(mean, std).log_prob(actions).sum(-1)`` computes, without building a
    distribution object and checking its arguments on every call (about a third of a small policy's forward)."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: torch.Tensor, rows: int) -> torch.Tensor:
    """Entropy of a diagonal Gaussian with state-independent ``log_std``, summed over the action dimensions, for
    each of ``rows`` states."""
    return (0.5 + LOG_SQRT_2PI + log_std).sum().expand(rows)


class ActorCritic(nn.Module):
    """``pi(a|s) = N(mu(s), exp(log_std))`` and ``V(s)``, each an MLP with tanh hidden layers."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        self.mean = _mlp([obs_dim, *hidden_sizes, act_dim], 0.01)
        self.log_std = nn.Parameter(torch.zeros(act_dim))
        self.value = _mlp([obs_dim, *hidden_sizes, 1], 1.0)

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(obs)`` as a vector."""
        return self.value(obs).squeeze(-1)

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled actions, their log-probabilities and the values."""
        mean = self.mean(obs)
        log_std = self.log_std.expand_as(mean)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        actions = mean + log_std.exp() * noise
        return actions, gaussian_log_prob(actions, mean, log_std), self.values(obs)

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probabilities and entropies of ``actions`` at ``obs``, and ``V(obs)``."""
        mean = self.mean(obs)
        log_probs = gaussian_log_prob(actions, mean, self.log_std.expand_as(mean))
        return log_probs, gaussian_entropy(self.log_std, obs.shape[0]), self.values(obs)


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
