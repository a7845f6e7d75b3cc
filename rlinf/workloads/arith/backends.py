"""Rollout and train backends behind one interface each, their torch implementations and the registry.

* :class:`RolloutBackend`: generates groups of responses (streaming finished groups), takes new weights in
  place, and can offload / onload its state for context switching. ``torch`` (default) runs
  :mod:`~rlinf.workloads.arith.generation`; ``vllm`` (optional) drives vLLM's offline engine.
* :class:`TrainBackend`: scores batches (log-probabilities), runs one optimizer step over a list of
  micro-batches with gradient accumulation, exports weights for the rollout, and saves / restores its state.
  ``torch`` (default) trains :class:`~rlinf.workloads.arith.model.DecoderTransformer` with AdamW; ``megatron``
  (optional, GPU only) trains a megatron-core ``GPTModel`` of the same shape.

Weights cross backends under the canonical names of ``DecoderTransformer.state_dict()``; a backend with other
names converts at its edge. The optional backends import their package lazily, inside the class.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import torch

from rlinf.core.errors import ConfigError, non_negative, positive
from rlinf.workloads.arith.batches import TrainBatch
from rlinf.workloads.arith.generation import GroupRollout, SamplingParams, stream_groups
from rlinf.workloads.arith.model import DecoderTransformer, TransformerConfig, token_logprobs
from rlinf.workloads.arith.objectives import Objective


@attrs.frozen(kw_only=True)
class OptimConfig:
    """AdamW settings of the actor."""

    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.99)
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables clipping."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up over the first steps (a fresh Adam's first steps are sign-sized)."""

    def __attrs_post_init__(self) -> None:
        positive("optim.lr", self.lr)
        non_negative("optim.warmup_steps", self.warmup_steps)
        non_negative("optim.weight_decay", self.weight_decay)
        non_negative("optim.max_grad_norm", self.max_grad_norm)


@attrs.frozen(kw_only=True)
class TrainMetrics:
    """What one optimizer step did (sequence-weighted means over its micro-batches)."""

    loss: float
    policy_loss: float
    kl: float
    clip_fraction: float
    grad_norm: float
    num_sequences: int
    num_micro_batches: int


@runtime_checkable
class RolloutBackend(Protocol):
    """Generates responses; holds a copy of the policy weights that the actor overwrites in place."""

    name: str

    def stream_groups(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        group_size: int,
        params: SamplingParams,
        seed: int,
        min_new_tokens: Sequence[int] | None = None,
    ) -> Iterator[GroupRollout]: ...

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None: ...

    def offload(self) -> None: ...

    def onload(self) -> None: ...


@runtime_checkable
class TrainBackend(Protocol):
    """Owns a trainable policy and its optimizer state."""

    name: str

    def logprobs(self, batch: TrainBatch) -> torch.Tensor: ...

    def train_step(self, micro_batches: Sequence[TrainBatch], objective: Objective) -> TrainMetrics: ...

    def weights(self) -> dict[str, torch.Tensor]: ...

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def offload(self) -> None: ...

    def onload(self) -> None: ...


class TorchRolloutBackend:
    """Generation with the project's own KV-cache sampler on CPU or one CUDA device."""

    name = "torch"

    def __init__(
        self, model_config: TransformerConfig, *, eos_id: int, pad_id: int, seed: int, device: str = "cpu"
    ) -> None:
        self.device = torch.device(device)
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.model = DecoderTransformer(model_config, seed=seed).to(self.device).eval()
        self.model.requires_grad_(False)

    def stream_groups(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        group_size: int,
        params: SamplingParams,
        seed: int,
        min_new_tokens: Sequence[int] | None = None,
    ) -> Iterator[GroupRollout]:
        """Yield each prompt group as soon as its responses have ended (see :func:`generation.stream_groups`)."""
        generator = torch.Generator(device=self.device).manual_seed(seed)
        return stream_groups(
            self.model,
            prompts,
            group_size=group_size,
            params=params,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            generator=generator,
            min_new_tokens=min_new_tokens,
        )

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy ``weights`` (canonical names) into the rollout model's existing tensors."""
        _copy_into(self.model, weights)

    def offload(self) -> None:
        """Move the weights to host memory (a no-op on CPU)."""
        self.model.to("cpu")

    def onload(self) -> None:
        self.model.to(self.device)


