"""The engines behind the HF GRPO components: one interface each, the ``transformers`` implementations (default)
and the registry that names the optional ones.

* :class:`RolloutBackend` samples groups of responses (streaming finished groups) and takes new weights in
  place under Hugging Face ``state_dict`` names. ``hf`` runs :mod:`~rlinf.workloads.hf_grpo.generation` on the
  ``transformers`` model; ``vllm`` (optional, GPU) drives vLLM's offline engine
  (:mod:`~rlinf.workloads.hf_grpo.vllm_rollout`).
* :class:`PolicyBackend` scores response tokens (log-probabilities, differentiable when training) for the
  inference and actor components, and exports / takes weights under Hugging Face names. ``hf`` runs the
  ``transformers`` model; ``megatron`` (optional, GPU) a megatron-core ``GPTModel`` whose weights cross the
  interface through :mod:`~rlinf.workloads.hf_grpo.megatron_layout`
  (:mod:`~rlinf.workloads.hf_grpo.megatron_policy`).

Weights always cross backends under Hugging Face names, so any rollout backend takes any policy backend's
weights. The optional backends import their packages inside their classes only; :func:`check_backends` refuses
a choice whose package or GPU is missing with one line, before any worker starts. The workers build their backend
by name through :mod:`~rlinf.workloads.hf_grpo.backend_registry`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import torch

from rlinf.api import ConfigError
from rlinf.workloads.hf_grpo.checkpoints import load_model
from rlinf.workloads.hf_grpo.config import BACKEND_NAMES, BackendConfig
from rlinf.workloads.hf_grpo.generation import GroupRollout, SamplingParams, generate_all, stream_groups
from rlinf.workloads.hf_grpo.payloads import logits_to_response_logprobs, model_logits

PACKAGES = MappingProxyType({"vllm": "vllm", "megatron": "megatron.core"})
"""The importable package each optional backend needs (with a CUDA GPU)."""
INSTALL = MappingProxyType({"vllm": "pip install vllm", "megatron": "pip install megatron-core"})


def package_available(package: str) -> bool:
    """Whether ``package`` (possibly dotted) can be imported, without importing it."""
    try:
        return importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        return False


def check_packages() -> None:
    """Refuse the workload (one line) when the ``transformers`` or ``tokenizers`` package it runs on is missing."""
    for package in ("transformers", "tokenizers"):
        if not package_available(package):
            raise ConfigError(
                "workload",
                "grpo_hf",
                f"needs the {package} package, which is not installed",
                'pip install -e ".[hf]"',
            )


def check_backends(config: BackendConfig) -> None:
    """Refuse an optional backend whose package is not installed or that has no CUDA GPU (one line each)."""
    for component in BACKEND_NAMES:
        name = getattr(config, component)
        if name == "hf":
            continue
        field = f"backends.{component}"
        if not package_available(PACKAGES[name]):
            raise ConfigError(
                field,
                name,
                f"needs the {PACKAGES[name]} package, which is not installed",
                f"{INSTALL[name]} on a CUDA machine, or use {field}: hf",
            )
        if not torch.cuda.is_available():
            raise ConfigError(
                field,
                name,
                "needs a CUDA GPU and none is visible",
                f"run on a GPU machine or use {field}: hf",
            )


def require_cuda_device(field: str, name: str, device: torch.device) -> None:
    """Refuse a GPU-only backend placed on a non-CUDA device."""
    if device.type != "cuda" or not torch.cuda.is_available():
        raise ConfigError(
            field,
            name,
            f"runs on a CUDA GPU, not on {device}",
            f"train with --accelerator cuda or use {field}: hf",
        )


@runtime_checkable
class RolloutBackend(Protocol):
    """Samples responses; holds a copy of the policy that the actor's weights overwrite in place."""

    name: str

    def stream_groups(
        self, prompts: Sequence[Sequence[int]], *, group_size: int, params: SamplingParams, seed: int
    ) -> Iterator[GroupRollout]:
        """Yield each prompt's group of ``group_size`` responses as soon as all of them have ended."""
        ...

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Take the policy's weights (Hugging Face ``state_dict`` names) in place."""
        ...

    def weights(self) -> dict[str, torch.Tensor] | None:
        """A host copy of the weights for a checkpoint (None when the engine keeps them out of reach)."""
        ...

    def state_tensors(self) -> list[torch.Tensor]:
        """The tensors the executor moves to offload / onload (empty when the engine owns its memory)."""
        ...

    def offload(self) -> None:
        """Free device memory that :meth:`state_tensors` does not cover (vLLM's sleep mode)."""
        ...

    def onload(self) -> None:
        """Take back what :meth:`offload` freed (idempotent)."""
        ...


