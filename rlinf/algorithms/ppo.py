"""PPO as pure functions: generalized advantage estimation, the clipped surrogate loss, and running
normalisation statistics as an immutable value (Schulman et al. 2017; GAE: Schulman et al. 2016)."""

from __future__ import annotations

import attrs
import numpy as np
import torch


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    *,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns for time-major arrays ``[T, N]``.

    ``dones[t]`` is 1 when the episode ended at step ``t`` (no bootstrap across it); ``last_values`` ``[N]`` are
    the values of the observations after the last step. ``delta_t = r_t + gamma V_{t+1} (1 - d_t) - V_t`` and
    ``A_t = delta_t + gamma lam (1 - d_t) A_{t+1}``; returns are ``A + V``."""
    rewards, values, dones = (np.asarray(a, dtype=np.float64) for a in (rewards, values, dones))
    steps = len(rewards)
    advantages = np.zeros_like(rewards)
    running = np.zeros_like(np.asarray(last_values, dtype=np.float64))
    next_values = np.asarray(last_values, dtype=np.float64)
    for t in reversed(range(steps)):
        alive = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_values * alive - values[t]
        running = delta + gamma * lam * alive * running
        advantages[t] = running
        next_values = values[t]
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)


def ppo_loss(
    new_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip_coef: float,
    value_coef: float,
    entropy_coef: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate + value regression - entropy bonus, and its parts.

    ``policy = mean(max(-A r, -A clip(r, 1-eps, 1+eps)))`` with ``r = exp(new - old)``;
    ``value = 0.5 mean((V - R)^2)``; ``loss = policy + value_coef value - entropy_coef mean(entropy)``."""
    ratio = torch.exp(new_log_probs - old_log_probs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    policy_loss = torch.max(unclipped, clipped).mean()
    value_loss = 0.5 * (new_values - returns).pow(2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy_mean
    with torch.no_grad():
        clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean().item()
        approx_kl = ((ratio - 1.0) - torch.log(ratio)).mean().item()
    stats = {
        "policy_loss": float(policy_loss.item()),
        "value_loss": float(value_loss.item()),
        "entropy": float(entropy_mean.item()),
        "clip_fraction": clip_fraction,
        "approx_kl": approx_kl,
    }
    return loss, stats


def normalize_advantages(advantages: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Zero mean, unit variance (per minibatch)."""
    return (advantages - advantages.mean()) / (advantages.std(unbiased=False) + eps)


@attrs.frozen
class RunningNorm:
    """Mean and variance of a stream of vectors (parallel-variance merge of Chan et al.), as a value."""

    mean: np.ndarray = attrs.field(
        converter=lambda v: np.asarray(v, dtype=np.float64), eq=attrs.cmp_using(eq=np.array_equal)
    )
    var: np.ndarray = attrs.field(
        converter=lambda v: np.asarray(v, dtype=np.float64), eq=attrs.cmp_using(eq=np.array_equal)
    )
    count: float = 1e-4

    @classmethod
    def zeros(cls, shape: tuple[int, ...]) -> RunningNorm:
        """No data yet: mean 0, variance 1 (with a tiny count so the first batch dominates)."""
        return cls(mean=np.zeros(shape), var=np.ones(shape), count=1e-4)

    def update(self, batch: np.ndarray) -> RunningNorm:
        """Statistics after also seeing ``batch`` (first axis = samples)."""
        batch = np.asarray(batch, dtype=np.float64)
        return self.merge(batch.mean(axis=0), batch.var(axis=0), float(len(batch)))

    def merge(self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: float) -> RunningNorm:
        """Statistics after also seeing a batch summarised by its mean, variance and count."""
        if batch_count <= 0:
            return self
        total = self.count + batch_count
        delta = batch_mean - self.mean
        mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        return RunningNorm(mean=mean, var=m2 / total, count=total)

    def normalize(self, x: np.ndarray, clip: float = 10.0, eps: float = 1e-8) -> np.ndarray:
        """``clip((x - mean) / sqrt(var + eps), -clip, clip)`` as float32."""
        out = (np.asarray(x, dtype=np.float64) - self.mean) / np.sqrt(self.var + eps)
        return np.clip(out, -clip, clip).astype(np.float32)


def discounted_returns(
    running: np.ndarray, rewards: np.ndarray, dones: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per-env discounted return after each step ``[T, N]`` (reset after episode ends), for reward scaling;
    returns (returns, running return after the last step)."""
    out = np.zeros_like(np.asarray(rewards, dtype=np.float64))
    current = np.asarray(running, dtype=np.float64)
    for t in range(len(rewards)):
        current = current * gamma + rewards[t]
        out[t] = current
        current = current * (1.0 - dones[t])
    return out, current