class TorchTrainBackend:
    """AdamW training of :class:`DecoderTransformer` in plain torch."""

    name = "torch"

    def __init__(
        self, model_config: TransformerConfig, *, optim: OptimConfig, seed: int, device: str = "cpu"
    ) -> None:
        self.device = torch.device(device)
        self.optim = optim
        self.model = DecoderTransformer(model_config, seed=seed).to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
        )
        self.num_steps = 0

    def _set_lr(self) -> None:
        scale = min(1.0, (self.num_steps + 1) / self.optim.warmup_steps) if self.optim.warmup_steps else 1.0
        for group in self.optimizer.param_groups:
            group["lr"] = self.optim.lr * scale

    def logprobs(self, batch: TrainBatch) -> torch.Tensor:
        """Target-aligned log-probabilities ``[B, T - 1]`` of the batch, without gradients."""
        with torch.no_grad():
            return token_logprobs(self.model, batch.tokens.to(self.device)).cpu()

    def train_step(self, micro_batches: Sequence[TrainBatch], objective: Objective) -> TrainMetrics:
        """One optimizer step; each micro-batch's loss is weighted by its share of the sequences."""
        positive("len(micro_batches)", len(micro_batches))
        total = sum(mb.num_sequences for mb in micro_batches)
        self.zero_grad()
        sums = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0}
        for mb in micro_batches:
            share = mb.num_sequences / total
            for key, value in self.accumulate(mb, objective, share).items():
                sums[key] += value * share
        grad_norm = self.apply_step()
        return TrainMetrics(
            grad_norm=grad_norm, num_sequences=total, num_micro_batches=len(micro_batches), **sums
        )

    def zero_grad(self) -> None:
        """Start accumulating the gradient of a new optimizer step."""
        self.optimizer.zero_grad(set_to_none=True)

    def accumulate(self, micro_batch: TrainBatch, objective: Objective, weight: float) -> dict[str, float]:
        """Add ``weight`` x the gradient of ``objective`` on ``micro_batch``; returns the unweighted loss terms.

        With weights equal to each micro-batch's share of a step's sequences, the accumulated gradient is the
        whole batch's (the objectives average per sequence)."""
        self.model.train()
        mb = micro_batch.to(self.device)
        terms = objective(token_logprobs(self.model, mb.tokens), mb)
        (terms.loss * weight).backward()
        return {
            "loss": float(terms.loss.detach()),
            "policy_loss": terms.policy_loss,
            "kl": terms.kl,
            "clip_fraction": terms.clip_fraction,
        }

    def apply_step(self, reduce_gradients: Callable[[list[torch.Tensor]], None] | None = None) -> float:
        """Clip and apply the accumulated gradient (after ``reduce_gradients`` averaged it over data-parallel
        replicas, when given); returns the gradient norm before clipping."""
        if reduce_gradients is not None:
            for parameter in self.model.parameters():
                if parameter.grad is None:
                    parameter.grad = torch.zeros_like(parameter)
            reduce_gradients([p.grad for p in self.model.parameters() if p.grad is not None])
        max_norm = self.optim.max_grad_norm if self.optim.max_grad_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        self._set_lr()
        self.optimizer.step()
        self.num_steps += 1
        return grad_norm

    def weights(self) -> dict[str, torch.Tensor]:
        """Detached views of the current weights under canonical names (copied by the receiver)."""
        return {name: tensor.detach() for name, tensor in self.model.state_dict().items()}

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Overwrite the model's weights (canonical names) in place; the optimizer state is kept."""
        _copy_into(self.model, weights)

    def state_dict(self) -> dict[str, Any]:
        """A snapshot (deep copy) of weights, optimizer state and step count; later steps do not change it."""
        return copy.deepcopy(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "num_steps": self.num_steps,
            }
        )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_steps = int(state["num_steps"])

    def offload(self) -> None:
        """Move weights and optimizer state to host memory (a no-op on CPU)."""
        _move_optimizer(self.optimizer, torch.device("cpu"))
        self.model.to("cpu")

    def onload(self) -> None:
        self.model.to(self.device)
        _move_optimizer(self.optimizer, self.device)


def _copy_into(model: torch.nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    own = model.state_dict()
    missing = sorted(set(own) - set(weights))
    unexpected = sorted(set(weights) - set(own))
    if missing or unexpected:
        raise ConfigError(
            "weights",
            sorted(weights)[:4],
            f"names differ: missing {missing}, unexpected {unexpected}",
            "sync from a policy of the same config",
        )
    with torch.no_grad():
        for name, tensor in own.items():
            tensor.copy_(weights[name])


def _move_optimizer(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                state[key] = value.to(device)
