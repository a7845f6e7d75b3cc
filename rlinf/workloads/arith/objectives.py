"""Training objectives over target-aligned token log-probabilities: supervised (warm start) and GRPO.

An objective is a callable ``(logprobs [B, T - 1], batch) -> ObjectiveTerms``; a train backend computes the
log-probabilities with its own model and differentiates ``terms.loss``. Both objectives average over the
tokens of a sequence and then over sequences, so a micro-batch loss weighted by its share of sequences sums to
the loss of the whole batch (gradient accumulation is exact).
"""

from __future__ import annotations

from typing import Protocol

import attrs
import torch

from rlinf.algorithms.grpo import GrpoConfig, grpo_loss, masked_sequence_mean
from rlinf.core.errors import ConfigError
from rlinf.workloads.arith.batches import TrainBatch


@attrs.frozen(kw_only=True)
class ObjectiveTerms:
    """A differentiable scalar loss and its parts as floats."""

    loss: torch.Tensor
    policy_loss: float = 0.0
    kl: float = 0.0
    clip_fraction: float = 0.0


class Objective(Protocol):
    def __call__(self, logprobs: torch.Tensor, batch: TrainBatch) -> ObjectiveTerms: ...


@attrs.frozen
class SupervisedObjective:
    """Negative log-likelihood of the response tokens (the warm start on worked solutions)."""

    def __call__(self, logprobs: torch.Tensor, batch: TrainBatch) -> ObjectiveTerms:
        loss = -masked_sequence_mean(logprobs, batch.response_mask).mean()
        return ObjectiveTerms(loss=loss, policy_loss=float(loss.detach()))


@attrs.frozen
class GrpoObjective:
    """The GRPO loss of :mod:`rlinf.algorithms.grpo` on a batch carrying advantages and old log-probabilities."""

    config: GrpoConfig

    def __call__(self, logprobs: torch.Tensor, batch: TrainBatch) -> ObjectiveTerms:
        advantages, old_logprobs = batch.advantages, batch.old_logprobs
        if advantages is None or old_logprobs is None:
            raise ConfigError(
                "batch",
                "advantages/old_logprobs missing",
                "GRPO needs advantages and old-policy log-probabilities",
                "score the batch with the inference component first",
            )
        terms = grpo_loss(
            logprobs, old_logprobs, batch.ref_logprobs, advantages, batch.response_mask, self.config
        )
        return ObjectiveTerms(
            loss=terms.loss, policy_loss=terms.policy_loss, kl=terms.kl, clip_fraction=terms.clip_fraction
        )