@runtime_checkable
class PolicyBackend(Protocol):
    """Scores response tokens under the policy, trains it, and exchanges weights under Hugging Face names.

    A backend subclasses this protocol and gives :meth:`logits`; the scoring, the trainable parameters, the train
    switch and the state tensors are the same for every backend (they read ``model``, a ``torch.nn.Module``)."""

    name: str
    model: Any
    """The ``torch.nn.Module`` that scores and trains."""

    def logits(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[b, steps, vocab]`` logits of right-padded sequences ``tokens`` (``mask``: 1 on real tokens)."""
        ...

    def response_logprobs(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor,
        prompt_len: torch.Tensor,
        width: int,
        temperature: float = 1.0,
    ) -> torch.Tensor:
        """``[b, width]`` log-probabilities under ``softmax(logits / temperature)`` of the response tokens of right-padded sequences
        (:func:`~rlinf.workloads.hf_grpo.payloads.logits_to_response_logprobs`); differentiable when grad is enabled."""
        return logits_to_response_logprobs(self.logits(tokens, mask), tokens, prompt_len, width, temperature)

    def parameters(self) -> list[torch.nn.Parameter]:
        """The trainable parameters (an optimizer steps them)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def train(self, mode: bool = True) -> None:
        """Switch the model to training (``mode``) or evaluation."""
        self.model.train(mode)

    def weights(self) -> dict[str, torch.Tensor]:
        """The weights under Hugging Face ``state_dict`` names (views; copy before changing them)."""
        ...

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Overwrite the weights (Hugging Face names) in place."""
        ...

    def state_tensors(self) -> list[torch.Tensor]:
        """Live tensors of the model (the executor moves them to offload / onload)."""
        return list(self.model.parameters()) + list(self.model.buffers())

    def generation_model(self) -> Any:
        """A ``transformers`` causal LM holding the current weights (held-out evaluation generates with it)."""
        ...


class HfRolloutBackend:
    """Sampling with the ``transformers`` model and its KV cache (:func:`generation.stream_groups`)."""

    name = "hf"
    sample: Callable[..., Iterator[GroupRollout]] = staticmethod(stream_groups)
    """The engine: groups of responses from the model (:func:`generation.stream_groups`: each as it ends)."""

    def __init__(
        self, directory: Path, *, device: torch.device, dtype: torch.dtype, eos_id: int, pad_id: int
    ):
        self.model = load_model(directory, device, dtype).eval().requires_grad_(False)
        self.eos_id, self.pad_id = eos_id, pad_id

    def stream_groups(
        self, prompts: Sequence[Sequence[int]], *, group_size: int, params: SamplingParams, seed: int
    ) -> Iterator[GroupRollout]:
        return self.sample(
            self.model,
            prompts,
            group_size=group_size,
            params=params,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            generator=torch.Generator().manual_seed(seed),
        )

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        self.model.load_state_dict(weights)

    def weights(self) -> dict[str, torch.Tensor]:
        return host_copy(self.model.state_dict())

    def state_tensors(self) -> list[torch.Tensor]:
        return list(self.model.parameters()) + list(self.model.buffers())

    def offload(self) -> None:
        """Nothing beyond :meth:`state_tensors`, which the executor moves."""

    def onload(self) -> None:
        """Nothing beyond :meth:`state_tensors`."""


class HfGenerateRolloutBackend(HfRolloutBackend):
    """Sampling with ``transformers``' ``generate`` and a static KV cache (``backends.rollout: hf-generate``):
    every group at the end of the batch, none streamed earlier (:func:`generation.generate_all`)."""

    name = "hf-generate"
    sample = staticmethod(generate_all)


class HfPolicyBackend(PolicyBackend):
    """The ``transformers`` model scoring and training in plain torch."""

    name = "hf"

    def __init__(self, directory: Path, *, device: torch.device, dtype: torch.dtype = torch.float32):
        self.model = load_model(directory, device, dtype)

    def logits(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return model_logits(self.model, tokens, mask)

    def weights(self) -> dict[str, torch.Tensor]:
        return {name: tensor.detach() for name, tensor in self.model.state_dict().items()}

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        self.model.load_state_dict(weights)

    def generation_model(self) -> Any:
        return self.model


def host_copy(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Host copies of ``weights`` (tied tensors become separate copies)."""
    return {name: tensor.detach().to("cpu").clone() for name, tensor in weights.items()}
